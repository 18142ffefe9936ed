//! Wall-clock time for a cycle, passed in: the engine and `execute` read the time only through
//! a [`Clock`], so unit tests set it. Waits (`sleep`, deadlines) use `tokio::time`, which
//! `#[tokio::test(start_paused = true)]` tests control; [`Clock::following_tokio`] makes the
//! wall clock move with it.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, from wherever this clock reads them.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Clock {
        Clock(Arc::new(now_ms))
    }

    /// A clock at `start_ms` that moves with tokio's time: in a test with paused time it
    /// advances exactly as `tokio::time::advance` or an auto-advanced sleep does.
    pub fn following_tokio(start_ms: u64) -> Clock {
        let base = tokio::time::Instant::now();
        Clock(Arc::new(move || {
            start_ms.saturating_add(base.elapsed().as_millis() as u64)
        }))
    }

    pub fn now_ms(&self) -> u64 {
        (self.0)()
    }

    /// [`Clock::now_ms`] as a `SystemTime` (for status files).
    pub fn system_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.now_ms())
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

/// The system's wall clock, for callers outside a cycle (the CLI, the daemon, metrics and
/// notifications); a cycle reads its [`Clock`]. The one place that reads it (`clippy.toml`).
#[allow(clippy::disallowed_methods)]
pub fn system_now() -> SystemTime {
    SystemTime::now()
}

/// [`system_now`] in milliseconds since the Unix epoch (0 before 1970).
pub fn now_ms() -> u64 {
    system_now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn follows_paused_tokio_time() {
        let clock = Clock::following_tokio(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now_ms(), 91_000);
        assert_eq!(clock.system_time(), UNIX_EPOCH + Duration::from_secs(91));
    }
}
