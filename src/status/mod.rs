//! Status files (docs/status.md): the observed state of every spec, written back as YAML.
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

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Free-text fields (condition messages, task status, backoff message, errors) are cut to at
/// most this many bytes, ending with `…`.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// At most this many attempts are kept in a spec file's `history`.
pub(crate) const MAX_HISTORY: usize = 10;

/// The summary file's name in the status directory.
pub(crate) const SUMMARY_FILE: &str = "_summary.yaml";

/// The orphan report's name in the status directory.
pub(crate) const ORPHANS_FILE: &str = "_orphans.yaml";

/// The version of `_orphans.yaml`'s shape (its `version`): 2 names each entry's `kind`; 1 (no
/// `version` field) did not. docs/output.md.
pub(crate) const ORPHANS_VERSION: u32 = 2;

mod commits;
mod conditions;
mod files;
pub(crate) mod index;
pub(crate) mod kinds;
pub(crate) mod reasons;
mod summary;
mod transitions;
mod writer;

pub(crate) use crate::util::time::{parse_rfc3339, rfc3339, rfc3339_secs, unix_secs};
pub(crate) use commits::{SpecCommits, Version};
pub(crate) use conditions::{
    FromPlan, decryption_failed_status, has_condition, invalid_status, removed_status, spec_status,
};
pub(crate) use files::{StatusDir, spec_names_of, valid_name};
pub(crate) use reasons::Reason;
pub(crate) use summary::{orphan_entries, site_summary};
pub(crate) use writer::Writer;

// ------------------------------------------------------------------------------------------
// Engine-facing input types
// ------------------------------------------------------------------------------------------

/// A condition's status, written `"True"`, `"False"` or `"Unknown"` (always quoted in YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// The word written in the file.
    pub(crate) fn as_str(self) -> &'static str {
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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ConditionInput {
    /// The condition type (one of [`kinds`], or another CamelCase word).
    pub kind: &'static str,
    pub status: ConditionStatus,
    /// Why; written as its name ([`Reason::as_str`]).
    pub reason: Reason,
    /// For humans; never secret. Truncated to [`MAX_MESSAGE_BYTES`].
    pub message: String,
}

impl ConditionInput {
    pub(crate) fn new(
        kind: &'static str,
        status: ConditionStatus,
        reason: Reason,
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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TaskSummary {
    pub upid: String,
    /// The PVE task type: `qmclone`, `qmstart`, `qmconfig`...
    pub kind: String,
    /// `running`, `OK`, `WARNINGS: n`, or PVE's error text.
    pub status: String,
    pub at: SystemTime,
}

/// The backoff state of a failing spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct BackoffSummary {
    pub attempts: u32,
    pub next_attempt: SystemTime,
    /// The error category (`Category::as_str`).
    pub category: String,
    pub message: String,
}

/// One recent attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct AttemptSummary {
    pub at: SystemTime,
    pub action: String,
    pub outcome: String,
    /// The UPIDs of the PVE tasks the attempt ran, in order.
    pub tasks: Vec<String>,
    /// How long it took (ms), when known.
    pub took_ms: Option<u64>,
}

/// One field in which the guest, as the cluster listing shows it, differs from its spec.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct DriftRecord {
    /// `node`, `name`, `cpu`, `memory`, `disk`, `power`, `tags` or `ha`.
    pub field: String,
    /// The spec's value.
    pub spec: String,
    /// The guest's value, as listed.
    pub guest: String,
    /// PVE holds the spec's value pending until the guest's next start (`RebootPending`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub at_next_start: bool,
}

/// What the engine knows about one spec this cycle.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct SpecStatus {
    /// `metadata.name`: the file stem; must be a lowercase DNS label.
    pub name: String,
    /// What the spec makes (a removed or invalid spec's: what its record made).
    pub kind: crate::guest::GuestKind,
    /// A `ProxmoxTemplate`'s version (a removed one's: its record built a template): the file
    /// says `kind: ProxmoxTemplate`, and `proxsync inventory` leaves it out (no host).
    pub template: bool,
    pub site: String,
    pub node: String,
    pub vm_id: Option<u32>,
    pub vm_name: String,
    /// `running | stopped | unknown | absent | creating | deleting`.
    pub state: String,
    pub ip_addresses: Vec<String>,
    /// The spec's tags (its `tags` and the tenant's), sorted: what `proxsync inventory` groups by.
    pub tags: Vec<String>,
    /// The spec's `metadata.labels`: what `proxsync inventory` groups by.
    pub labels: BTreeMap<String, String>,
    /// The source commit at which this version of the spec was first applied
    /// ([`SpecCommits`]).
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
    /// How the guest differs from the spec in what the listing shows, field by field.
    pub drift: Vec<DriftRecord>,
}

impl SpecStatus {
    /// A hash of the whole status (64 bits, kept in memory only): the engine hands the writer
    /// a spec's status only when it differs from the last one given.
    pub(crate) fn content_hash(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

/// What the engine keeps of the status it last gave a spec: its hash, and the two conditions
/// notifications follow (instead of the whole status of every spec). 24 bytes for a spec with
/// nothing to say, as most of 50,000 are; the texts only where there are some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastStatus {
    /// [`SpecStatus::content_hash`].
    pub hash: u64,
    /// What the spec's guest is ([`SpecStatus::kind`]).
    pub kind: crate::guest::GuestKind,
    /// `Ready` is True.
    pub ready: bool,
    notes: Option<Box<Notes>>,
}

/// The texts of a [`LastStatus`], when it has any.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Notes {
    stalled: Option<(Reason, String)>,
    drifted: Option<String>,
    suspended: Option<String>,
    unhealthy: Option<String>,
}

impl LastStatus {
    pub(crate) fn of(st: &SpecStatus, hash: u64) -> LastStatus {
        let is = |kind: &str, status: ConditionStatus| {
            st.conditions
                .iter()
                .find(|c| c.kind == kind && c.status == status)
        };
        let notes = Notes {
            stalled: is(kinds::STALLED, ConditionStatus::True)
                .map(|c| (c.reason, c.message.clone())),
            drifted: is(kinds::SYNCED, ConditionStatus::False).map(|c| c.message.clone()),
            suspended: is(kinds::SUSPENDED, ConditionStatus::True).map(|c| c.message.clone()),
            unhealthy: is(kinds::HEALTHY, ConditionStatus::False).map(|c| c.message.clone()),
        };
        LastStatus {
            hash,
            kind: st.kind,
            ready: is(kinds::READY, ConditionStatus::True).is_some(),
            notes: (notes != Notes::default()).then(|| Box::new(notes)),
        }
    }

    /// `Stalled`'s reason and message while it is True.
    pub(crate) fn stalled(&self) -> Option<(Reason, &str)> {
        let (reason, message) = self.notes.as_ref()?.stalled.as_ref()?;
        Some((*reason, message))
    }

    /// `Synced`'s message while it is False: an observe-only spec's VM differs from it.
    pub(crate) fn drifted(&self) -> Option<&str> {
        self.notes.as_ref()?.drifted.as_deref()
    }

    /// `Suspended`'s message while the spec is suspended.
    pub(crate) fn suspended(&self) -> Option<&str> {
        self.notes.as_ref()?.suspended.as_deref()
    }

    /// `Healthy`'s message while it is False: the guest fails its health checks.
    pub(crate) fn unhealthy(&self) -> Option<&str> {
        self.notes.as_ref()?.unhealthy.as_deref()
    }
}

/// What the engine knows about the whole daemon this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SummaryStatus {
    pub commit: Option<String>,
    pub source_error: Option<String>,
    /// The branch tip `[source] verify` refused; `commit` is then the last verified one.
    pub refused_commit: Option<crate::source::verify::Refusal>,
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
    /// `[[notify]]` targets whose last message could not be delivered.
    pub notify_failures: Vec<NotifyFailure>,
    /// The applied commit does not descend from the one applied before it.
    pub rewind: Option<RewindSummary>,
    /// Each `ProxmoxVMSet`: its desired and Ready members.
    pub sets: Vec<SetSummary>,
    /// Each `ProxmoxImage`: its version and whether its volumes are there.
    pub images: Vec<ImageSummary>,
    /// What this cycle did, for the summary's `recentCycles`.
    pub cycle: CycleMark,
}

/// What one cycle did, as `_summary.yaml`'s `recentCycles` keeps it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CycleMark {
    /// Actions run (tasks started or steps taken), failed ones included.
    pub actions: u32,
    /// Actions that failed.
    pub failed: u32,
    /// Sites that could not be read.
    pub sites_down: u32,
}

/// How many cycles `_summary.yaml`'s `recentCycles` keeps.
pub(crate) const RECENT_CYCLES: usize = 30;

/// One entry of `recentCycles` in `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct CycleRecord {
    /// RFC 3339: when the cycle ended.
    pub at: String,
    pub ms: u64,
    pub actions: u32,
    pub failed: u32,
    pub sites_down: u32,
}

/// One `ProxmoxImage` in the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ImageSummary {
    pub name: String,
    /// The first 12 hex digits of its checksum, which its volume's name carries.
    pub version: String,
    /// The volume ID guests are made from.
    pub volume: String,
    /// `Ready`, `Downloading`, `Failed` (Stalled: a person must look) or `Waiting`.
    pub state: String,
    /// What PVE said, or why it waits; with what to do when it failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// RFC 3339: when a failed download is tried again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

impl ImageSummary {
    /// A version no image names any more: kept (why) or deleted this cycle.
    pub(crate) fn unused(u: &crate::image_sync::UnusedVersion) -> ImageSummary {
        let version = (u.volume.rsplit('/').next())
            .and_then(|file| file.strip_prefix(&format!("{}-", u.image)))
            .and_then(|rest| rest.get(..crate::spec::images::VERSION_DIGITS))
            .unwrap_or_default();
        let (state, message) = match &u.kept {
            Some(why) => ("Unused", why.clone()),
            None => (
                "Deleted",
                format!("deleted from {}: no image names it", u.node),
            ),
        };
        ImageSummary {
            name: u.image.clone(),
            version: version.to_string(),
            volume: u.volume.clone(),
            state: state.to_string(),
            message: clip(&message),
            retry_at: None,
        }
    }

    /// The summary of `image` in `state`.
    pub(crate) fn of(
        image: &crate::spec::images::ImageSpec,
        state: &crate::image_sync::ImageState,
    ) -> ImageSummary {
        use crate::image_sync::ImageState as S;
        let (word, message, retry_at) = match state {
            S::Ready { .. } => ("Ready", String::new(), None),
            S::Downloading { .. } => ("Downloading", state.waiting_why().unwrap_or_default(), None),
            S::Failed {
                node,
                message,
                retry_at_ms,
            } => (
                "Failed",
                format!(
                    "PVE's download to {} on {node} failed: {message}. Check the url and checksum \
                     in {} (a checksum mismatch means the file at the URL is not the one the \
                     checksum names); it is tried again at the retry time, or at once when the \
                     spec changes or the daemon restarts",
                    image.storage, image.file
                ),
                Some(rfc3339(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(*retry_at_ms),
                )),
            ),
            S::Waiting { why } => ("Waiting", why.clone(), None),
        };
        ImageSummary {
            name: image.name.clone(),
            version: image.version().to_string(),
            volume: image.volume_id(),
            state: word.to_string(),
            message: clip(&message),
            retry_at,
        }
    }
}

/// One `ProxmoxVMSet` in the summary, as a Deployment's status counts its replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SetSummary {
    pub name: String,
    /// Members the set asks for.
    pub desired: u64,
    /// Members whose `Ready` is True.
    pub ready: u64,
    /// Members not Ready, by name (at most 20 listed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_ready: Vec<String>,
}

/// A rewind in effect: `commit`, applied since `since`, does not descend from `from`, the
/// commit applied before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RewindSummary {
    pub commit: String,
    pub from: String,
    pub since: SystemTime,
}

/// A `[[notify]]` target that fails (its last message could not be delivered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyFailure {
    pub target: String,
    /// `webhook`, `slack`, `gitea`, `github` or `gitlab`.
    pub kind: String,
    /// Messages given up since the daemon started.
    pub failures: u64,
    /// Never carries a secret (URLs are left out).
    pub last_error: String,
    /// The first failure since the last delivered message.
    pub since: SystemTime,
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
    /// Per node, how many actions proxsync may run there at once now (`crate::concurrency`),
    /// for the nodes it has learnt about.
    pub parallel: Vec<(String, u32)>,
}

/// A guest proxsync manages (by its marker) that no spec describes any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OrphanEntry {
    pub site: String,
    pub vm_id: u32,
    /// A VM or a container.
    pub kind: crate::guest::GuestKind,
    pub node: String,
    pub name: Option<String>,
    pub state: String,
    pub first_seen: SystemTime,
    /// `reported | will delete after <time> | deleted`.
    pub action: String,
    /// The spec this VM claims while another VM is that spec's (a duplicate).
    pub duplicate_of: Option<String>,
}

// ------------------------------------------------------------------------------------------
// File types (what is on disk)
// ------------------------------------------------------------------------------------------

/// A condition as written: `type`, `status`, `reason`, `message`, `lastTransitionTime`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: ConditionStatus,
    /// A [`Reason`]'s name. Text, so a file another release wrote always reads.
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    /// RFC 3339, UTC, whole seconds.
    #[serde(default)]
    pub last_transition_time: String,
}

/// `initialization` of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Initialization {
    /// True once the VM has been created or adopted; never reverts.
    pub provisioned: bool,
}

/// `lastTask` of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TaskRecord {
    pub upid: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    /// RFC 3339.
    pub at: String,
}

/// `backoff` of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct BackoffRecord {
    pub attempts: u32,
    /// RFC 3339.
    pub next_attempt: String,
    pub category: String,
    pub message: String,
}

/// One `history` entry of a spec file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AttemptRecord {
    /// RFC 3339.
    pub at: String,
    pub action: String,
    pub outcome: String,
    /// The UPIDs of the PVE tasks the attempt ran, in order; absent when it ran none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<String>,
    /// How long the attempt took, in milliseconds; absent when not known.
    #[serde(rename = "tookMs", skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
}

/// A spec's status file, `<dir>/<name>.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SpecFile {
    pub name: String,
    /// `ProxmoxLXC` for a container, `ProxmoxTemplate` for a template's version; absent for a
    /// VM (as in every file before containers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub site: String,
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_id: Option<u32>,
    pub vm_name: String,
    pub state: String,
    pub ip_addresses: Vec<String>,
    /// The spec's tags; absent when it has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The spec's `metadata.labels`; absent when it has none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
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
    /// How the guest differs from the spec, field by field, as the cluster listing shows it;
    /// absent when nothing differs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<DriftRecord>,
    /// When the file's content last changed (RFC 3339). Not part of the comparison that
    /// decides whether to write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

impl SpecFile {
    /// The condition of that type, if present.
    pub(crate) fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

/// One site in `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SiteRecord {
    pub name: String,
    pub reachable: bool,
    pub quorate: bool,
    pub nodes_online: Vec<String>,
    pub nodes_offline: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Per node, the actions proxsync may run there at once now.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub parallel_per_node: BTreeMap<String, u32>,
}

/// `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SummaryFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_error: Option<String>,
    /// The branch tip not applied because its signature did not verify (`[source] verify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_commit: Option<RefusedCommitRecord>,
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
    /// `[[notify]]` targets that fail, as of the cycle's start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notify_failures: Vec<NotifyFailureRecord>,
    /// The applied commit does not descend from the one applied before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewind: Option<RewindRecord>,
    /// Each `ProxmoxVMSet`: desired and Ready members.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<SetSummary>,
    /// Each `ProxmoxImage`: its version and state.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageSummary>,
    /// The last [`RECENT_CYCLES`] cycles, oldest first, this one last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recent_cycles: Vec<CycleRecord>,
}

/// `rewind` of `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RewindRecord {
    /// The commit applied.
    pub commit: String,
    /// The commit applied before it, which it does not descend from.
    pub from: String,
    /// RFC 3339: when it was first applied.
    pub since: String,
}

/// One entry of `notifyFailures` in `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct NotifyFailureRecord {
    pub target: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub failures: u64,
    pub last_error: String,
    /// RFC 3339.
    pub since: String,
}

/// `refusedCommit` of `_summary.yaml`: the branch tip that was not applied, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RefusedCommitRecord {
    pub commit: String,
    /// `UnverifiedSignature` or `NotDescendant` (a release before them wrote the message
    /// here).
    pub reason: String,
    /// What is wrong and what to do.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `lastRequest` of `_summary.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct RequestRecord {
    /// The spec asked for; absent for "everything".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// RFC 3339: when the daemon handled it.
    pub handled_at: String,
}

/// One entry of `_orphans.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct OrphanRecord {
    pub site: String,
    pub vm_id: u32,
    /// `ProxmoxVM` or `ProxmoxLXC`, the words of a spec file's `kind`. Always written since
    /// [`ORPHANS_VERSION`] 2; absent in a file of version 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub state: String,
    /// RFC 3339.
    pub first_seen: String,
    pub action: String,
    /// A second VM carrying the marker of this spec (another VM is the spec's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<String>,
}

/// `_orphans.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct OrphansFile {
    /// The file's shape ([`ORPHANS_VERSION`] when written); 0 when read from a file of version
    /// 1, which had no such field.
    pub version: u32,
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
pub(crate) enum StatusError {
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

/// Cuts a free-text value to [`MAX_MESSAGE_BYTES`] (ending with `…` when cut).
pub(crate) fn clip(s: &str) -> String {
    clip_to(s, MAX_MESSAGE_BYTES)
}

pub(super) fn clip_to(s: &str, max: usize) -> String {
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

#[cfg(test)]
mod tests;
