//! A guest's HTTP service for the health checks' tests: a TCP server on 127.0.0.1 whose status
//! line a test sets.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

/// A TCP server on 127.0.0.1 that answers each request with the status line it holds (one
/// connection at a time, as a guest's service would).
pub struct Http {
    pub port: u16,
    line: Arc<std::sync::Mutex<String>>,
}

impl Http {
    /// Serves `line` (`HTTP/1.1 200 OK`) until [`Http::answer`] changes it.
    pub fn start(line: &str) -> Http {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let line = Arc::new(std::sync::Mutex::new(line.to_string()));
        let answer = line.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf);
                let head = answer.lock().unwrap().clone();
                let _ = stream.write_all(format!("{head}\r\nContent-Length: 0\r\n\r\n").as_bytes());
            }
        });
        Http { port, line }
    }

    /// Answers `line` from now on.
    pub fn answer(&self, line: &str) {
        *self.line.lock().unwrap() = line.to_string();
    }
}
