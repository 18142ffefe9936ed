//! What the state database records of each spec: the guest it maps to and where that guest is
//! in its life ([`VmState`]), what was last applied, errors and backoff, volumes bound to a
//! destroy, adoptions, and suspensions. Plain values: `store` keeps them durably, the gate, the
//! planner and render decide on them.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

use crate::category::Category;
use crate::pve::Upid;

/// The key of `proxsync suspend --all`: every spec, and every orphan, is left alone.
pub const SUSPEND_ALL: &str = "*";

/// A spec suspended: observed and reported, no action of any kind taken for it, and its
/// removal from git waits. Set by `spec.suspend` in git or by `proxsync suspend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// `git` for `spec.suspend`; else who ran `proxsync suspend`: through the daemon, the user
    /// and uid of the socket's peer as the daemon saw them (never what the command said);
    /// written directly, the command's user.
    pub by: String,
    /// Why, as `proxsync suspend --reason` gave it (one line); `None` for `spec.suspend` or
    /// when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Since when (unix ms): the daemon's clock for a suspension through its socket.
    pub at_ms: u64,
    /// From `spec.suspend`: lifted when the spec no longer says so. Kept when the spec is
    /// removed from git, so its removal waits until `proxsync resume`.
    #[serde(default)]
    pub from_git: bool,
}

/// Where a spec's VM is in its life. The VMID and node live only here, so a record cannot
/// say "creating VM 101" and "VM 102" at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum VmState {
    /// No VM and nothing in flight (never made, or gone: see [`SpecRecord::provisioned`]).
    #[default]
    Absent,
    /// A create or clone was decided with this VMID on this node, and the VMID is reserved.
    /// Written before the request is sent; `task` is filled in right after PVE answers.
    Creating {
        /// The VMID reserved for the new VM.
        vmid: u32,
        /// The node the new VM is made on.
        node: CompactString,
        /// The create's (or clone's) task, once PVE answered with its UPID.
        // Boxed: a parsed UPID is 144 bytes and a record holds one only while a create is
        // in flight; inline it made every record of 10,000 larger by as much.
        #[serde(default, with = "lenient_task")]
        task: Option<Box<Upid>>,
        /// When the intent was written (unix ms; 0 in records of older releases): a request
        /// sent then may still turn into a VM until the request timeout has passed.
        #[serde(default)]
        started_ms: u64,
        /// For a clone: the template it copies, whose node runs the `qmclone` task (its UPID
        /// names the template, not the new VM).
        #[serde(default)]
        clone_of: Option<CloneSource>,
    },
    /// The VM exists (it may still need configuring).
    Exists {
        /// The VM's VMID.
        vmid: u32,
        /// The node the VM is on, as last recorded.
        node: CompactString,
    },
    /// A delete of the VM was sent; `task` is its task.
    Deleting {
        /// The VMID of the VM being deleted.
        vmid: u32,
        /// The node the delete was sent to.
        node: CompactString,
        /// The delete's task; `None` when its UPID was not recorded or does not parse.
        #[serde(default, with = "lenient_task")]
        task: Option<Box<Upid>>,
    },
}

impl VmState {
    /// The VMID the record holds: its VM's, or the one reserved by a create in flight.
    pub fn vmid(&self) -> Option<u32> {
        match self {
            VmState::Absent => None,
            VmState::Creating { vmid, .. }
            | VmState::Exists { vmid, .. }
            | VmState::Deleting { vmid, .. } => Some(*vmid),
        }
    }

    /// The node the VM is on (or is being made on).
    pub fn node(&self) -> Option<&str> {
        match self {
            VmState::Absent => None,
            VmState::Creating { node, .. }
            | VmState::Exists { node, .. }
            | VmState::Deleting { node, .. } => Some(node),
        }
    }

    /// The VMID of a VM that was made (it exists, or is being deleted); `None` while a create
    /// is in flight, whose VM may not exist yet.
    pub fn made_vmid(&self) -> Option<u32> {
        match self {
            VmState::Exists { vmid, .. } | VmState::Deleting { vmid, .. } => Some(*vmid),
            VmState::Absent | VmState::Creating { .. } => None,
        }
    }

    /// The VMID this state reserves: a create in flight, or a delete recorded (until the record
    /// moves on, no create of this install takes it: a rebuild's record, still naming it, would
    /// find it taken and hold its spec for good).
    pub fn reserved(&self) -> Option<u32> {
        match self {
            VmState::Creating { vmid, .. } | VmState::Deleting { vmid, .. } => Some(*vmid),
            _ => None,
        }
    }
}

/// A UPID in the state: PVE's string. One that does not parse (a record edited by hand, a
/// format PVE may change) reads as no task rather than losing the record, whose create intent
/// must survive: without its task, a create in flight is resumed by reading what became of its
/// VMID, and a delete is checked and sent again after its identity check.
mod lenient_task {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::pve::Upid;

    pub(crate) fn serialize<S: Serializer>(
        task: &Option<Box<Upid>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match task {
            Some(u) => s.serialize_some(u.as_str()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Box<Upid>>, D::Error> {
        Ok(Option::<String>::deserialize(d)?.and_then(|s| parse(&s)))
    }

    pub(super) fn parse(s: &str) -> Option<Box<Upid>> {
        s.parse()
            .inspect_err(|e: &String| tracing::warn!(error = %e, "recorded task id unreadable; resuming without it"))
            .ok()
            .map(Box::new)
    }
}

/// A record's [`VmState`], stored under `vm`; records of the previous release held a `phase`
/// with `vmid` and `node` beside it, and are converted as they are read (never dropped: a
/// create in flight must survive an upgrade, or a second create could follow).
mod stored_state {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::{CloneSource, VmState, lenient_task};

    #[derive(Serialize)]
    struct Out<'a> {
        vm: &'a VmState,
    }

    pub(crate) fn serialize<S: Serializer>(vm: &VmState, s: S) -> Result<S::Ok, S::Error> {
        Out { vm }.serialize(s)
    }

    #[derive(Deserialize)]
    struct In {
        #[serde(default)]
        vm: Option<VmState>,
        #[serde(default)]
        phase: Option<Phase>,
        #[serde(default)]
        vmid: Option<u32>,
        #[serde(default)]
        node: compact_str::CompactString,
    }

    /// The previous release's `Phase` (`tag = "phase"`, camelCase variants).
    #[derive(Deserialize)]
    #[serde(tag = "phase", rename_all = "camelCase")]
    enum Phase {
        Pending,
        Creating {
            vmid: u32,
            node: compact_str::CompactString,
            #[serde(default)]
            upid: Option<String>,
            #[serde(default)]
            started_ms: u64,
            #[serde(default)]
            clone_of: Option<CloneSource>,
        },
        Exists,
        Deleting {
            #[serde(default)]
            upid: Option<String>,
        },
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VmState, D::Error> {
        let stored = In::deserialize(d)?;
        if let Some(vm) = stored.vm {
            return Ok(vm);
        }
        let (vmid, node) = (stored.vmid, stored.node);
        // The previous release read `vmid` as the VM whatever the phase said, and took
        // `Creating`'s own VMID over it; a phase without a VMID had no VM.
        Ok(match (stored.phase.unwrap_or(Phase::Pending), vmid) {
            (
                Phase::Creating {
                    vmid,
                    node,
                    upid,
                    started_ms,
                    clone_of,
                },
                _,
            ) => VmState::Creating {
                vmid,
                node,
                task: upid.as_deref().and_then(lenient_task::parse),
                started_ms,
                clone_of,
            },
            (Phase::Deleting { upid }, Some(vmid)) => VmState::Deleting {
                vmid,
                node,
                task: upid.as_deref().and_then(lenient_task::parse),
            },
            (Phase::Pending | Phase::Exists, Some(vmid)) => VmState::Exists { vmid, node },
            (_, None) => VmState::Absent,
        })
    }
}

/// The template a clone copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloneSource {
    /// The template's node.
    pub node: String,
    /// The template's VMID.
    pub vmid: u32,
}

/// What a failure is beyond its category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// Its category says everything.
    #[default]
    Plain,
    /// A lock no running task can hold (an interrupted operation): only a human can tell it
    /// is stale and clear it (`qm unlock`), so it needs one although lock errors in general
    /// resolve by themselves. The spec is `Stalled` (`StaleLock`).
    StaleLock,
    /// The VM's `protection` flag stops a delete or a drive removal that its spec does not
    /// let proxsync clear: a person clears it (or changes the spec). `Stalled` (`Protected`).
    Protected,
    /// The guest the record names carries no marker of its spec (a person edited its notes)
    /// and nothing else shows it is the spec's: a person confirms it (`proxsync adopt`) or
    /// removes it. Nothing is created meanwhile. `Stalled` (`MarkerMissing`).
    MarkerMissing,
}

/// One failure, as kept for backoff and status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredError")]
pub struct ErrorRecord {
    /// Its category (PRODUCT.md §4), stored by name.
    #[serde(serialize_with = "category_name")]
    pub category: Category,
    /// What failed, in words, as status shows it.
    pub message: String,
    /// When it failed (unix ms).
    pub at_ms: u64,
    /// Hash of the spec and config the failure happened with: a change resets the backoff.
    pub inputs: String,
    /// What the failure is beyond its category (a stale lock, protection, a missing marker).
    pub kind: ErrorKind,
}

impl ErrorRecord {
    /// A human must act (the spec is `Stalled`); retried only at the backoff cap.
    pub fn needs_human(&self) -> bool {
        self.category.needs_human() || self.kind != ErrorKind::Plain
    }
}

/// An [`ErrorRecord`] as stored by this release or earlier ones: those kept a `needs_human`
/// flag instead of `kind` (true only for a stale lock beyond its category), and before it only
/// the lock error's text, which told to `qm unlock`.
#[derive(Deserialize)]
struct StoredError {
    category: String,
    message: String,
    at_ms: u64,
    inputs: String,
    #[serde(default)]
    kind: Option<ErrorKind>,
    #[serde(default)]
    needs_human: bool,
}

impl From<StoredError> for ErrorRecord {
    fn from(s: StoredError) -> Self {
        // A name this release does not know (a newer one's, after a downgrade) is kept as
        // PVE's generic error rather than losing the record.
        let category = Category::from_name(&s.category).unwrap_or(Category::ProxmoxError);
        let kind = s.kind.unwrap_or(
            if category == Category::LockError && (s.needs_human || s.message.contains("qm unlock"))
            {
                ErrorKind::StaleLock
            } else {
                ErrorKind::Plain
            },
        );
        ErrorRecord {
            category,
            message: s.message,
            at_ms: s.at_ms,
            inputs: s.inputs,
            kind,
        }
    }
}

/// A [`Category`] as its name in the database (the name status files show).
fn category_name<S: serde::Serializer>(c: &Category, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.as_str())
}

/// A task proxsync started, for status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task's UPID, as PVE wrote it.
    pub upid: String,
    /// The task's type, from its UPID (`qmcreate`, `qmclone`, `qmigrate`, ...).
    pub kind: String,
    /// `running`, `OK`, `WARNINGS: N`, or PVE's exit status of a task that failed.
    pub status: String,
    /// When it was recorded (unix ms).
    pub at_ms: u64,
    /// The tasks recorded before this one (UPID, when), kept in memory only while an attempt
    /// runs, so that its history line names every task it ran ([`SpecRecord::set_task`]).
    #[serde(skip)]
    pub earlier: Vec<(String, u64)>,
}

/// One attempt, for the status file's short history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When (unix ms).
    pub at_ms: u64,
    /// The action (`create`, `converge`, `delete`, ...), or the step of one it tells of.
    pub action: CompactString,
    /// `ok`, or what came of it (at most 300 characters).
    pub outcome: CompactString,
    /// The UPIDs of the PVE tasks the action ran, in order (none for one that ran none, or
    /// written by a release before them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<String>,
    /// How long the attempt took (ms), its tasks included ([`SpecRecord::finish_attempt`];
    /// none for a step told of, or an entry written by a release before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
}

fn is_qemu(kind: &crate::guest::GuestKind) -> bool {
    *kind == crate::guest::GuestKind::Qemu
}

/// A list decoded without spare room. serde grows a `Vec` by doubling as it decodes (room
/// for 4 entries of 96 bytes for 1), and the daemon keeps every record between cycles: at
/// 50,000 specs the history's spare room was 14 of its 18 MiB (heaptrack; issue #47).
fn exact_size<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let mut v = Vec::<T>::deserialize(d)?;
    v.shrink_to_fit();
    Ok(v)
}

/// What proxsync remembers about one spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SpecRecord {
    /// Unique id of this spec's VM, written into the VM's description marker.
    pub uid: CompactString,
    /// The site (a `[[sites]]` name) the spec's VM is on.
    pub site: CompactString,
    /// The spec's VM: its VMID, node and where it is in its life. Changed only through
    /// `store::Store::transition` (in `proxsync`) (or a fresh record's first write).
    #[serde(flatten, with = "stored_state")]
    pub vm: VmState,
    /// The kind of guest `vm` is (set where the guest is made or taken: the create's intent,
    /// an adoption, a re-label): a spec whose `kind` changed since is held, never answered by
    /// a create or a call on the other kind's path. Absent (a VM) in records of a VM, as in
    /// every record of an earlier release.
    #[serde(skip_serializing_if = "is_qemu")]
    pub kind: crate::guest::GuestKind,
    /// The `ProxmoxImage` file the guest was made from (`NAME-<12 hex digits>.EXT`), set by
    /// the create's intent: a new version of the image (another file) is what
    /// `imagePolicy: Recreate` rebuilds the guest for. `None`: not made from one, adopted, or
    /// made by a release that did not record it (never rebuilt: its version is not known).
    /// Boxed once more (8 bytes): most records have none, and the map holds 50,000 records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub made_from: Option<Box<MadeFrom>>,
    /// The guest was made for a `ProxmoxTemplate` (the create's intent says so): turned into a
    /// template, it is still the spec's, converged and removed as such. A template the record
    /// does not say was built (a VM a person turned into one) is never judged as a guest.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub built_template: bool,
    /// Hash of the spec as last fully applied.
    pub applied_hash: Option<CompactString>,
    /// The same without the names (`spec::content_hash`): a new spec with this content in the
    /// commit that removes this one is a rename, not a delete plus a create.
    pub applied_content: Option<CompactString>,
    /// The spec's own tags (user tags and tenant tag) as last applied, for the three-way merge
    /// that keeps tags added by hand.
    pub applied_tags: Vec<String>,
    /// Disk size last requested, so a resize is not repeated while PVE reports the old size.
    pub applied_disk_bytes: Option<u64>,
    /// Config keys PVE keeps pending until a reboot, with the spec hash they belong to.
    pub reboot_pending: Vec<String>,
    /// When proxsync last rebooted the VM for `rebootPolicy` (unix ms): at most one reboot
    /// per [`crate::plan::MIN_REBOOT_INTERVAL`], so a change PVE never applies cannot make
    /// a reboot loop.
    pub last_reboot_ms: Option<u64>,
    /// proxsync made the VM an HA resource (the spec's `ha`): removing `ha` from the spec
    /// removes the resource. An HA resource a person added is never removed.
    pub ha_applied: bool,
    /// The HA group (PVE 8) or node-affinity rule (PVE 9) proxsync made for the VM's
    /// `ha.nodes`: only one named here (and still carrying proxsync's mark) is removed.
    pub ha_rule: Option<String>,
    /// Failed attempts in a row, which set the backoff; 0 after a success.
    pub attempts: u32,
    /// When the next attempt is due (unix ms): a failure's backoff, or a look again soon at a
    /// task still running; `None`: at the next cycle.
    pub next_attempt_ms: Option<u64>,
    /// Boxed, as `last_task`: most records have none, and the map holds 10,000 records.
    pub last_error: Option<Box<ErrorRecord>>,
    /// Set once the VM was created (or adopted); never cleared while the spec exists. Not
    /// derived from `vm`: a VM that vanished leaves the record `Absent` (and then `Creating`
    /// again) while `Provisioned` stays True, as the status contract says (it never reverts).
    pub provisioned: bool,
    /// The VM was taken over (adopted by its marker, or by hand), not created by this install
    /// (`Provisioned` says `Adopted`). Meaningful only with `provisioned`.
    pub adopted: bool,
    /// The spec's `deletionPolicy: Orphan`, remembered for when the spec is gone (kept in
    /// line with the spec every cycle that plans).
    pub orphan_on_delete: bool,
    /// The spec was observe-only when last seen (its `managementPolicy`, or the config's for
    /// its file: `observe_paths`, `management_policy`), remembered for when the spec is gone:
    /// a removed spec keeps the policy, so its VM gets no action (`plan::hands_off`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub observe_only: bool,
    /// The spec's `dependsOn`, remembered for when the spec is gone: removals go dependants
    /// first.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub depends_on: Box<[String]>,
    /// The guest's addresses as its agent last reported them (read when proxsync acts on a
    /// running VM; empty without an agent).
    pub ip_addresses: Vec<String>,
    /// The last task proxsync started or waited for, for status.
    pub last_task: Option<Box<TaskRecord>>,
    /// The last attempts, most recent first, at most 10 ([`SpecRecord::note`]). Decoded at
    /// its exact size ([`exact_size`]).
    #[serde(deserialize_with = "exact_size")]
    pub history: Vec<HistoryEntry>,
    /// The spec's `protection` as last applied (`None`: not managed, the VM's flag is left
    /// as it is): a removed spec's VM is unprotected for its delete only when the spec managed
    /// the flag (`gate::volume::vm_delete`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_protection: Option<bool>,
    /// The VM whose `destroyDisks` this record has followed since it made the VM, or since
    /// its first converge (an adoption, a database rebuilt, a record of an older release):
    /// only a slot added to `destroyDisks` while followed is bound to the volume it holds
    /// and destroyed (`gate::volume::destroy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destroy_disks_vmid: Option<u32>,
    /// Seeds uploaded and destroys bound (boxed: most records have neither).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Box<Volumes>>,
    /// The own identity of the guest `vm` names (a VM's smbios1 uuid, a container's first
    /// NIC's MAC), read from its config while its marker verified: it shows the guest is still
    /// the spec's after a person removed the marker line from its notes
    /// (`gate::identity::verify_by_identity`). Records of earlier releases have none until the
    /// guest's next converge.
    /// Boxed: a record of 10,000 holds one each, but the pointer keeps the map's entries small.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity: Option<Box<RecordedIdentity>>,
    /// The changes `changePolicy` guards: the snapshot before the change in flight, proxsync's
    /// own snapshots of the guest, and a change rolled back. Boxed: most records have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Box<Changes>>,
}

/// What a record keeps of the changes `changePolicy` guards, for one guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Changes {
    /// The guest the snapshots are of: another VMID (the guest made anew) starts afresh.
    pub vmid: u32,
    /// The change in flight, from its snapshot to its end.
    pub guard: Option<GuardedChange>,
    /// The snapshots proxsync took of the guest, oldest first: the only ones it rolls back to
    /// or deletes. A snapshot a person made is never named here.
    pub snapshots: Vec<String>,
    /// The change rolled back: not tried again while the spec's hash is this one, until
    /// `proxsync reconcile NAME --retry`.
    pub rolled_back: Option<RolledBack>,
}

/// A change guarded by a snapshot, from before the snapshot to its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardedChange {
    /// The snapshot taken before it (`proxsync-<unix seconds>`).
    pub snapshot: String,
    /// Where it is.
    pub step: ChangeStep,
    /// When the step began (unix ms): a guest's health is judged from then on.
    pub since_ms: u64,
}

impl GuardedChange {
    /// The name of the snapshot taken at `now_ms`: `proxsync-<unix seconds>` (PVE's
    /// `pve-configid`; one change of a guest at a time, so one a second at most).
    pub fn snapshot_name(now_ms: u64) -> String {
        format!("proxsync-{}", now_ms / 1000)
    }
}

/// Where a guarded change is. Each step is written before the request it stands for: a kill
/// at any instant leaves a record the next cycle finishes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeStep {
    /// The snapshot was asked for: the guest's snapshot listing says whether it was taken.
    Snapshotting,
    /// The snapshot is taken and the change applied (or being applied): its end waits for the
    /// guest to pass its health checks.
    Applied,
    /// A rollback to the snapshot was asked for: asked again until it ended (a rollback to the
    /// same snapshot leaves the same guest).
    RollingBack,
}

/// A change rolled back because the guest was unhealthy after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolledBack {
    /// The spec hash of the change.
    pub hash: String,
    /// The snapshot the guest was rolled back to.
    pub snapshot: String,
    /// When (unix ms).
    pub at_ms: u64,
    /// What failed, in proxsync's words (a health check and its answer).
    pub why: String,
}

impl SpecRecord {
    /// The changes guarded on guest `vmid`: `None` when the record's are of another guest.
    pub fn changes_of(&self, vmid: u32) -> Option<&Changes> {
        self.changes.as_deref().filter(|c| c.vmid == vmid)
    }

    /// The changes guarded on guest `vmid`, made afresh when the record's are of another.
    pub fn changes_mut(&mut self, vmid: u32) -> &mut Changes {
        let c = self.changes.get_or_insert_with(Default::default);
        if c.vmid != vmid {
            **c = Changes {
                vmid,
                ..Changes::default()
            };
        }
        c
    }

    /// When the guarded change in flight on guest `vmid` was applied: its health is judged
    /// from then on.
    pub fn change_applied_ms(&self, vmid: u32) -> Option<u64> {
        let g = self.changes_of(vmid)?.guard.as_ref()?;
        (g.step == ChangeStep::Applied).then_some(g.since_ms)
    }
}

/// The `ProxmoxImage` file a guest was made from ([`SpecRecord::made_from`]); stored as the
/// file name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MadeFrom {
    /// `NAME-<12 hex digits>.EXT`.
    pub file: String,
}

impl SpecRecord {
    /// The file the guest was made from, if recorded.
    pub fn made_from(&self) -> Option<&str> {
        self.made_from.as_ref().map(|m| m.file.as_str())
    }
}

/// A guest's own identity, as read at one VMID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedIdentity {
    /// The VMID it was read at: it says nothing of another one.
    pub vmid: u32,
    /// A VM's smbios1 uuid, or a container's first NIC's MAC.
    pub id: crate::guest::GuestId,
}

/// The volume evidence of one spec: what proxsync recorded when it wrote a volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Volumes {
    /// The cloud-init seed images proxsync uploaded for the VM that may still be on their
    /// storage, as the storage listed each right after its upload.
    pub seeds: Vec<SeedUpload>,
    /// Each `destroyDisks` slot as applied to the VM [`SpecRecord::destroy_disks_vmid`].
    pub destroys: Vec<DiskDestroy>,
}

/// A seed image as its storage listed it right after proxsync uploaded it (PVE's content
/// listing gives a file's `size` and `ctime`, the inode's change time, which only the kernel
/// sets: pve-storage `PVE/Storage/Plugin.pm` `get_subdir_files`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedUpload {
    /// `local:iso/proxsync.<install>.<spec>.<hash12>.iso`.
    pub volid: String,
    /// Its size in bytes, as listed.
    pub size: u64,
    /// Its ctime as listed (seconds since the epoch), set by the kernel, never by an uploader.
    pub ctime: u64,
}

/// One `destroyDisks` slot: the volume its destroy is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskDestroy {
    /// The drive key (`scsi1`), or a container's mount point (`mp0`).
    pub slot: String,
    /// The volume the slot held when the destroy was first applied (or when the record began
    /// following the VM, for [`DestroyState::Unbound`]); `None`: the slot was empty.
    pub volume: Option<String>,
    /// Where the destroy is.
    pub state: DestroyState,
    /// When the state was last set (unix ms).
    pub at_ms: u64,
    /// The volume last reported as found in the slot and not destroyed, so it is noted once.
    #[serde(default)]
    pub reported: Option<String>,
}

/// Where a `destroyDisks` slot's destroy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DestroyState {
    /// Bound to `volume`, recorded before the destroy is sent; not known to be done (the
    /// request may not have left, a crash may have come between it and its answer).
    Bound,
    /// Done: `volume` was destroyed (or the slot was empty, `volume` `None`). Never again.
    Destroyed,
    /// The slot was listed before the record followed the VM: nothing is known of what the
    /// spec's author meant, so nothing in it is ever destroyed.
    Unbound,
}

/// A person's confirmation that VM `vmid` is spec `spec`'s (`proxsync adopt`), after the
/// checks `engine::adopt_by_hand` made: what `store::Store::record_adoption` (in `proxsync`)
/// writes, directly or through the running daemon's control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adoption {
    /// The spec the person named.
    pub spec: String,
    /// The site the VM is on.
    pub site: String,
    /// The node the VM is on.
    pub node: String,
    /// The VM the person named.
    pub vmid: u32,
    /// The uid of the VM's marker.
    pub uid: String,
    /// The spec's `deletionPolicy: Orphan`, kept as [`SpecRecord::orphan_on_delete`].
    pub orphan_on_delete: bool,
    /// The guest's own identity as the command read it (kept as the record's, see
    /// [`SpecRecord::identity`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<crate::guest::GuestId>,
}

impl SpecRecord {
    /// The identity recorded for the guest at `vmid`, if any (one recorded at another VMID
    /// says nothing of this one).
    pub fn identity_at(&self, vmid: u32) -> Option<&crate::guest::GuestId> {
        self.identity
            .as_ref()
            .filter(|r| r.vmid == vmid)
            .map(|r| &r.id)
    }

    /// Keeps `id`, read from the config of the guest at `vmid` whose marker just verified, as
    /// the guest's identity. `None` (none, or not a well-formed one) keeps what was recorded.
    pub fn remember_identity(&mut self, vmid: u32, id: Option<crate::guest::GuestId>) {
        if let Some(id) = id
            && self.identity_at(vmid) != Some(&id)
        {
            self.identity = Some(Box::new(RecordedIdentity { vmid, id }));
        }
    }

    /// Takes what the record keeps of its spec for when the spec is gone (`deletionPolicy`,
    /// `dependsOn`; whether it is observe-only is left as it was); whether anything changed.
    pub fn follow(&mut self, spec: &crate::spec::Spec) -> bool {
        self.follow_with(spec, &spec.depends_on, self.observe_only)
    }

    /// [`SpecRecord::follow`], with `depends_on` the spec's dependencies as names of specs
    /// (a set's name given as its members': the removal order matches them), and whether the
    /// spec is observe-only now (`Spec::policy`, which needs the config).
    pub fn follow_with(
        &mut self,
        spec: &crate::spec::Spec,
        depends_on: &[String],
        observe_only: bool,
    ) -> bool {
        let orphan = spec.deletion_policy == crate::spec::DeletionPolicy::Orphan;
        if self.orphan_on_delete == orphan
            && *self.depends_on == *depends_on
            && self.observe_only == observe_only
        {
            return false;
        }
        self.orphan_on_delete = orphan;
        self.depends_on = depends_on.into();
        self.observe_only = observe_only;
        true
    }

    /// Records `task` as the last task, the ones before it kept in memory
    /// ([`TaskRecord::earlier`]) for [`SpecRecord::finish_attempt`].
    pub fn set_task(&mut self, mut task: TaskRecord) {
        if let Some(prev) = self.last_task.take() {
            let TaskRecord {
                upid,
                at_ms,
                earlier,
                ..
            } = *prev;
            task.earlier = earlier;
            if upid != task.upid {
                task.earlier.push((upid, at_ms));
            }
        }
        self.last_task = Some(Box::new(task));
    }

    /// Completes the last history entry, of an attempt started at `since_ms` (unix ms): how
    /// long it took, and the tasks recorded since, in the order they ran (the earlier ones are
    /// forgotten).
    pub fn finish_attempt(&mut self, since_ms: u64) {
        if let Some(entry) = self.history.first_mut() {
            entry.took_ms = Some(entry.at_ms.saturating_sub(since_ms));
        }
        let Some(last) = self.last_task.as_mut() else {
            return;
        };
        let mut tasks: Vec<String> = Vec::new();
        let earlier = std::mem::take(&mut last.earlier);
        let ran = earlier
            .into_iter()
            .chain(std::iter::once((last.upid.clone(), last.at_ms)));
        for (upid, at_ms) in ran {
            if at_ms >= since_ms && !tasks.contains(&upid) {
                tasks.push(upid);
            }
        }
        if let Some(entry) = self.history.first_mut() {
            entry.tasks = tasks;
        }
    }

    /// Adds a history entry, most recent first, keeping 10.
    pub fn note(&mut self, at_ms: u64, action: &str, outcome: &str) {
        self.history.insert(
            0,
            HistoryEntry {
                at_ms,
                action: action.into(),
                outcome: outcome.chars().take(300).collect(),
                tasks: Vec::new(),
                took_ms: None,
            },
        );
        self.history.truncate(10);
    }

    /// The VMID the record holds: its VM's, or the one reserved by a create in flight.
    pub fn vmid(&self) -> Option<u32> {
        self.vm.vmid()
    }

    /// The record's volume evidence, made when first needed.
    pub fn volumes_mut(&mut self) -> &mut Volumes {
        self.volumes.get_or_insert_with(Default::default)
    }

    /// The upload recorded for the seed `volid`.
    pub fn seed_upload(&self, volid: &str) -> Option<&SeedUpload> {
        self.volumes
            .as_ref()
            .and_then(|v| v.seeds.iter().find(|s| s.volid == volid))
    }

    /// The binding of `destroyDisks` slot `slot`.
    pub fn disk_destroy(&self, slot: &str) -> Option<&DiskDestroy> {
        self.volumes
            .as_ref()
            .and_then(|v| v.destroys.iter().find(|d| d.slot == slot))
    }

    /// Drops the volume evidence when it holds nothing.
    pub fn tidy_volumes(&mut self) {
        if self
            .volumes
            .as_ref()
            .is_some_and(|v| v.seeds.is_empty() && v.destroys.is_empty())
        {
            self.volumes = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(upid: &str, at_ms: u64) -> TaskRecord {
        TaskRecord {
            upid: upid.into(),
            kind: "qmclone".into(),
            status: "OK".into(),
            at_ms,
            earlier: Vec::new(),
        }
    }

    /// The engine holds every record between cycles (50,000 and more): a decoded record's
    /// short strings (uid, site, node, hashes, the history's action and outcome) are held
    /// inline, where each `String` took a heap block (issue 47).
    #[test]
    fn a_decoded_records_short_strings_are_held_inline() {
        let mut rec = SpecRecord {
            uid: "0123456789abcdef".into(),
            site: "us-sfvalley".into(),
            vm: VmState::Exists {
                vmid: 100,
                node: "pve1".into(),
            },
            applied_hash: Some("0123456789abcdef".into()),
            applied_content: Some("fedcba9876543210".into()),
            ..SpecRecord::default()
        };
        rec.note(1, "converge", "ok");
        let json = serde_json::to_string(&rec).unwrap();
        let back: SpecRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rec);
        let VmState::Exists { node, .. } = &back.vm else {
            panic!("{:?}", back.vm)
        };
        let strings = [
            ("uid", &back.uid),
            ("site", &back.site),
            ("node", node),
            ("applied hash", back.applied_hash.as_ref().unwrap()),
            ("applied content", back.applied_content.as_ref().unwrap()),
            ("action", &back.history[0].action),
            ("outcome", &back.history[0].outcome),
        ];
        for (what, text) in strings {
            assert!(!text.is_heap_allocated(), "{what} {text:?} is on the heap");
        }
    }

    /// A decoded record's history holds no spare room (it is kept for every spec).
    #[test]
    fn a_decoded_history_is_exactly_its_size() {
        let mut rec = SpecRecord::default();
        rec.note(1, "create", "ok");
        let json = serde_json::to_string(&rec).unwrap();
        let back: SpecRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back.history.len(), 1);
        assert_eq!(back.history.capacity(), 1);
        assert_eq!(back, rec);
        let none: SpecRecord = serde_json::from_str("{}").unwrap();
        assert!(none.history.is_empty());
    }

    /// An attempt's history line names every task it ran, in order, once each, and none of
    /// an earlier attempt's, and how long it took; what it keeps to do so is never stored.
    #[test]
    fn an_attempt_names_the_tasks_it_ran() {
        let mut rec = SpecRecord::default();
        rec.set_task(task("old", 5));
        rec.set_task(task("clone", 10));
        rec.set_task(task("clone", 12));
        rec.set_task(task("start", 15));
        rec.note(16, "create", "ok");
        rec.finish_attempt(10);
        assert_eq!(rec.history[0].tasks, ["clone", "start"]);
        assert_eq!(rec.history[0].took_ms, Some(6));
        assert!(rec.last_task.as_ref().unwrap().earlier.is_empty());
        let json = serde_json::to_string(&rec).unwrap();
        assert!(!json.contains("earlier") && !json.contains("old"), "{json}");
        // The next attempt ran none.
        rec.note(20, "converge", "ok");
        rec.finish_attempt(20);
        assert!(rec.history[0].tasks.is_empty());
        assert_eq!(rec.history[1].tasks, ["clone", "start"]);
    }
}
