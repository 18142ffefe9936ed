//! What proxsync tells the world as it runs, beside the status files: Prometheus metrics and
//! `[[notify]]` notifications. Components count into it; it decides nothing.

pub(crate) mod listener;
pub(crate) mod metrics;
pub mod notify;
