//! A loopback TCP proxy of one relay process: the relay connects to it instead of to PostgreSQL
//! or the broker, so the run knows every connection that relay opened — the local port of each
//! connection the proxy makes upstream is the port the server sees (`inet_client_port()` in
//! PostgreSQL), which names the relay in the recorded history — and can cut them all at once.
//! It works for any driver (libpq, JDBC, a broker client): it only copies bytes.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One relay's proxy in front of one server.
pub struct Proxy {
    /// The port the relay connects to (on 127.0.0.1).
    pub port: u16,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Both ends of every connection still open, by the connection's number.
    live: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    /// The local port of every connection made upstream, in order.
    upstream_ports: Mutex<Vec<u16>>,
    stopped: AtomicBool,
    /// A partition: bytes are held, not forwarded, until it ends.
    held: AtomicBool,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Proxy, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot open a loopback port: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for (number, client) in (0u64..).zip(listener.incoming()) {
                if shared.stopped.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                if let Ok(local) = server.local_addr() {
                    shared.upstream_ports.lock().unwrap_or_else(|p| p.into_inner()).push(local.port());
                }
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { continue };
                if let (Ok(c3), Ok(s3)) = (client.try_clone(), server.try_clone()) {
                    shared.live.lock().unwrap_or_else(|p| p.into_inner()).push((number, c3, s3));
                }
                let (one, other) = (shared.clone(), shared.clone());
                std::thread::spawn(move || pipe(client, server, &one, number));
                std::thread::spawn(move || pipe(s2, c2, &other, number));
            }
        });
        Ok(Proxy { port, state })
    }

    /// The local ports of every connection the proxy made upstream so far.
    pub fn upstream_ports(&self) -> Vec<u16> {
        self.state.upstream_ports.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Cuts every open connection, both ends at once.
    pub fn cut(&self) {
        self.state.cut();
    }

    /// A partition of `ms`: nothing is forwarded either way (a publication in flight gets no
    /// answer), then every open connection is cut, as a partition that ends in a reset.
    pub fn partition(&self, ms: u64) {
        self.state.held.store(true, Ordering::Relaxed);
        let state = self.state.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            state.cut();
            state.held.store(false, Ordering::Relaxed);
        });
    }
}

impl State {
    fn cut(&self) {
        for (_, client, server) in self.live.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        self.cut();
    }
}

/// Copies `from` to `to` until either side ends, then closes both; bytes read during a
/// partition are held until it ends (and dropped when it ends in a cut). The connection
/// (`number`) is then no longer live.
fn pipe(mut from: TcpStream, mut to: TcpStream, state: &State, number: u64) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                while state.held.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    state.live.lock().unwrap_or_else(|p| p.into_inner()).retain(|(n, ..)| *n != number);
}
