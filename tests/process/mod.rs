//! Shared by the tests that start processes: a child killed when dropped, and a free port.

use std::net::TcpListener;
use std::process::Child;

/// A child process, killed and reaped when dropped (also when the test panics).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port on 127.0.0.1 that nothing listens on right now.
#[allow(dead_code)]
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}
