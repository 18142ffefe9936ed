//! The foundation's helpers (`proxsync_spec::util`), with the two that need tokio: running
//! jobs per key ([`lanes`]) and a clock that follows tokio's time.

pub use proxsync_spec::util::{clock, duration, fnv, par, state_dir, time};

pub(crate) mod lanes;

use clock::Clock;

/// A clock at `start_ms` that moves with tokio's time: in a test with paused time it advances
/// exactly as `tokio::time::advance` or an auto-advanced sleep does.
pub fn clock_following_tokio(start_ms: u64) -> Clock {
    let base = tokio::time::Instant::now();
    Clock::from_fn(move || start_ms.saturating_add(base.elapsed().as_millis() as u64))
}

/// In a test, `take` once the lock it takes is free. A lock (`flock`) this process dropped can
/// stay held for a moment: another test's thread that forks a child (git, gpg, ssh-keygen)
/// copies every descriptor into it, and the copy holds the lock until the child's exec closes
/// it. A lock that is never released still fails, after ten seconds.
#[cfg(test)]
pub(crate) fn once_free<T, E: std::fmt::Debug>(mut take: impl FnMut() -> Result<T, E>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match take() {
            Ok(held) => return held,
            Err(e) if std::time::Instant::now() > deadline => panic!("never released: {e:?}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_tokio_time() {
        let clock = clock_following_tokio(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now_ms(), 91_000);
        assert_eq!(clock.system_time(), UNIX_EPOCH + Duration::from_secs(91));
    }
}
