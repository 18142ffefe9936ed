//! What a client reports as it works, for whoever counts it: the client holds an
//! `Arc<dyn Meter>` and knows nothing of what is behind it (the daemon's metrics implement it).

use std::time::Duration;

/// Receives a client's counts. Each call is cheap and never fails.
pub trait Meter: Send + Sync {
    /// One HTTP exchange with PVE: `status` is `None` when no answer came (connect, TLS,
    /// timeout).
    fn request(&self, method: &str, path: &str, status: Option<u16>, took: Duration);
    /// A PVE task started (its UPID came back), by type.
    fn task_started(&self, kind: &str);
    /// A PVE task that stopped with an error, by type.
    fn task_failed(&self, kind: &str);
    /// How many actions may run at once on `node` now.
    fn parallel_limit(&self, node: &str, limit: u32);
}

/// Counts nothing: a client's meter until it is given one.
pub struct NoMeter;

impl Meter for NoMeter {
    fn request(&self, _: &str, _: &str, _: Option<u16>, _: Duration) {}
    fn task_started(&self, _: &str) {}
    fn task_failed(&self, _: &str) {}
    fn parallel_limit(&self, _: &str, _: u32) {}
}
