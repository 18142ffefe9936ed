//! Errors of the PVE client, with PVE's own text kept verbatim and a [`Category`] for each.

use std::collections::BTreeMap;
use std::fmt;

use super::texts::{self, Meaning};
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
        /// The HTTP method (`GET`, `POST`, ...).
        method: String,
        /// The API path below `/api2/json` (`/nodes/pve1/qemu/100/config`).
        path: String,
        /// The HTTP status.
        status: u16,
        /// PVE's message: the body's `message`, else the status line's reason phrase.
        message: String,
        /// Per-parameter messages of a 400 ("Parameter verification failed.").
        errors: BTreeMap<String, String>,
    },
    /// The request did not get an HTTP answer.
    #[error("{method} {path}: {message}")]
    Transport {
        /// The HTTP method (`GET`, `POST`, ...).
        method: String,
        /// The API path below `/api2/json` (`/nodes/pve1/qemu/100/config`).
        path: String,
        /// What failed: connecting, TLS or the timeout.
        kind: TransportKind,
        /// The HTTP client's error with its chain of causes.
        message: String,
    },
    /// An answer arrived but is not what the schema promises.
    #[error("{method} {path}: unexpected answer from Proxmox VE: {message}")]
    Decode {
        /// The HTTP method (`GET`, `POST`, ...).
        method: String,
        /// The API path below `/api2/json` (`/nodes/pve1/qemu/100/config`).
        path: String,
        /// What is wrong with the answer.
        message: String,
    },
    /// A task ended with something other than `OK` or `WARNINGS: n`.
    #[error("task {upid} failed: {exitstatus}")]
    TaskFailed {
        /// The task's UPID.
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

    /// What PVE's words (an answer's message or a task's exit status) mean, when they are
    /// one of the texts `pve::texts` knows.
    pub fn meaning(&self) -> Option<Meaning> {
        match self {
            Error::Api { message, .. } => texts::meaning(message),
            Error::TaskFailed { exitstatus, .. } => texts::meaning(exitstatus),
            _ => None,
        }
    }

    /// PVE refused this parameter of the request (a 400 whose per-parameter errors name it):
    /// nothing was done.
    pub fn rejects_parameter(&self, name: &str) -> bool {
        matches!(self, Error::Api { status: 400, errors, .. } if errors.contains_key(name))
    }

    /// The category (docs/status.md, "Conditions") this failure belongs to: by the HTTP status,
    /// else by PVE's words (`pve::texts`).
    pub fn category(&self) -> Category {
        let by_text = || self.meaning().and_then(Meaning::category);
        match self {
            Error::Api { status, .. } => match *status {
                401 => Category::AuthenticationError,
                403 => Category::PermissionDenied,
                400 => by_text().unwrap_or(Category::ConfigurationError),
                501 => Category::ApiNotSupported,
                // pveproxy could not reach the node that owns the resource.
                595 | 596 => Category::NodeUnhealthy,
                502..=504 => Category::NetworkError,
                _ => by_text().unwrap_or(Category::ProxmoxError),
            },
            Error::Transport { kind, .. } => match kind {
                TransportKind::Tls => Category::ConfigurationError,
                TransportKind::Connect | TransportKind::Timeout => Category::NetworkError,
            },
            Error::Decode { .. } => Category::ProxmoxError,
            Error::TaskFailed { .. } => by_text().unwrap_or(Category::TaskFailed),
            Error::Setup(_) => Category::ConfigurationError,
            Error::NotPermitted(_) => Category::Conflict,
        }
    }

    /// The guest's config is locked (`VM is locked (clone)`, `CT is locked (disk)`, `can't lock
    /// file ... got timeout`).
    pub fn is_lock(&self) -> bool {
        self.category() == Category::LockError
    }

    /// PVE could not get or keep a lock in time ([`is_lock_timeout`]): the node or its storage
    /// is busier than its lock timeout allows.
    pub fn is_lock_timeout(&self) -> bool {
        self.meaning().is_some_and(Meaning::is_contention)
    }

    /// True when the failure says the node is overloaded rather than something about the
    /// request or the guest: a request that timed out, lock contention (in an answer or a
    /// task's exit status), a gateway's or pveproxy's 5xx, or a 5xx whose text proxsync does
    /// not know. A text `pve::texts` knows is an answer unless it is lock contention: a lock a
    /// task holds, a digest mismatch, `already exists`, `does not exist`, no quorum, a refusal
    /// of the request as sent (`unable to shrink disk size`, an MTU above the bridge's) are not
    /// load, however PVE's handler answered them (a plain `die` is HTTP 500). The adaptive
    /// concurrency (`crate::concurrency`) cuts the node's limit on these.
    pub fn is_overload(&self) -> bool {
        match self {
            Error::Transport { kind, .. } => *kind == TransportKind::Timeout,
            Error::TaskFailed { .. } => self.is_lock_timeout(),
            Error::Api {
                status: 502..=504 | 595..=597,
                ..
            } => true,
            Error::Api { status, .. } if *status >= 500 && *status != 501 => {
                self.meaning().is_none_or(Meaning::is_contention)
            }
            _ => false,
        }
    }

    /// The VMID is taken (`unable to create VM N - VM N already exists on node '...'`).
    pub fn is_already_exists(&self) -> bool {
        self.category() == Category::AlreadyExists
    }

    /// The guest does not exist (`Configuration file '...' does not exist`).
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
    /// words that mean "nothing was done" (`pve::texts::Meaning::nothing_done`: the VMID is
    /// taken, the guest or its source is locked, no quorum, a refusal of the request as sent).
    /// Everything else (any other 5xx, a transport error, an unreadable answer) may have
    /// started the work: a create that ends like that keeps its intent until a read settles it.
    pub fn surely_not_executed(&self) -> bool {
        match self {
            Error::Api {
                status: 400 | 401 | 403 | 501,
                ..
            } => true,
            Error::Api { status: 500, .. } => self.meaning().is_some_and(Meaning::nothing_done),
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

/// PVE's words for lock contention (`pve::texts`, [`Meaning::is_contention`]): it gave up
/// waiting for a lock (pve-common `lock_file_full`'s `can't lock file '...' - got timeout`, a
/// VM's or container's config lock or a local storage's; pve-cluster `$cfs_lock`'s `cfs-lock
/// '...' error: got lock request timeout`, a shared storage's), or cut off work that held a
/// cluster lock too long (`'storage-ID'-locked command timed out - aborting`). A clone that
/// dies on one is `clone failed: can't lock file ...` (qemu-server `clone_vm`).
pub fn is_lock_timeout(text: &str) -> bool {
    texts::meaning(text).is_some_and(Meaning::is_contention)
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
            // pve-container's words for the same facts (pve-guest-common check_lock with
            // guest_type `CT`; pve-common assert_if_modified).
            (500, "CT is locked (disk)", Category::LockError),
            (500, "CT is locked (backup)", Category::LockError),
            (
                500,
                "detected modified configuration - file changed by other user? Try again.",
                Category::Conflict,
            ),
            (
                500,
                "can't lock file '/run/lock/lxc/pve-config-101.lock' - got timeout",
                Category::LockError,
            ),
            (
                500,
                "Configuration file 'nodes/pve1/lxc/101.conf' does not exist",
                Category::NotFound,
            ),
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
            (
                500,
                "checksum mismatch (file change by other user?)",
                Category::Conflict,
            ),
            // qemu-server before 8.2.5 (PVE 8.0 to 8.2) spelt it so.
            (
                500,
                "checksum missmatch (file change by other user?)",
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

    /// The classifier says of each text of the table what its row says: in an answer (HTTP
    /// 500, a plain `die` in PVE's handler) and in a task's exit status alike.
    #[test]
    fn every_text_of_the_table_is_classified_as_its_row_says() {
        for row in texts::TEXTS {
            for sample in row.samples {
                let e = api(500, sample);
                let want = row.meaning.category();
                assert_eq!(e.meaning(), Some(row.meaning), "{sample}");
                assert_eq!(
                    e.category(),
                    want.unwrap_or(Category::ProxmoxError),
                    "{sample}"
                );
                assert_eq!(e.is_overload(), row.meaning.is_contention(), "{sample}");
                assert_eq!(e.is_lock_timeout(), row.meaning.is_contention(), "{sample}");
                assert_eq!(
                    e.surely_not_executed(),
                    row.meaning.nothing_done(),
                    "{sample}"
                );
                let task = Error::TaskFailed {
                    upid: "u".into(),
                    exitstatus: sample.to_string(),
                    log_tail: vec![],
                };
                assert_eq!(
                    task.category(),
                    want.unwrap_or(Category::TaskFailed),
                    "{sample}"
                );
                assert_eq!(task.is_overload(), row.meaning.is_contention(), "{sample}");
            }
        }
    }

    #[test]
    fn a_refused_parameter_is_named_by_its_key() {
        let mut errors = BTreeMap::new();
        errors.insert(
            "overrule-shutdown".to_string(),
            "Not applicable for HA resources.".to_string(),
        );
        let e = Error::Api {
            method: "POST".into(),
            path: "/nodes/pve1/qemu/100/status/stop".into(),
            status: 400,
            message: "Parameter verification failed.".into(),
            errors,
        };
        assert!(e.rejects_parameter("overrule-shutdown"));
        assert!(!e.rejects_parameter("purge"));
        // A text naming the parameter is not its refusal.
        assert!(!api(500, "overrule-shutdown failed").rejects_parameter("overrule-shutdown"));
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
    fn lock_timeouts_are_lock_errors_and_overload() {
        let local = "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout";
        let shared = "cfs-lock 'storage-ceph' error: got lock request timeout";
        let config = "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout";
        // pve-cluster's $cfs_lock cut off work under a shared storage's lock at 60 s.
        let held_long = "'storage-ceph'-locked command timed out - aborting";
        for text in [local, shared, config, held_long] {
            assert!(is_lock_timeout(text), "{text}");
            let e = api(500, text);
            assert_eq!(e.category(), Category::LockError, "{text}");
            assert!(e.is_lock_timeout() && e.is_overload(), "{text}");
            // A clone's task dies with it (qemu-server clone_vm: `die "clone failed: $err"`).
            let task = Error::TaskFailed {
                upid: "u".into(),
                exitstatus: format!("clone failed: {text}"),
                log_tail: vec![],
            };
            assert_eq!(task.category(), Category::LockError, "{text}");
            assert!(task.is_lock_timeout() && task.is_overload(), "{text}");
            assert!(!task.category().needs_human(), "retried, never Stalled");
        }
        // A lock a task holds is an answer about the guest, not load.
        for text in ["VM is locked (backup)", "CT is locked (disk)"] {
            let held = api(500, text);
            assert!(held.is_lock() && !held.is_lock_timeout() && !held.is_overload());
            assert!(held.surely_not_executed(), "{text}");
        }
    }

    #[test]
    fn only_load_counts_as_overload() {
        let timeout = Error::Transport {
            method: "GET".into(),
            path: "/nodes/pve1/qemu/100/config".into(),
            kind: TransportKind::Timeout,
            message: "timed out".into(),
        };
        assert!(timeout.is_overload());
        let connect = Error::Transport {
            method: "GET".into(),
            path: "/nodes/pve1/qemu/100/config".into(),
            kind: TransportKind::Connect,
            message: "connection refused".into(),
        };
        assert!(
            !connect.is_overload(),
            "a refused connection is not a busy node"
        );
        for e in [
            api(502, "Bad Gateway"),
            api(503, "Service Unavailable"),
            api(596, "Connection timed out"),
            api(500, "got timeout"),
            api(500, "fork failed: Resource temporarily unavailable"),
        ] {
            assert!(e.is_overload(), "{e}");
        }
        for e in [
            api(
                500,
                "unable to create VM 100 - VM 100 already exists on node 'pve1'",
            ),
            api(
                500,
                "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist",
            ),
            api(500, "checksum mismatch (file change by other user?)"),
            // Deterministic refusals, a plain `die` in PVE's handler (HTTP 500): answers.
            api(500, "disk is already at specified size"),
            api(500, "unable to shrink disk size"),
            api(500, "shrinking disks is not supported"),
            api(
                500,
                "net0: MTU size '9000' is bigger than bridge MTU '1500'",
            ),
            api(
                500,
                "Full clone of a running container is only possible from a snapshot",
            ),
            api(500, "CT is locked (disk)"),
            api(
                500,
                "detected modified configuration - file changed by other user? Try again.",
            ),
            api(500, "CT 101 not running"),
            // A guest agent that does not answer (every converge asks a VM's for its
            // addresses, a health check pings it): the guest's state, not the node's load.
            api(500, "QEMU guest agent is not running"),
            api(500, "No QEMU guest agent configured"),
            api(500, "VM 100 qmp command 'guest-ping' failed - got timeout"),
            api(500, "VM is paused - cannot shutdown"),
            api(500, "cluster not ready - no quorum?"),
            api(500, "no such resource 'ct:101'"),
            api(501, "Method 'GET /x' not implemented"),
            api(400, "Parameter verification failed."),
            api(403, "Permission check failed (/vms/100, VM.Allocate)"),
            Error::TaskFailed {
                upid: "u".into(),
                exitstatus: "start failed: QEMU exited with code 1".into(),
                log_tail: vec![],
            },
            Error::TaskFailed {
                upid: "u".into(),
                exitstatus: "net0: MTU size '9000' is bigger than bridge MTU '1500'".into(),
                log_tail: vec![],
            },
        ] {
            assert!(!e.is_overload(), "{e}");
        }
        // A gateway's or pveproxy's 5xx is load whatever its reason phrase says.
        assert!(api(596, "no such resource 'vm:1'").is_overload());
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
