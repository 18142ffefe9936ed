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
