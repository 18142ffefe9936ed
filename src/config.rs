//! config (stub)
