//! Status files (PRODUCT.md §5): the observed state of every spec, written back as YAML.
//!
//! The reconcile engine decides *what* the conditions are each cycle ([`SpecStatus`],
//! [`SummaryStatus`], [`OrphanEntry`]); this module turns that into files on disk with the
//! Cluster API v1beta2 / kstatus semantics:
//!
//! - one file per spec, `<dir>/<name>.yaml`, plus `_summary.yaml` and `_orphans.yaml`;
//! - written atomically (temp file in the same directory, fsync, rename) and only when the
//!   content changed, so a quiet cluster causes no disk writes and no `inotify` noise;
//! - the standard conditions (`Ready`, `Reconciling`, `Stalled`, `NodeHealthy`,
//!   `Provisioned`) are present from the first visit, `Unknown`/`NotYetObserved` until known;
//! - a condition's `lastTransitionTime` moves only when its `status` changes;
//! - `initialization.provisioned` becomes true once and never reverts.
//!
//! **Nothing secret**: this module writes only what it is given. Callers must never put
//! user-data, cloud-init content, passwords, tokens or keys into any field or message.
//! Free-text fields longer than [`MAX_MESSAGE_BYTES`] are truncated with `…`.
//!
//! The operator's reference for these files is `docs/status.md`.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Free-text fields (condition messages, task status, backoff message, errors) are cut to at
/// most this many bytes, ending with `…`.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// At most this many attempts are kept in a spec file's `history`.
pub const MAX_HISTORY: usize = 10;

/// The summary file's name in the status directory.
pub const SUMMARY_FILE: &str = "_summary.yaml";

/// The orphan report's name in the status directory.
pub const ORPHANS_FILE: &str = "_orphans.yaml";

/// Status files we read back larger than this are treated as corrupt (ours are a few KiB).
const MAX_READ_BYTES: u64 = 1024 * 1024;

/// Leftover temp files older than this are removed by [`StatusDir::open`].
const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

/// The first line of every file we write.
const HEADER: &str = "# Written by proxsync; do not edit. Reference: docs/status.md\n";

/// Condition types.
pub mod kinds {
    /// The VM as a whole, over its whole life: True when it exists, matches its spec and has
    /// the requested power state; False (with the reason) otherwise.
    pub const READY: &str = "Ready";
    /// True while proxsync is working towards the spec (the reason names the current step).
    pub const RECONCILING: &str = "Reconciling";
    /// True when proxsync cannot make progress until a human acts (the reason names why).
    pub const STALLED: &str = "Stalled";
    /// Whether the VM's node (and its cluster) is online and quorate.
    pub const NODE_HEALTHY: &str = "NodeHealthy";
    /// Whether the VM has been created (or adopted) once; never goes back to False.
    pub const PROVISIONED: &str = "Provisioned";
    /// Whether PVE holds config changes that take effect only after a reboot. Present only
    /// while the engine reports it.
    pub const REBOOT_PENDING: &str = "RebootPending";

    /// The condition types every spec file always carries, in file order.
    pub const STANDARD: [&str; 5] = [READY, RECONCILING, STALLED, NODE_HEALTHY, PROVISIONED];

    /// The order conditions are written in; types not listed here follow, sorted by name.
    pub const ORDER: [&str; 6] = [
        READY,
        RECONCILING,
        STALLED,
        NODE_HEALTHY,
        PROVISIONED,
        REBOOT_PENDING,
    ];
}

/// Condition reasons. A reason is always set (v1beta2); `docs/status.md` explains each.
///
/// Some reasons are shared by several condition types (`Creating`, `Deleting`,
/// `WaitingForTask`, `WaitingForLock`, `NodeUnhealthy`, `NotYetObserved`); each string is
/// defined once.
pub mod reasons {
    use crate::category::Category;

    // ---- shared ----
    /// Any standard condition: not determined yet (first visit, or the engine did not report
    /// it this cycle). Status `Unknown`. Also `Ready` / `NodeHealthy` before the first
    /// observation.
    pub const NOT_YET_OBSERVED: &str = "NotYetObserved";
    /// `Ready` False / `Reconciling` True: the VM is being created (clone, import, configure,
    /// first start).
    pub const CREATING: &str = "Creating";
    /// `Ready` False / `Reconciling` True: the VM is being deleted (its spec was removed).
    pub const DELETING: &str = "Deleting";
    /// `Ready` False / `Reconciling` True: a PVE task proxsync started is still running.
    pub const WAITING_FOR_TASK: &str = "WaitingForTask";
    /// `Ready` False / `Reconciling` True: the VM's config is locked by a running task
    /// (backup, migration, snapshot); proxsync waits for it.
    pub const WAITING_FOR_LOCK: &str = "WaitingForLock";
    /// `Ready` False: the VM's node is offline or the cluster lost quorum.
    /// `Stalled` True: the same, for longer than the engine tolerates.
    pub const NODE_UNHEALTHY: &str = "NodeUnhealthy";
    /// Never expected: the engine sent an empty reason (a proxsync bug).
    pub const UNSPECIFIED: &str = "Unspecified";

    // ---- Ready ----
    /// `Ready` True: the VM exists, matches its spec and has the requested power state.
    pub const AVAILABLE: &str = "Available";
    /// `Ready` False: not ready for a reason no more specific reason covers (see the message).
    pub const NOT_READY: &str = "NotReady";
    /// `Ready` False: the VM's config or power state is being changed to match the spec.
    pub const UPDATING: &str = "Updating";
    /// `Ready` False: the spec file is invalid; nothing is done to the VM.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// `Ready` False: the last attempt failed (see `Stalled`, `backoff` and the message).
    pub const FAILED: &str = "Failed";
    /// `Ready` False: the spec asks proxsync to let go of the VM; it is no longer managed.
    pub const RELEASED: &str = "Released";

    // ---- Reconciling ----
    /// `Reconciling` False: nothing to do, the VM matches the spec.
    pub const UP_TO_DATE: &str = "UpToDate";
    /// `Reconciling` True: changing the VM's config (CPU, memory, network, cloud-init...).
    pub const CONFIGURING: &str = "Configuring";
    /// `Reconciling` True: growing a disk.
    pub const RESIZING: &str = "Resizing";
    /// `Reconciling` True: starting, shutting down or stopping the VM.
    pub const POWER_CHANGE: &str = "PowerChange";
    /// `Reconciling` True: waiting before the next attempt after a failure (see `backoff`).
    pub const BACKING_OFF: &str = "BackingOff";
    /// `Reconciling` True: taking over an existing VM that matches the spec.
    pub const ADOPTING: &str = "Adopting";

    // ---- Stalled ----
    /// `Stalled` False: proxsync is making progress or has nothing to do.
    pub const NOT_STALLED: &str = "NotStalled";
    /// `Stalled` True: the PVE version lacks a call or feature proxsync needs.
    pub const API_NOT_SUPPORTED: &str = "APINotSupported";
    /// `Stalled` True: the config or the spec does not suit the cluster (PVE said 400).
    pub const CONFIGURATION_ERROR: &str = "ConfigurationError";
    /// `Stalled` True: the API token was refused (401).
    pub const AUTHENTICATION_ERROR: &str = "AuthenticationError";
    /// `Stalled` True: the API token lacks a privilege (403).
    pub const PERMISSION_DENIED: &str = "PermissionDenied";
    /// `Stalled` True: storage full or a resource limit reached.
    pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
    /// `Stalled` True: the image, template or volume the spec names does not exist.
    pub const IMAGE_NOT_FOUND: &str = "ImageNotFound";
    /// `Stalled` True: the VM stays locked (see also [`STALE_LOCK`]).
    pub const LOCK_ERROR: &str = "LockError";
    /// `Stalled` True: the site's API cannot be reached.
    pub const NETWORK_ERROR: &str = "NetworkError";
    /// `Stalled` True: a PVE task keeps failing.
    pub const TASK_FAILED: &str = "TaskFailed";
    /// `Stalled` True: the spec is invalid.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    /// `Stalled` True: an object the VM needs (or the VM itself) is gone.
    pub const NOT_FOUND: &str = "NotFound";
    /// `Stalled` True: the VMID or name is taken by something proxsync does not manage.
    pub const ALREADY_EXISTS: &str = "AlreadyExists";
    /// `Stalled` True: the VM's config keeps changing under proxsync (digest mismatch).
    pub const CONFLICT: &str = "Conflict";
    /// `Stalled` True: PVE answered with an error proxsync has no better name for.
    pub const PROXMOX_ERROR: &str = "ProxmoxError";
    /// `Stalled` True: the VM's config carries a lock no running task holds.
    pub const STALE_LOCK: &str = "StaleLock";
    /// `Stalled` True: the spec asks for a disk smaller than the current one; PVE cannot
    /// shrink disks and proxsync will not delete data.
    pub const SHRINK_REFUSED: &str = "ShrinkRefused";
    /// `Stalled` True: the image name matches several volumes or templates.
    pub const AMBIGUOUS: &str = "Ambiguous";

    // ---- NodeHealthy ----
    /// `NodeHealthy` True: the node is online and the cluster quorate.
    pub const NODE_ONLINE: &str = "NodeOnline";
    /// `NodeHealthy` False: the node is offline.
    pub const NODE_OFFLINE: &str = "NodeOffline";
    /// `NodeHealthy` False: the cluster has lost quorum (config changes are impossible).
    pub const NO_QUORUM: &str = "NoQuorum";
    /// `NodeHealthy` Unknown: the site's API cannot be reached.
    pub const SITE_UNREACHABLE: &str = "SiteUnreachable";

    // ---- Provisioned ----
    /// `Provisioned` True: proxsync created the VM.
    pub const CREATED: &str = "Created";
    /// `Provisioned` False: the VM has not been created yet.
    pub const NOT_CREATED: &str = "NotCreated";
    /// `Provisioned` True: proxsync adopted an existing VM.
    pub const ADOPTED: &str = "Adopted";

    // ---- RebootPending ----
    /// `RebootPending` True: PVE holds config changes that apply at the next reboot.
    pub const PENDING_CHANGES: &str = "PendingChanges";
    /// `RebootPending` False: no pending changes.
    pub const NO_PENDING_CHANGES: &str = "NoPendingChanges";

    /// Reasons of `Ready`.
    pub const READY: &[&str] = &[
        AVAILABLE,
        NOT_READY,
        CREATING,
        UPDATING,
        DELETING,
        WAITING_FOR_TASK,
        WAITING_FOR_LOCK,
        NODE_UNHEALTHY,
        INVALID_SPEC,
        FAILED,
        NOT_YET_OBSERVED,
        RELEASED,
    ];
    /// Reasons of `Reconciling`.
    pub const RECONCILING: &[&str] = &[
        UP_TO_DATE,
        CREATING,
        WAITING_FOR_TASK,
        CONFIGURING,
        RESIZING,
        POWER_CHANGE,
        DELETING,
        BACKING_OFF,
        WAITING_FOR_LOCK,
        ADOPTING,
        NOT_YET_OBSERVED,
    ];
    /// Reasons of `Stalled`.
    pub const STALLED: &[&str] = &[
        NOT_STALLED,
        API_NOT_SUPPORTED,
        CONFIGURATION_ERROR,
        AUTHENTICATION_ERROR,
        PERMISSION_DENIED,
        QUOTA_EXCEEDED,
        NODE_UNHEALTHY,
        IMAGE_NOT_FOUND,
        LOCK_ERROR,
        NETWORK_ERROR,
        TASK_FAILED,
        VALIDATION_FAILED,
        NOT_FOUND,
        ALREADY_EXISTS,
        CONFLICT,
        PROXMOX_ERROR,
        STALE_LOCK,
        SHRINK_REFUSED,
        AMBIGUOUS,
        NOT_YET_OBSERVED,
    ];
    /// Reasons of `NodeHealthy`.
    pub const NODE_HEALTHY: &[&str] = &[
        NODE_ONLINE,
        NODE_OFFLINE,
        NO_QUORUM,
        SITE_UNREACHABLE,
        NOT_YET_OBSERVED,
    ];
    /// Reasons of `Provisioned`.
    pub const PROVISIONED: &[&str] = &[CREATED, NOT_CREATED, ADOPTED, NOT_YET_OBSERVED];
    /// Reasons of `RebootPending`.
    pub const REBOOT_PENDING: &[&str] = &[PENDING_CHANGES, NO_PENDING_CHANGES];

    /// The `Stalled` reason for an error category (the category's own name).
    pub fn stalled_for(category: Category) -> &'static str {
        match category {
            Category::ApiNotSupported => API_NOT_SUPPORTED,
            Category::ConfigurationError => CONFIGURATION_ERROR,
            Category::AuthenticationError => AUTHENTICATION_ERROR,
            Category::PermissionDenied => PERMISSION_DENIED,
            Category::QuotaExceeded => QUOTA_EXCEEDED,
            Category::NodeUnhealthy => NODE_UNHEALTHY,
            Category::ImageNotFound => IMAGE_NOT_FOUND,
            Category::LockError => LOCK_ERROR,
            Category::NetworkError => NETWORK_ERROR,
            Category::TaskFailed => TASK_FAILED,
            Category::ValidationFailed => VALIDATION_FAILED,
            Category::NotFound => NOT_FOUND,
            Category::AlreadyExists => ALREADY_EXISTS,
            Category::Conflict => CONFLICT,
            Category::ProxmoxError => PROXMOX_ERROR,
        }
    }
}

// ------------------------------------------------------------------------------------------
// Engine-facing input types
// ------------------------------------------------------------------------------------------

/// A condition's status, written `"True"`, `"False"` or `"Unknown"` (always quoted in YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// The word written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl Serialize for ConditionStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ConditionStatus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Accept a YAML boolean too (a hand-edited `status: True` parses as one).
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            B(bool),
            S(String),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::B(true) => ConditionStatus::True,
            Raw::B(false) => ConditionStatus::False,
            Raw::S(s) if s.eq_ignore_ascii_case("true") => ConditionStatus::True,
            Raw::S(s) if s.eq_ignore_ascii_case("false") => ConditionStatus::False,
            Raw::S(_) => ConditionStatus::Unknown,
        })
    }
}

/// One condition as the engine decides it this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionInput {
    /// The condition type (one of [`kinds`], or another CamelCase word).
    pub kind: &'static str,
    pub status: ConditionStatus,
    /// One of [`reasons`]; never empty.
    pub reason: &'static str,
    /// For humans; never secret. Truncated to [`MAX_MESSAGE_BYTES`].
    pub message: String,
}

impl ConditionInput {
    pub fn new(
        kind: &'static str,
        status: ConditionStatus,
        reason: &'static str,
        message: impl Into<String>,
    ) -> ConditionInput {
        ConditionInput {
            kind,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// The last PVE task proxsync ran for a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSummary {
    pub upid: String,
    /// The PVE task type: `qmclone`, `qmstart`, `qmconfig`...
    pub kind: String,
    /// `running`, `OK`, `WARNINGS: n`, or PVE's error text.
    pub status: String,
    pub at: SystemTime,
}

/// The backoff state of a failing spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackoffSummary {
    pub attempts: u32,
    pub next_attempt: SystemTime,
    /// The error category (`Category::as_str`).
    pub category: String,
    pub message: String,
}

/// One recent attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptSummary {
    pub at: SystemTime,
    pub action: String,
    pub outcome: String,
}

/// What the engine knows about one spec this cycle.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecStatus {
    /// `metadata.name`: the file stem; must be a lowercase DNS label.
    pub name: String,
    pub site: String,
    pub node: String,
    pub vm_id: Option<u32>,
    pub vm_name: String,
    /// `running | stopped | unknown | absent | creating | deleting`.
    pub state: String,
    pub ip_addresses: Vec<String>,
    /// The source commit reconciled at.
    pub commit: Option<String>,
    pub spec_file: Option<String>,
    /// The engine's view; the writer makes it sticky.
    pub provisioned: bool,
    pub conditions: Vec<ConditionInput>,
    pub last_task: Option<TaskSummary>,
    pub backoff: Option<BackoffSummary>,
    /// Most recent first; the writer keeps at most [`MAX_HISTORY`].
    pub history: Vec<AttemptSummary>,
    /// The spec hash reconciled.
    pub observed_generation: Option<String>,
}

/// What the engine knows about the whole daemon this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryStatus {
    pub commit: Option<String>,
    pub source_error: Option<String>,
    pub specs: usize,
    pub ready: usize,
    pub stalled: usize,
    pub backing_off: usize,
    pub invalid: usize,
    pub sites: Vec<SiteSummary>,
    pub last_cycle: SystemTime,
    pub cycle_ms: u64,
    /// Safety valve refusals, e.g. "refused to delete 7 of 10 managed VMs
    /// (max_delete_fraction 0.5)".
    pub refused: Vec<String>,
    /// The last `proxsync reconcile [NAME]` request and when the daemon handled it.
    pub last_request: Option<RequestSummary>,
}

/// A `proxsync reconcile` request, as handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSummary {
    /// The spec asked for, or `None` for all.
    pub spec: Option<String>,
    pub handled_at: SystemTime,
}

/// One site in the summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteSummary {
    pub name: String,
    pub reachable: bool,
    pub quorate: bool,
    pub nodes_online: Vec<String>,
    pub nodes_offline: Vec<String>,
    pub error: Option<String>,
}

/// A VM proxsync manages (by its marker) that no spec describes any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanEntry {
    pub site: String,
    pub vm_id: u32,
    pub node: String,
    pub name: Option<String>,
    pub state: String,
    pub first_seen: SystemTime,
    /// `reported | will delete after <time> | deleted`.
    pub action: String,
}

// ------------------------------------------------------------------------------------------
// File types (what is on disk)
// ------------------------------------------------------------------------------------------

/// A condition as written: `type`, `status`, `reason`, `message`, `lastTransitionTime`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: ConditionStatus,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    /// RFC 3339, UTC, whole seconds.
    #[serde(default)]
    pub last_transition_time: String,
}

/// `initialization` of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Initialization {
    /// True once the VM has been created or adopted; never reverts.
    pub provisioned: bool,
}

/// `lastTask` of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskRecord {
    pub upid: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    /// RFC 3339.
    pub at: String,
}

/// `backoff` of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BackoffRecord {
    pub attempts: u32,
    /// RFC 3339.
    pub next_attempt: String,
    pub category: String,
    pub message: String,
}

/// One `history` entry of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AttemptRecord {
    /// RFC 3339.
    pub at: String,
    pub action: String,
    pub outcome: String,
}

/// A spec's status file, `<dir>/<name>.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SpecFile {
    pub name: String,
    pub site: String,
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_id: Option<u32>,
    pub vm_name: String,
    pub state: String,
    pub ip_addresses: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<String>,
    pub initialization: Initialization,
    pub conditions: Vec<Condition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_task: Option<TaskRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffRecord>,
    pub history: Vec<AttemptRecord>,
    /// When the file's content last changed (RFC 3339). Not part of the comparison that
    /// decides whether to write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

impl SpecFile {
    /// The condition of that type, if present.
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

/// One site in `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SiteRecord {
    pub name: String,
    pub reachable: bool,
    pub quorate: bool,
    pub nodes_online: Vec<String>,
    pub nodes_offline: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SummaryFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_error: Option<String>,
    pub specs: u64,
    pub ready: u64,
    pub stalled: u64,
    pub backing_off: u64,
    pub invalid: u64,
    pub sites: Vec<SiteRecord>,
    pub refused: Vec<String>,
    /// RFC 3339: when the last reconcile cycle ended.
    pub last_cycle: String,
    pub cycle_ms: u64,
    /// The last `proxsync reconcile` request handled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_request: Option<RequestRecord>,
}

/// `lastRequest` of `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RequestRecord {
    /// The spec asked for; absent for "everything".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// RFC 3339: when the daemon handled it.
    pub handled_at: String,
}

/// One entry of `_orphans.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OrphanRecord {
    pub site: String,
    pub vm_id: u32,
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub state: String,
    /// RFC 3339.
    pub first_seen: String,
    pub action: String,
}

/// `_orphans.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OrphansFile {
    pub orphans: Vec<OrphanRecord>,
    /// When the list last changed (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

// ------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------

/// Why a status file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The spec name is not a lowercase DNS label; nothing was written.
    #[error(
        "refusing status file for name {0:?}: a name is 1-63 characters of a-z, 0-9 and '-', \
         starting and ending with a letter or digit"
    )]
    InvalidName(String),
    /// Reading, writing, renaming or removing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The YAML could not be rendered (not expected).
    #[error("could not render {file}: {message}")]
    Render { file: String, message: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StatusError + '_ {
    move |source| StatusError::Io {
        path: path.to_path_buf(),
        source,
    }
}

// ------------------------------------------------------------------------------------------
// The status directory
// ------------------------------------------------------------------------------------------

/// The status directory and what was last written to it.
#[derive(Debug)]
pub struct StatusDir {
    dir: PathBuf,
    /// name -> last file written (or read back on the first visit); `None` when no valid
    /// file exists.
    specs: HashMap<String, Option<SpecFile>>,
    summary: Option<Option<SummaryFile>>,
    orphans: Option<Option<OrphansFile>>,
}

impl StatusDir {
    /// Opens (creating with mode 0755 if missing) the status directory and removes temp files
    /// a crashed run left behind.
    pub fn open(dir: &Path) -> io::Result<StatusDir> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
        if !fs::metadata(dir)?.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        let sd = StatusDir {
            dir: dir.to_path_buf(),
            specs: HashMap::new(),
            summary: None,
            orphans: None,
        };
        sd.remove_stale_temps();
        Ok(sd)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Writes `<name>.yaml` for one spec if its content changed. Returns true when the file
    /// was (re)written.
    pub fn write_spec(&mut self, s: &SpecStatus, now: SystemTime) -> Result<bool, StatusError> {
        check_name(&s.name)?;
        let file_name = format!("{}.yaml", s.name);
        if !self.specs.contains_key(&s.name) {
            let prev = self.load::<SpecFile>(&file_name).filter(|f| {
                if f.name == s.name {
                    true
                } else {
                    tracing::warn!(
                        file = %self.dir.join(&file_name).display(),
                        "status file names another spec; overwriting it"
                    );
                    false
                }
            });
            self.specs.insert(s.name.clone(), prev);
        }
        let prev = self.specs.get(&s.name).and_then(|p| p.as_ref());
        let mut next = build_spec_file(s, prev, now);
        let unchanged = prev.is_some_and(|p| {
            let mut p = p.clone();
            p.updated_at = None;
            p == next
        });
        if unchanged && self.dir.join(&file_name).exists() {
            return Ok(false);
        }
        next.updated_at = Some(rfc3339(now));
        let text = render(&next, &file_name)?;
        self.write_atomic(&file_name, text.as_bytes())?;
        self.specs.insert(s.name.clone(), Some(next));
        Ok(true)
    }

    /// Writes `_summary.yaml` if its content changed (it carries `lastCycle`, so it normally
    /// changes every cycle: it doubles as a heartbeat).
    pub fn write_summary(&mut self, s: &SummaryStatus) -> Result<bool, StatusError> {
        if self.summary.is_none() {
            self.summary = Some(self.load::<SummaryFile>(SUMMARY_FILE));
        }
        let next = SummaryFile {
            commit: s.commit.as_deref().map(clip),
            source_error: s.source_error.as_deref().map(clip),
            specs: s.specs as u64,
            ready: s.ready as u64,
            stalled: s.stalled as u64,
            backing_off: s.backing_off as u64,
            invalid: s.invalid as u64,
            sites: s
                .sites
                .iter()
                .map(|site| SiteRecord {
                    name: clip(&site.name),
                    reachable: site.reachable,
                    quorate: site.quorate,
                    nodes_online: site.nodes_online.iter().map(|n| clip(n)).collect(),
                    nodes_offline: site.nodes_offline.iter().map(|n| clip(n)).collect(),
                    error: site.error.as_deref().map(clip),
                })
                .collect(),
            refused: s.refused.iter().map(|r| clip(r)).collect(),
            last_cycle: rfc3339(s.last_cycle),
            cycle_ms: s.cycle_ms,
            last_request: s.last_request.as_ref().map(|r| RequestRecord {
                spec: r.spec.as_deref().map(clip),
                handled_at: rfc3339(r.handled_at),
            }),
        };
        let unchanged = matches!(&self.summary, Some(Some(p)) if *p == next);
        if unchanged && self.dir.join(SUMMARY_FILE).exists() {
            return Ok(false);
        }
        let text = render(&next, SUMMARY_FILE)?;
        self.write_atomic(SUMMARY_FILE, text.as_bytes())?;
        self.summary = Some(Some(next));
        Ok(true)
    }

    /// Writes `_orphans.yaml` (sorted by site, then VMID) if the list changed.
    pub fn write_orphans(
        &mut self,
        o: &[OrphanEntry],
        now: SystemTime,
    ) -> Result<bool, StatusError> {
        if self.orphans.is_none() {
            self.orphans = Some(self.load::<OrphansFile>(ORPHANS_FILE));
        }
        let mut orphans: Vec<OrphanRecord> = o
            .iter()
            .map(|e| OrphanRecord {
                site: clip(&e.site),
                vm_id: e.vm_id,
                node: clip(&e.node),
                name: e.name.as_deref().map(clip),
                state: clip(&e.state),
                first_seen: rfc3339(e.first_seen),
                action: clip(&e.action),
            })
            .collect();
        orphans.sort_by(|a, b| (&a.site, a.vm_id).cmp(&(&b.site, b.vm_id)));
        let unchanged = matches!(&self.orphans, Some(Some(p)) if p.orphans == orphans);
        if unchanged && self.dir.join(ORPHANS_FILE).exists() {
            return Ok(false);
        }
        let next = OrphansFile {
            orphans,
            updated_at: Some(rfc3339(now)),
        };
        let text = render(&next, ORPHANS_FILE)?;
        self.write_atomic(ORPHANS_FILE, text.as_bytes())?;
        self.orphans = Some(Some(next));
        Ok(true)
    }

    /// Removes a spec's file (its spec was removed and its VM deleted or released). Removing
    /// a file that does not exist is not an error.
    pub fn remove_spec(&mut self, name: &str) -> Result<(), StatusError> {
        check_name(name)?;
        let path = self.dir.join(format!("{name}.yaml"));
        match fs::remove_file(&path) {
            Ok(()) => self.sync_dir(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&path)(e)),
        }
        self.specs.remove(name);
        Ok(())
    }

    /// The names that have a status file (not `_summary` / `_orphans` / temp files), sorted.
    pub fn spec_names(&self) -> Result<Vec<String>, StatusError> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let entry = entry.map_err(io_err(&self.dir))?;
            let file_name = entry.file_name();
            let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".yaml")) else {
                continue;
            };
            if check_name(stem).is_ok() && entry.file_type().is_ok_and(|t| t.is_file()) {
                names.push(stem.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Parses a spec's file back. `Ok(None)` when there is no file; a corrupt file is an
    /// `Ok(None)` too (with a warning), as the writer treats it.
    pub fn read_spec(&self, name: &str) -> Result<Option<SpecFile>, StatusError> {
        check_name(name)?;
        self.read_file(&format!("{name}.yaml"))
    }

    /// Parses `_summary.yaml` back (`Ok(None)` when absent or corrupt).
    pub fn read_summary(&self) -> Result<Option<SummaryFile>, StatusError> {
        self.read_file(SUMMARY_FILE)
    }

    /// Parses `_orphans.yaml` back (`Ok(None)` when absent or corrupt).
    pub fn read_orphans(&self) -> Result<Option<OrphansFile>, StatusError> {
        self.read_file(ORPHANS_FILE)
    }

    // ---- internals ----

    /// Reads and parses a file: `Ok(None)` if absent or corrupt, `Err` on other I/O errors.
    fn read_file<T: for<'de> Deserialize<'de>>(
        &self,
        file_name: &str,
    ) -> Result<Option<T>, StatusError> {
        let path = self.dir.join(file_name);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_READ_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err(&path))?;
        if bytes.len() as u64 > MAX_READ_BYTES {
            tracing::warn!(file = %path.display(), "status file too large; ignoring it");
            return Ok(None);
        }
        let Ok(text) = String::from_utf8(bytes) else {
            tracing::warn!(file = %path.display(), "status file is not UTF-8; ignoring it");
            return Ok(None);
        };
        match serde_saphyr::from_str::<T>(&text) {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                let msg = clip(&e.to_string());
                tracing::warn!(file = %path.display(), error = %msg, "corrupt status file; ignoring it");
                Ok(None)
            }
        }
    }

    /// Like [`read_file`](Self::read_file) for the writer: any failure is "no previous file".
    fn load<T: for<'de> Deserialize<'de>>(&self, file_name: &str) -> Option<T> {
        match self.read_file(file_name) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read previous status file; rewriting it");
                None
            }
        }
    }

    fn write_atomic(&self, file_name: &str, bytes: &[u8]) -> Result<(), StatusError> {
        let path = self.dir.join(file_name);
        let tmp = self
            .dir
            .join(format!(".{file_name}.tmp-{}", std::process::id()));
        let result = (|| -> io::Result<()> {
            match fs::remove_file(&tmp) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&tmp)?;
            f.set_permissions(Permissions::from_mode(0o644))?;
            f.write_all(bytes)?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &path)
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&path)(e));
        }
        self.sync_dir();
        Ok(())
    }

    /// fsync the directory so a rename or removal survives a crash (best effort).
    fn sync_dir(&self) {
        if let Err(e) = File::open(&self.dir).and_then(|d| d.sync_all()) {
            tracing::debug!(dir = %self.dir.display(), error = %e, "fsync of status dir failed");
        }
    }

    fn remove_stale_temps(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !(name.starts_with('.') && name.contains(".yaml.tmp-")) {
                continue;
            }
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age >= STALE_TEMP_AGE);
            if old {
                let path = entry.path();
                match fs::remove_file(&path) {
                    Ok(()) => tracing::debug!(file = %path.display(), "removed stale temp file"),
                    Err(e) => {
                        tracing::debug!(file = %path.display(), error = %e, "cannot remove stale temp file")
                    }
                }
            }
        }
    }
}

/// True for a name that can be a status file stem (a lowercase DNS label).
pub fn valid_name(name: &str) -> bool {
    check_name(name).is_ok()
}

/// A status file stem must be a lowercase DNS label of at most 63 characters.
fn check_name(name: &str) -> Result<(), StatusError> {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(inner)
        && b.last().is_some_and(inner)
        && b.iter().all(|c| inner(c) || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(StatusError::InvalidName(clip_to(name, 80)))
    }
}

fn render<T: Serialize>(value: &T, file: &str) -> Result<String, StatusError> {
    let opts = serde_saphyr::ser_options! {
        prefer_block_scalars: false,
    };
    let body =
        serde_saphyr::to_string_with_options(value, opts).map_err(|e| StatusError::Render {
            file: file.to_string(),
            message: e.to_string(),
        })?;
    let mut text = String::with_capacity(HEADER.len() + body.len() + 1);
    text.push_str(HEADER);
    text.push_str(&body);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// Builds the file for this cycle from the engine's view and the previous file.
fn build_spec_file(s: &SpecStatus, prev: Option<&SpecFile>, now: SystemTime) -> SpecFile {
    let now_s = rfc3339(now);
    let prev_cond = |kind: &str| prev.and_then(|p| p.condition(kind));

    // The engine's conditions, first one of each type wins.
    let mut conditions: Vec<Condition> = Vec::new();
    for c in &s.conditions {
        if c.kind.is_empty() {
            tracing::warn!(spec = %s.name, "condition without a type; dropped");
            continue;
        }
        if conditions.iter().any(|x| x.kind == c.kind) {
            tracing::warn!(spec = %s.name, kind = c.kind, "duplicate condition; first kept");
            continue;
        }
        let reason = if c.reason.is_empty() {
            tracing::warn!(spec = %s.name, kind = c.kind, "condition without a reason");
            reasons::UNSPECIFIED
        } else {
            c.reason
        };
        conditions.push(Condition {
            kind: c.kind.to_string(),
            status: c.status,
            reason: reason.to_string(),
            message: clip(&c.message),
            last_transition_time: String::new(),
        });
    }
    for kind in kinds::STANDARD {
        if !conditions.iter().any(|c| c.kind == kind) {
            conditions.push(Condition {
                kind: kind.to_string(),
                status: ConditionStatus::Unknown,
                reason: reasons::NOT_YET_OBSERVED.to_string(),
                message: String::new(),
                last_transition_time: String::new(),
            });
        }
    }

    // Provisioned never goes back once True.
    let prev_provisioned = prev.is_some_and(|p| {
        p.initialization.provisioned
            || p.condition(kinds::PROVISIONED)
                .is_some_and(|c| c.status == ConditionStatus::True)
    });
    let mut provisioned = s.provisioned || prev_provisioned;
    if let Some(c) = conditions.iter_mut().find(|c| c.kind == kinds::PROVISIONED) {
        if c.status == ConditionStatus::True {
            provisioned = true;
        } else if provisioned {
            match prev_cond(kinds::PROVISIONED).filter(|p| p.status == ConditionStatus::True) {
                Some(p) => *c = p.clone(),
                None => {
                    c.status = ConditionStatus::True;
                    c.reason = reasons::CREATED.to_string();
                    c.message = "initial provisioning completed".to_string();
                }
            }
        }
    }

    // lastTransitionTime moves only when the status changes.
    for c in &mut conditions {
        c.last_transition_time = match prev_cond(&c.kind) {
            Some(p) if p.status == c.status && parse_rfc3339(&p.last_transition_time).is_some() => {
                p.last_transition_time.clone()
            }
            _ => now_s.clone(),
        };
    }

    conditions.sort_by(|a, b| {
        let rank = |k: &str| {
            kinds::ORDER
                .iter()
                .position(|o| *o == k)
                .unwrap_or(kinds::ORDER.len())
        };
        rank(&a.kind)
            .cmp(&rank(&b.kind))
            .then_with(|| a.kind.cmp(&b.kind))
    });

    let mut history: Vec<&AttemptSummary> = s.history.iter().collect();
    history.sort_by_key(|h| std::cmp::Reverse(h.at)); // stable: keeps the engine's order on ties
    let history = history
        .into_iter()
        .take(MAX_HISTORY)
        .map(|h| AttemptRecord {
            at: rfc3339(h.at),
            action: clip(&h.action),
            outcome: clip(&h.outcome),
        })
        .collect();

    SpecFile {
        name: s.name.clone(),
        site: clip(&s.site),
        node: clip(&s.node),
        vm_id: s.vm_id,
        vm_name: clip(&s.vm_name),
        state: clip(&s.state),
        ip_addresses: s.ip_addresses.iter().map(|a| clip(a)).collect(),
        commit: s.commit.as_deref().map(clip),
        spec_file: s.spec_file.as_deref().map(clip),
        observed_generation: s.observed_generation.as_deref().map(clip),
        initialization: Initialization { provisioned },
        conditions,
        last_task: s.last_task.as_ref().map(|t| TaskRecord {
            upid: clip(&t.upid),
            kind: clip(&t.kind),
            status: clip(&t.status),
            at: rfc3339(t.at),
        }),
        backoff: s.backoff.as_ref().map(|b| BackoffRecord {
            attempts: b.attempts,
            next_attempt: rfc3339(b.next_attempt),
            category: clip(&b.category),
            message: clip(&b.message),
        }),
        history,
        updated_at: None,
    }
}

/// Cuts a free-text value to [`MAX_MESSAGE_BYTES`] (ending with `…` when cut).
pub fn clip(s: &str) -> String {
    clip_to(s, MAX_MESSAGE_BYTES)
}

fn clip_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    const ELLIPSIS: &str = "…";
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + ELLIPSIS.len());
    out.push_str(s.get(..end).unwrap_or(""));
    out.push_str(ELLIPSIS);
    out
}

// ------------------------------------------------------------------------------------------
// RFC 3339
// ------------------------------------------------------------------------------------------

/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z in Unix seconds: the range RFC 3339 can
/// express; [`rfc3339`] clamps to it.
const MIN_UNIX: i64 = -62_167_219_200;
const MAX_UNIX: i64 = 253_402_300_799;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 0,
    }
}

/// RFC 3339 in UTC with whole seconds (`2025-03-01T12:00:00Z`), as Kubernetes writes
/// `lastTransitionTime`. Sub-seconds are dropped; times outside years 0000-9999 are clamped.
pub fn rfc3339(t: SystemTime) -> String {
    let secs: i64 = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            // floor towards the past
            whole
                .saturating_neg()
                .saturating_sub(i64::from(d.subsec_nanos() > 0))
        }
    };
    let secs = secs.clamp(MIN_UNIX, MAX_UNIX);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parses an RFC 3339 date-time (`2025-03-01T12:00:00Z`, `…T12:00:00.5+02:00`, `t`/`z` in
/// lower case too). `None` for anything else, including impossible dates.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits.iter().try_fold(0i64, |acc, c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let sep = |at: usize, want: &[u8]| b.get(at).is_some_and(|c| want.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let month = u32::try_from(month).ok()?;
    let day = u32::try_from(day).ok()?;
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' => {
            i += 1;
            0
        }
        sign @ (b'+' | b'-') => {
            if !sep(i + 3, b":") {
                return None;
            }
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            i += 6;
            let off = oh * 3600 + om * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    if i != b.len() {
        return None;
    }
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let base = if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(secs.unsigned_abs()))?
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))?
    };
    base.checked_add(Duration::from_nanos(u64::from(nanos)))
}

#[cfg(test)]
mod tests;
