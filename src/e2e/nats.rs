//! A NATS server with JetStream that the run starts itself — on a free loopback port, with a
//! store folder of its own — so it can kill the broker and start it again on the same port and
//! store; and the client calls the relays and the consumer make.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The stream the relays publish to, and its subjects.
pub const STREAM: &str = "OUTBOX_CHECK_E2E";
pub const SUBJECT_PREFIX: &str = "outbox";
/// The durable consumer that records every delivery.
pub const CONSUMER: &str = "outbox-check-consumer";
/// The header NATS JetStream deduplicates on.
pub const MSG_ID: &str = "Nats-Msg-Id";
/// The header naming the publication that sent a copy (the consumer reads it back).
pub const PUBLICATION: &str = "Outbox-Check-Publication";

/// A `nats-server -js` child process.
pub struct NatsServer {
    binary: PathBuf,
    port: u16,
    store: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A loopback port nobody listens on now.
pub fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free loopback port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| format!("no free loopback port: {e}"))
}

impl NatsServer {
    /// Starts `binary` on a free port with its store under `dir`, and waits until it answers.
    pub fn start(binary: &Path, dir: &Path) -> Result<NatsServer, String> {
        let mut server = NatsServer {
            binary: binary.to_path_buf(),
            port: free_port()?,
            store: dir.join("nats-store"),
            log: dir.join("nats-server.log"),
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new(&self.binary);
        command
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js", "-sd"])
            .arg(&self.store)
            .arg("-l")
            .arg(&self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        super::die_with_parent(&mut command);
        let child = command.spawn().map_err(|e| format!("cannot start {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        // Ready when it accepts a connection (JetStream answers right after).
        let started = Instant::now();
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!(
                    "{} exited at start ({status}); its log: {}",
                    self.binary.display(),
                    self.log.display()
                ));
            }
            if started.elapsed() > Duration::from_secs(10) {
                return Err(format!(
                    "{} did not accept connections on port {} within 10 s",
                    self.binary.display(),
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: the broker dies with whatever it had not written (its store keeps what it had).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and store.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.spawn()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// A current-thread runtime for the client's calls (the relays and the consumer block on it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
}

/// Connects, trying again while the server is away (it reconnects by itself afterwards).
pub async fn connect(url: &str) -> Result<async_nats::Client, String> {
    async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .retry_on_initial_connect()
        .reconnect_delay_callback(|attempts| Duration::from_millis((50 * attempts as u64).min(500)))
        .connect(url)
        .await
        .map_err(|e| format!("NATS at {url}: {e}"))
}

/// The JetStream context of a client, its requests and acknowledgements waited on for `timeout`.
pub fn jetstream(client: async_nats::Client, timeout: Duration) -> async_nats::jetstream::Context {
    async_nats::jetstream::ContextBuilder::new().timeout(timeout).ack_timeout(timeout).build(client)
}

/// Creates the stream, file-backed, deduplicating within `window`.
pub async fn create_stream(js: &async_nats::jetstream::Context, window: Duration) -> Result<(), String> {
    use async_nats::jetstream::stream;
    let config = stream::Config {
        name: STREAM.to_string(),
        subjects: vec![format!("{SUBJECT_PREFIX}.>")],
        storage: stream::StorageType::File,
        duplicate_window: window,
        ..Default::default()
    };
    js.create_stream(config).await.map(|_| ()).map_err(|e| format!("cannot create the JetStream stream: {e}"))
}

/// What the broker answered a publication, as the relay sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Stored (`duplicate`: the broker already had the message id within its window and stored
    /// nothing new), at stream sequence `sequence` where the broker numbers what it stores.
    Ack { sequence: Option<u64>, duplicate: bool },
    /// No answer in time, or the connection went before it came: stored or not, unknown.
    Timeout,
    /// Refused before it reached a stream: nothing stored.
    Unavailable,
}

/// Publishes `message` under its id. With `cut`, the relay flushes the publication onto the
/// wire and then drops its connection before reading the acknowledgement (the broker may well
/// have stored it): the relay hears nothing.
pub async fn publish(
    client: &async_nats::Client,
    js: &async_nats::jetstream::Context,
    message: &str,
    publication: &str,
    payload: Vec<u8>,
    cut: bool,
) -> Answer {
    use async_nats::jetstream::context::PublishErrorKind;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(MSG_ID, message);
    headers.insert(PUBLICATION, publication);
    let subject = format!("{SUBJECT_PREFIX}.{message}");
    let ack = match js.publish_with_headers(subject, headers, payload.into()).await {
        Ok(ack) => ack,
        Err(_) => return Answer::Unavailable,
    };
    if cut {
        let _ = client.flush().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(ack);
        return Answer::Timeout;
    }
    match ack.await {
        Ok(ack) => Answer::Ack { sequence: Some(ack.sequence), duplicate: ack.duplicate },
        Err(e) if e.kind() == PublishErrorKind::StreamNotFound => Answer::Unavailable,
        Err(_) => Answer::Timeout,
    }
}
