//! Helpers shared by the integration tests (`use crate::common;` in a test file).
#![allow(dead_code, unused_imports)]

pub mod engine;
pub mod fakepve;
pub mod http;

pub use fakepve::{
    FakePve, RecordedRequest, Scenario, TEMPLATE_NAME, TEMPLATE_VMID, TOKEN_ID, TOKEN_SECRET,
    default_scenario, token_header, venv_program, verified_client,
};

/// `open` once the database it opens is free. A database this process closed can stay locked
/// for a moment: another test's thread that forks a child (fakepve, git) copies every
/// descriptor into it, and the copy holds redb's `flock` until the child's exec closes it (the
/// daemon's reload waits the same way). One never closed still fails, after ten seconds.
pub fn once_free<T, E: std::fmt::Debug>(mut open: impl FnMut() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Ok(held) => return held,
            Err(e) if std::time::Instant::now() > deadline => panic!("never released: {e:?}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// A free loopback port (bound, then released for a daemon's listener).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
