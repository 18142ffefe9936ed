//! The spec format (stub; being written).
