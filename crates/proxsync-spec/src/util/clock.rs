//! Wall-clock time for a cycle, passed in: the engine and `execute` read the time only through
//! a [`Clock`], so unit tests set it. Waits (`sleep`, deadlines) use `tokio::time`, which
//! `#[tokio::test(start_paused = true)]` tests control; `proxsync::util::clock_following_tokio`
//! makes the wall clock move with it (this crate has no async runtime).

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

    /// A clock that reads `now_ms` (a test's, or one that follows tokio's paused time).
    pub fn from_fn(now_ms: impl Fn() -> u64 + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(now_ms))
    }

    /// The time now, in milliseconds since the Unix epoch.
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
