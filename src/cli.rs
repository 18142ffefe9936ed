//! cli (stub)
