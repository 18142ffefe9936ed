//! Errors of the PVE client, with PVE's own text kept verbatim and a [`Category`] for each.

use std::collections::BTreeMap;
use std::fmt;

use crate::category::Category;

/// Why a transport-level failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// DNS, TCP connect, reset, or a request that could not be sent.
    Connect,
    /// The certificate was not trusted or the handshake failed.
    Tls,
    /// No answer within the request timeout.
    Timeout,
}

/// An error from one API call or task.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// PVE (or its proxy) answered with an HTTP error status.
    #[error("{method} {path}: HTTP {status}: {message}{}", fmt_params(.errors))]
    Api {
        method: String,
        path: String,
        status: u16,
        /// PVE's message: the body's `message`, else the status line's reason phrase.
        message: String,
        /// Per-parameter messages of a 400 ("Parameter verification failed.").
        errors: BTreeMap<String, String>,
    },
    /// The request did not get an HTTP answer.
    #[error("{method} {path}: {message}")]
    Transport {
        method: String,
        path: String,
        kind: TransportKind,
        message: String,
    },
    /// An answer arrived but is not what the schema promises.
    #[error("{method} {path}: unexpected answer from Proxmox VE: {message}")]
    Decode {
        method: String,
        path: String,
        message: String,
    },
    /// A task ended with something other than `OK` or `WARNINGS: n`.
    #[error("task {upid} failed: {exitstatus}")]
    TaskFailed {
        upid: String,
        /// PVE's exit status, e.g. `unable to create VM 100 - VM 100 already exists on node 'pve1'`.
        exitstatus: String,
        /// The last lines of the task log.
        log_tail: Vec<String>,
    },
    /// The client could not be built (bad CA file, unreadable secret, ...).
    #[error("{0}")]
    Setup(String),
    /// A destructive or identity-changing call without the gate's permit for it
    /// (`gate::permit`): refused before anything was sent.
    #[error("refused by the gate: {0}")]
    NotPermitted(String),
}

fn fmt_params(errors: &BTreeMap<String, String>) -> String {
    errors
        .iter()
        .map(|(k, v)| format!("; {k}: {}", v.trim_end()))
        .collect()
}

impl Error {
    /// The HTTP status, when PVE answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// PVE's own words (message or task exit status), verbatim.
    pub fn pve_message(&self) -> &str {
        match self {
            Error::Api { message, .. } => message,
            Error::Transport { message, .. } | Error::Decode { message, .. } => message,
            Error::TaskFailed { exitstatus, .. } => exitstatus,
            Error::Setup(m) | Error::NotPermitted(m) => m,
        }
    }

    /// The category of PRODUCT.md §4 this failure belongs to.
    pub fn category(&self) -> Category {
        match self {
            Error::Api {
                status, message, ..
            } => match *status {
                401 => Category::AuthenticationError,
                403 => Category::PermissionDenied,
                400 => classify_text(message).unwrap_or(Category::ConfigurationError),
                501 => Category::ApiNotSupported,
                // pveproxy could not reach the node that owns the resource.
                595 | 596 => Category::NodeUnhealthy,
                502..=504 => Category::NetworkError,
                _ => classify_text(message).unwrap_or(Category::ProxmoxError),
            },
            Error::Transport { kind, .. } => match kind {
                TransportKind::Tls => Category::ConfigurationError,
                TransportKind::Connect | TransportKind::Timeout => Category::NetworkError,
            },
            Error::Decode { .. } => Category::ProxmoxError,
            Error::TaskFailed { exitstatus, .. } => {
                classify_text(exitstatus).unwrap_or(Category::TaskFailed)
            }
            Error::Setup(_) => Category::ConfigurationError,
            Error::NotPermitted(_) => Category::Conflict,
        }
    }

    /// The VM config is locked (`VM is locked (clone)`, `can't lock file ... got timeout`).
    pub fn is_lock(&self) -> bool {
        self.category() == Category::LockError
    }

    /// The VMID is taken (`unable to create VM N - VM N already exists on node '...'`).
    pub fn is_already_exists(&self) -> bool {
        self.category() == Category::AlreadyExists
    }

    /// The VM does not exist (`Configuration file '...' does not exist`).
    pub fn is_not_found(&self) -> bool {
        self.category() == Category::NotFound
    }

    /// True for failures after which the request may or may not have been carried out: a
    /// timeout or a dropped connection, a gateway error, pveproxy's 595/596/597 (its
    /// forwarding to the node failed, possibly after the node received the request), or an
    /// answer we could not read. A write that ends like this must be checked by reading,
    /// never blindly resent.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            Error::Transport { kind, .. } => {
                matches!(kind, TransportKind::Timeout | TransportKind::Connect)
            }
            Error::Api { status, .. } => matches!(status, 502..=504 | 595..=597),
            Error::Decode { .. } => true,
            Error::TaskFailed { .. } | Error::Setup(_) | Error::NotPermitted(_) => false,
        }
    }

    /// True only when PVE certainly did not carry the request out: it refused it before doing
    /// anything (parameters, authentication, permission, an unsupported call) or said why in
    /// words that mean "nothing was done" (the VMID is taken, the VM is locked, no quorum).
    /// Everything else (any other 5xx, a transport error, an unreadable answer) may have
    /// started the work: a create that ends like that keeps its intent until a read settles it.
    pub fn surely_not_executed(&self) -> bool {
        match self {
            Error::Api {
                status: 400 | 401 | 403 | 501,
                ..
            } => true,
            Error::Api { status: 500, .. } => matches!(
                self.category(),
                Category::AlreadyExists | Category::LockError | Category::NodeUnhealthy
            ),
            Error::Transport {
                kind: TransportKind::Tls,
                ..
            }
            | Error::Setup(_)
            | Error::NotPermitted(_) => true,
            _ => false,
        }
    }
}

/// `VM 100 already exists`, `CT 100 already exists` (and `config file already exists`):
/// the VMID is taken. A storage's `disk image '...' already exists` is not.
fn vmid_taken(t: &str) -> bool {
    if t.contains("config file already exists") {
        return true;
    }
    t.match_indices(" already exists").any(|(at, _)| {
        let before = &t[..at];
        let digits = before.len() - before.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        digits > 0 && {
            let rest = before[..before.len() - digits].trim_end();
            rest.ends_with("vm") || rest.ends_with("ct")
        }
    })
}

/// Maps PVE's wording (from its sources) to a category, where the wording is specific.
fn classify_text(text: &str) -> Option<Category> {
    let t = text.to_ascii_lowercase();
    let has = |s: &str| t.contains(s);
    if vmid_taken(&t) {
        Some(Category::AlreadyExists)
    } else if has("vm is locked") || has("can't lock file") || has("got timeout") && has("lock") {
        Some(Category::LockError)
    } else if has("no quorum") || has("cluster not ready") {
        Some(Category::NodeUnhealthy)
    } else if has("checksum mismatch: got") {
        // An upload that arrived damaged (pve-storage `PVE/API2/Storage/Status.pm` upload:
        // `die "checksum mismatch: got '$checksum_got' != expect '$checksum'\n"`): the file,
        // not the config, changed; sending it again may help.
        None
    } else if has("checksum mismatch") || has("digest") && has("mismatch") {
        // The config digest (`checksum mismatch (file change by other user?)`).
        Some(Category::Conflict)
    } else if has("configuration file") && has("does not exist")
        || has("unable to find configuration file for vm")
    {
        Some(Category::NotFound)
    } else if has("no space left") || has("not enough space") || has("quota") {
        Some(Category::QuotaExceeded)
    } else if has("permission check failed") {
        Some(Category::PermissionDenied)
    } else if has("not implemented") {
        Some(Category::ApiNotSupported)
    } else if has("no such volume")
        || has("volume") && has("does not exist")
        || has("unable to parse volume")
        || has("no such template")
    {
        Some(Category::ImageNotFound)
    } else {
        None
    }
}

/// A short human summary: category plus PVE's text.
pub struct Summary<'a>(pub &'a Error);

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.0.category(), self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, message: &str) -> Error {
        Error::Api {
            method: "POST".into(),
            path: "/nodes/pve1/qemu".into(),
            status,
            message: message.into(),
            errors: BTreeMap::new(),
        }
    }

    #[test]
    fn pve_texts_map_to_categories() {
        let cases = [
            (500, "VM is locked (clone)", Category::LockError),
            (
                500,
                "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
                Category::LockError,
            ),
            (
                500,
                "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist",
                Category::NotFound,
            ),
            (
                500,
                "unable to create VM 100 - VM 100 already exists on node 'pve2'",
                Category::AlreadyExists,
            ),
            (500, "checksum mismatch", Category::Conflict),
            (
                500,
                "checksum mismatch (file change by other user?)",
                Category::Conflict,
            ),
            (
                500,
                "checksum mismatch: got 'e3b0c442' != expect '9f86d081'",
                Category::ProxmoxError,
            ),
            (
                500,
                "cluster not ready - no quorum?",
                Category::NodeUnhealthy,
            ),
            (
                501,
                "Method 'POST /nodes/pve1/qemu/100/importdisk' not implemented",
                Category::ApiNotSupported,
            ),
            (401, "authentication failure", Category::AuthenticationError),
            (
                403,
                "Permission check failed (/vms/100, VM.Allocate)",
                Category::PermissionDenied,
            ),
            (595, "No route to host", Category::NodeUnhealthy),
            (596, "Connection timed out", Category::NodeUnhealthy),
            (
                400,
                "Parameter verification failed.",
                Category::ConfigurationError,
            ),
            (
                500,
                "unable to create VM 100: config file already exists",
                Category::AlreadyExists,
            ),
            (
                500,
                "unable to find configuration file for VM 100 on node 'pve2'",
                Category::NotFound,
            ),
            // A storage's words: the VMID is not taken.
            (
                500,
                "disk image '/var/lib/vz/images/100/vm-100-disk-0.qcow2' already exists",
                Category::ProxmoxError,
            ),
            (
                500,
                "volume vm-100-disk-0 already exists",
                Category::ProxmoxError,
            ),
            (500, "something new", Category::ProxmoxError),
        ];
        for (status, message, want) in cases {
            assert_eq!(api(status, message).category(), want, "{status} {message}");
        }
    }

    #[test]
    fn task_failures_keep_their_words_and_are_classified() {
        let e = Error::TaskFailed {
            upid: "UPID:pve1:...".into(),
            exitstatus: "unable to create VM 100 - VM 100 already exists on node 'pve1'".into(),
            log_tail: vec![],
        };
        assert!(e.is_already_exists());
        assert!(e.to_string().contains("already exists on node 'pve1'"));
        let e = Error::TaskFailed {
            upid: "u".into(),
            exitstatus: "storage migration failed".into(),
            log_tail: vec![],
        };
        assert_eq!(e.category(), Category::TaskFailed);
        // An upload's checksum, not the config digest: no Conflict.
        let e = Error::TaskFailed {
            upid: "u".into(),
            exitstatus: "checksum mismatch: got 'e3b0c442' != expect '9f86d081'".into(),
            log_tail: vec![],
        };
        assert_eq!(e.category(), Category::TaskFailed);
    }

    #[test]
    fn parameter_errors_are_shown() {
        let mut errors = BTreeMap::new();
        errors.insert(
            "name".into(),
            "invalid format - value does not look like a valid DNS name\n".into(),
        );
        let e = Error::Api {
            method: "POST".into(),
            path: "/nodes/pve1/qemu".into(),
            status: 400,
            message: "Parameter verification failed.".into(),
            errors,
        };
        let text = e.to_string();
        assert!(
            text.contains("name: invalid format - value does not look like a valid DNS name"),
            "{text}"
        );
    }

    #[test]
    fn only_a_refusal_proves_that_nothing_was_done() {
        let refused = [
            api(400, "Parameter verification failed."),
            api(403, "Permission check failed (/vms/100, VM.Allocate)"),
            api(
                500,
                "unable to create VM 100 - VM 100 already exists on node 'pve1'",
            ),
            api(500, "cluster not ready - no quorum?"),
        ];
        for e in refused {
            assert!(e.surely_not_executed(), "{e}");
            assert!(!e.outcome_unknown(), "{e}");
        }
        let unknown = [
            api(596, "Connection timed out"),
            api(595, "No route to host"),
            api(597, "Broken pipe"),
            api(502, "Bad Gateway"),
            Error::Decode {
                method: "POST".into(),
                path: "/nodes/pve1/qemu".into(),
                message: "expected a UPID".into(),
            },
        ];
        for e in unknown {
            assert!(!e.surely_not_executed(), "{e}");
            assert!(e.outcome_unknown(), "{e}");
        }
        // Neither proven refused nor a transport failure: still not proof that nothing ran.
        assert!(!api(500, "something new").surely_not_executed());
    }

    #[test]
    fn timeouts_are_not_failures_of_the_write() {
        let e = Error::Transport {
            method: "POST".into(),
            path: "/nodes/pve1/qemu".into(),
            kind: TransportKind::Timeout,
            message: "timed out".into(),
        };
        assert!(e.outcome_unknown());
        assert_eq!(e.category(), Category::NetworkError);
        assert!(!api(500, "x").outcome_unknown());
    }
}
