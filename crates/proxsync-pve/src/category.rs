//! Error categories (docs/status.md, "Conditions"). Every failure proxsync reports carries one,
//! so status files, backoff and the operator all speak the same words.

use std::fmt;

/// What kind of failure this is, and so who has to act.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// The PVE version lacks a call or feature proxsync needs (HTTP 501, a too-old release).
    ApiNotSupported,
    /// Something in the config or the spec does not suit the cluster (HTTP 400, a TLS trust
    /// mismatch, a storage without the content type).
    ConfigurationError,
    /// The token or ticket was refused (HTTP 401).
    AuthenticationError,
    /// The token lacks a privilege (HTTP 403).
    PermissionDenied,
    /// Storage full, or a pool or resource limit reached.
    QuotaExceeded,
    /// The node is offline or unreachable through the cluster, or the cluster lost quorum.
    NodeUnhealthy,
    /// The image, template or volume named by a spec does not exist.
    ImageNotFound,
    /// The VM's config is locked by a task or a leftover lock.
    LockError,
    /// The API could not be reached or did not answer in time.
    NetworkError,
    /// A PVE task ended with an error.
    TaskFailed,
    /// The spec itself is invalid.
    ValidationFailed,
    /// The VM (or another object) does not exist (any more).
    NotFound,
    /// The object already exists (a VMID taken between nextid and create).
    AlreadyExists,
    /// The config changed under us (`digest` mismatch); re-read and retry.
    Conflict,
    /// PVE answered with an error proxsync has no better name for (its text is kept verbatim).
    ProxmoxError,
}

impl Category {
    /// Every category.
    pub const ALL: [Category; 15] = [
        Category::ApiNotSupported,
        Category::ConfigurationError,
        Category::AuthenticationError,
        Category::PermissionDenied,
        Category::QuotaExceeded,
        Category::NodeUnhealthy,
        Category::ImageNotFound,
        Category::LockError,
        Category::NetworkError,
        Category::TaskFailed,
        Category::ValidationFailed,
        Category::NotFound,
        Category::AlreadyExists,
        Category::Conflict,
        Category::ProxmoxError,
    ];

    /// The category with this name ([`Category::as_str`]), if any.
    pub fn from_name(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// The name used in status files and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::ApiNotSupported => "APINotSupported",
            Category::ConfigurationError => "ConfigurationError",
            Category::AuthenticationError => "AuthenticationError",
            Category::PermissionDenied => "PermissionDenied",
            Category::QuotaExceeded => "QuotaExceeded",
            Category::NodeUnhealthy => "NodeUnhealthy",
            Category::ImageNotFound => "ImageNotFound",
            Category::LockError => "LockError",
            Category::NetworkError => "NetworkError",
            Category::TaskFailed => "TaskFailed",
            Category::ValidationFailed => "ValidationFailed",
            Category::NotFound => "NotFound",
            Category::AlreadyExists => "AlreadyExists",
            Category::Conflict => "Conflict",
            Category::ProxmoxError => "ProxmoxError",
        }
    }

    /// True when retrying cannot help until a human changes something (the spec, the config,
    /// the token's permissions, the PVE version, the storage): such a spec is `Stalled` and
    /// retried only at the backoff cap or when its inputs change.
    pub fn needs_human(self) -> bool {
        matches!(
            self,
            Category::ApiNotSupported
                | Category::ConfigurationError
                | Category::AuthenticationError
                | Category::PermissionDenied
                | Category::QuotaExceeded
                | Category::ImageNotFound
                | Category::ValidationFailed
        )
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Category::ALL {
            assert_eq!(Category::from_name(c.as_str()), Some(c));
        }
        assert_eq!(Category::from_name("Nope"), None);
    }
}
