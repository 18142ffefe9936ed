//! Planning: a pure function from (desired specs, observed sites, state records, now) to the
//! actions of this cycle and a verdict per spec. No I/O, no clock: time is passed in, so the
//! same inputs always give the same plan, and the planner is tested without any network.
//!
//! Rules (docs/concepts.md, "How reconciling works"):
//! - A VM is touched only if it is owned: this install's tag and marker, or known by VMID
//!   from the state (whose marker is re-verified by `execute` before anything destructive).
//! - A spec whose VM is missing gets a create, unless a VM with its marker exists (adopt) or a
//!   create is already in flight (resume: never a second create).
//! - Nothing is created, changed or deleted on an unhealthy node or an unreachable site; a VM
//!   listed as `unknown` is not judged.
//! - An invalid spec leaves its VM exactly as it is: it is neither updated nor treated as
//!   removed. When the spec set could not be read completely, nothing is treated as removed.
//! - Deletes are refused as a whole when the desired set is empty, or when they would remove
//!   more than `max_delete_fraction` of the managed VMs.
//! - A spec outside this install's `[source] selector` is another install's: its VM is handed
//!   over (this install's tag removed, the signed marker kept), never deleted; a VM of ours
//!   still held by another install (its tag) waits until that install released it.
//! - A spec in backoff is left alone until its next attempt, unless its inputs changed (or,
//!   in an explicit `run --once`, its last failure was transient).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use crate::config::ReconcileConfig;
use crate::guest::GuestKind;
use crate::model::SiteView;
use crate::model::SpecRecord;
use crate::ownership::ownership_tag;
use crate::pve::Upid;
use crate::spec::Specs;

pub mod change;
pub mod condition;
mod dependencies;
pub mod evidence;
mod hands_off;
mod hash;
mod images;
mod index;
mod nodes;
mod removals;
mod rename;
mod rollout;
mod spec;

pub use condition::{ConditionText, HandsOff};
pub use hands_off::{Cause, Held, Observing};
pub use nodes::{UnknownNode, specs_with_unknown_nodes, unknown_nodes};
pub use removals::{Fraction, Valve};
pub use spec::{AdoptRefusal, Unreadable};

use crate::model::RewindBatch;
pub use crate::util::fnv::{
    FnvBuildHasher, FnvHashMap, FnvHashSet, FnvHasher, fnv, fnv_from, fnv_hex,
};
pub use hash::{
    FieldDrift, MIN_REBOOT_INTERVAL, drift, inputs_hash, merge_tags, observed_drift, reboot_due,
};

/// Everything the planner looks at.
pub struct PlanInput<'a> {
    /// This install's id: its ownership tag and the install its markers name.
    pub install_id: &'a str,
    /// Valid specs.
    pub desired: &'a Specs,
    /// Names of specs that exist but failed validation.
    pub invalid: &'a BTreeSet<String>,
    /// Names of valid specs outside this install's `[source] selector`: another install's.
    /// Neither desired nor removed: their VMs are handed over.
    pub elsewhere: &'a BTreeSet<String>,
    /// This install has a `[source] selector`: it shares the repository with other installs,
    /// so a VM whose marker names one of its specs for another install is that install's
    /// until handed over (waited for, then adopted). Without one, such VMs are not looked at.
    pub sharded: bool,
    /// False when some file could not be read or an error is tied to no spec name: then no
    /// spec is treated as removed.
    pub complete: bool,
    /// What this cycle observed of each site, by site name.
    pub sites: &'a BTreeMap<String, SiteView>,
    /// The state database's records, by spec name.
    pub records: &'a BTreeMap<String, SpecRecord>,
    /// Orphans first seen: `(site, vmid) -> unix ms`.
    pub orphans_seen: &'a BTreeMap<(String, u32), u64>,
    /// The config's `[reconcile]`: the orphan policy, the valves' limits, the default
    /// management policy.
    pub reconcile: &'a ReconcileConfig,
    /// A hash of the config parts that affect specs (sites, install id): a change resets backoff.
    pub config_hash: &'a str,
    /// Now (unix ms): every comparison with time is made against it.
    pub now_ms: u64,
    /// An explicit `run --once` (a person or a CI job asking for a reconcile now): specs whose
    /// last failure was transient are attempted despite their backoff. The daemon keeps its
    /// schedule (false).
    pub retry_transient_now: bool,
    /// The applied commit rewound the branch: its deletes are judged as one batch.
    pub rewind: Option<&'a RewindBatch>,
    /// The suspensions the state database holds (`proxsync suspend`, and `spec.suspend` once
    /// recorded): by spec name, or [`crate::model::SUSPEND_ALL`].
    pub suspensions: &'a BTreeMap<String, crate::model::Suspension>,
    /// Per (image, node): why a guest of that node cannot be made from that `ProxmoxImage`
    /// yet (a pair not named is Ready): its create waits.
    pub images_waiting: &'a BTreeMap<(String, String), String>,
    /// The spec set's `ProxmoxImage`s by name: the file each names now is the version a guest
    /// under `imagePolicy: Recreate` is rebuilt from.
    pub images: &'a crate::spec::images::ImagesByName,
    /// The specs with `health` whose running guest has not passed its checks (the daemon's
    /// health checks on these views): not Ready for `dependsOn` and a set's roll, which stops
    /// at an unhealthy member. Empty for `proxsync plan`, which checks nothing.
    pub unwell: &'a BTreeMap<String, crate::model::health::Unwell>,
    /// The daemon checked the guests' health on these views (`unwell` is its word); false for
    /// `proxsync plan`, which checks nothing: no guarded change ends or is rolled back on it.
    pub health_checked: bool,
}

impl PlanInput<'_> {
    /// Whether spec `name` exists but failed validation: named by an error, or the version of a
    /// `ProxmoxTemplate` named by one (`NAME-VERSION`: which version a broken document would
    /// make is not known, so none of its records is taken as removed).
    pub fn is_invalid(&self, name: &str) -> bool {
        self.invalid.contains(name)
            || crate::spec::templates::template_of_name(name)
                .is_some_and(|t| self.invalid.contains(t))
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Action {
    /// Create or clone a new VM for the spec.
    Create {
        /// The spec's name.
        spec: String,
        /// The spec's site.
        site: String,
        /// The node the spec names.
        node: String,
    },
    /// A create was in flight (intent recorded): finish it, never start another.
    ResumeCreate {
        /// The spec's name.
        spec: String,
        /// The spec's site.
        site: String,
        /// The node the intent names.
        node: String,
        /// The VMID the intent reserved.
        vmid: u32,
        /// The create's task, when the intent recorded it.
        upid: Option<Box<Upid>>,
    },
    /// A VM carrying the spec's marker exists but the state did not know it.
    Adopt {
        /// The spec the VM's marker names.
        spec: String,
        /// The site the VM is on.
        site: String,
        /// The VM's VMID.
        vmid: u32,
    },
    /// The spec consents to take over VM `vmid` (`proxsync.io/adopt`), which carries no marker
    /// and no install's tag: after its uuid and name are checked again, the signed marker and
    /// the ownership tag are written in one config update. The next cycle converges it.
    AdoptByConsent {
        /// The spec that consents.
        spec: String,
        /// The spec's site.
        site: String,
        /// The node the VM is listed on.
        node: String,
        /// The VMID the consent names.
        vmid: u32,
    },
    /// Bring an existing VM to the spec (declared fields only).
    Converge {
        /// The spec's name.
        spec: String,
        /// The spec's site.
        site: String,
        /// The node the VM is listed on.
        node: String,
        /// The VM's VMID.
        vmid: u32,
        /// What differs, by name (`spec changed`, `tags`, `start`, `memory`, `reboot`, ...).
        why: Vec<String>,
    },
    /// The spec names another node of the VM's cluster: move the VM there (live when it runs),
    /// never recreate it.
    Migrate {
        /// The spec's name.
        spec: String,
        /// The spec's site.
        site: String,
        /// The node the VM is on now.
        node: String,
        /// The VM's VMID.
        vmid: u32,
        /// The node the spec names.
        target: String,
    },
    /// The spec's VM was made from an older version of its `ProxmoxImage` and the spec says
    /// `imagePolicy: Recreate`: delete it (its record kept, `Deleting`) and create it again
    /// from the version the spec set names now. Planned again while its delete is recorded.
    Recreate {
        /// The spec's name.
        spec: String,
        /// The spec's site.
        site: String,
        /// The node the VM is on.
        node: String,
        /// The VM's VMID.
        vmid: u32,
    },
    /// The spec is gone: delete its VM, or release it (`deletionPolicy: Orphan`).
    Remove {
        /// The removed spec's name.
        spec: String,
        /// The site its record names.
        site: String,
        /// The node the VM is on.
        node: String,
        /// The VM's VMID.
        vmid: u32,
        /// Release the VM rather than delete it.
        release: bool,
    },
    /// The spec is gone and so is its VM: forget the record.
    Forget {
        /// The removed spec's name.
        spec: String,
    },
    /// `metadata.name` was renamed (confirmed by the `proxsync.io/renamed-from` annotation):
    /// the VM of spec `from` becomes spec `spec`'s, its marker re-signed; nothing is deleted.
    Relabel {
        /// The new name.
        spec: String,
        /// The old name, whose record names the VM.
        from: String,
        /// The site the VM is on.
        site: String,
        /// The node the VM is on.
        node: String,
        /// The VM's VMID.
        vmid: u32,
    },
    /// The spec is now outside this install's selector: remove this install's ownership tag
    /// from its VM, keep the signed marker (the next owner verifies it before adopting), and
    /// forget the record. Never a delete.
    HandOver {
        /// The spec now another install's.
        spec: String,
        /// The site the VM is on.
        site: String,
        /// The node the VM is on.
        node: String,
        /// The VM's VMID.
        vmid: u32,
    },
    /// A stopped orphan past its grace period.
    DeleteOrphan {
        /// The site the orphan is on.
        site: String,
        /// The node it is listed on.
        node: String,
        /// Its VMID.
        vmid: u32,
    },
}

impl Action {
    /// Whether the action removes a VM from this install: a delete, a release, a hand-over,
    /// an orphan's delete, or forgetting a gone spec's record.
    pub fn removes(&self) -> bool {
        matches!(
            self,
            Action::Remove { .. }
                | Action::HandOver { .. }
                | Action::DeleteOrphan { .. }
                | Action::Forget { .. }
        )
    }

    /// The site and node the action runs on (for per-node limits), if any.
    pub fn node(&self) -> Option<(&str, &str)> {
        match self {
            Action::Create { site, node, .. }
            | Action::ResumeCreate { site, node, .. }
            | Action::AdoptByConsent { site, node, .. }
            | Action::Converge { site, node, .. }
            | Action::Migrate { site, node, .. }
            | Action::Recreate { site, node, .. }
            | Action::Remove { site, node, .. }
            | Action::Relabel { site, node, .. }
            | Action::HandOver { site, node, .. }
            | Action::DeleteOrphan { site, node, .. } => Some((site, node)),
            Action::Adopt { .. } | Action::Forget { .. } => None,
        }
    }

    /// The site the action is on; a record's forgetting is on its record's site.
    pub fn site<'a>(&'a self, records: &'a BTreeMap<String, SpecRecord>) -> Option<&'a str> {
        match self {
            Action::Forget { spec } => records.get(spec).map(|r| r.site.as_str()),
            Action::Adopt { site, .. } => Some(site),
            other => other.node().map(|(site, _)| site),
        }
    }

    /// The guest the action names, as (site, VMID): every kind's but a create's and a
    /// record's forgetting.
    pub fn guest(&self) -> Option<(&str, u32)> {
        match self {
            Action::ResumeCreate { site, vmid, .. }
            | Action::Adopt { site, vmid, .. }
            | Action::AdoptByConsent { site, vmid, .. }
            | Action::Converge { site, vmid, .. }
            | Action::Migrate { site, vmid, .. }
            | Action::Recreate { site, vmid, .. }
            | Action::Remove { site, vmid, .. }
            | Action::Relabel { site, vmid, .. }
            | Action::HandOver { site, vmid, .. }
            | Action::DeleteOrphan { site, vmid, .. } => Some((site, *vmid)),
            Action::Create { .. } | Action::Forget { .. } => None,
        }
    }

    /// The spec the action is for, if any.
    pub fn spec(&self) -> Option<&str> {
        match self {
            Action::Create { spec, .. }
            | Action::ResumeCreate { spec, .. }
            | Action::Adopt { spec, .. }
            | Action::AdoptByConsent { spec, .. }
            | Action::Converge { spec, .. }
            | Action::Migrate { spec, .. }
            | Action::Recreate { spec, .. }
            | Action::Remove { spec, .. }
            | Action::Relabel { spec, .. }
            | Action::HandOver { spec, .. }
            | Action::Forget { spec } => Some(spec),
            Action::DeleteOrphan { .. } => None,
        }
    }
}

/// A [`Verdict`] in one line, for `proxsync plan` (its words are in `words`).
#[derive(Debug, Clone, Copy)]
pub struct VerdictLine<'a> {
    /// The verdict.
    pub verdict: &'a Verdict,
    /// What the spec's guest is.
    pub kind: GuestKind,
    /// The spec's record: its attempts and last error, for a spec backing off.
    pub rec: Option<&'a SpecRecord>,
    /// Now, for the time a backoff ends (`14:20:23 UTC (in 5m)`).
    pub now_ms: u64,
}

/// Why a spec gets no action, or that it gets one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "camelCase")]
pub enum Verdict {
    /// The VM matches the spec.
    UpToDate {
        /// The spec's VM.
        vmid: u32,
    },
    /// An action was planned.
    Acting,
    /// The spec names node `to` and its VM `vmid` is on node `from` of the same cluster: it is
    /// being migrated (live when it runs). Other changes wait until it is there.
    Migrating {
        /// The node the VM is on.
        from: String,
        /// The node the spec names.
        to: String,
        /// The VM's VMID.
        vmid: u32,
    },
    /// The spec's change was rolled back (`changePolicy.rollback: OnUnhealthy`): guest `vmid`
    /// was not healthy after it, so it was put back to `snapshot`. The change is not tried again
    /// until the spec changes or `proxsync reconcile NAME --retry`.
    RolledBack {
        /// The spec's guest.
        vmid: u32,
        /// The snapshot it was rolled back to.
        snapshot: String,
        /// What failed, in proxsync's words.
        why: String,
    },
    /// A previous attempt failed; the next is not due yet.
    BackingOff {
        /// When the next attempt is due (unix ms).
        until_ms: u64,
    },
    /// The VM's node (or the spec's node, for a create) is offline, or the cluster lost quorum.
    NodeUnhealthy {
        /// The VM's node (the spec's, for a create).
        node: String,
        /// Whether the cluster has quorum.
        quorate: bool,
    },
    /// The site could not be read.
    SiteUnreachable {
        /// Why the site could not be read (serialised as its words).
        error: Unreadable,
    },
    /// The site's endpoint reaches another cluster than the one recorded for it
    /// (`gate::site`): nothing there is judged or touched until a person fixes the endpoint or
    /// accepts the cluster (`proxsync accept site`). `message` says which and what to do.
    SiteIdentityChanged {
        /// The cluster recorded, the one seen, and what to do, in words.
        message: String,
    },
    /// The VM is listed but its state is unknown (node offline, just created): not judged.
    Unknown {
        /// The VM listed as `unknown` or without a name.
        vmid: u32,
    },
    /// No guest of the spec is known, and a create or clone this install's token started is
    /// making guest `vmid`, which no record explains (the state database was lost while it
    /// ran): it may be the spec's, so nothing is created until its task ends and its marker
    /// can be read (`observe::mark_in_making`).
    BeingMade {
        /// The guest being made.
        vmid: u32,
    },
    /// No guest of the spec is listed, and the site's listing has entries that could not be
    /// read (`SiteView::incomplete`): the guest may be among them, so none is created this
    /// cycle. `why` names the entries.
    ListingIncomplete {
        /// The entries that could not be read, and what holds, in a sentence.
        why: String,
    },
    /// The spec failed validation: its VM is left as it is.
    Invalid,
    /// The commit removes spec `from` and adds this one with the same content: probably a
    /// rename of `metadata.name`. Neither the delete nor the create happens until the
    /// `proxsync.io/renamed-from: <from>` annotation confirms it (or the content differs).
    RenameSuspected {
        /// The removed spec with the same content.
        from: String,
        /// The VM of the removed spec.
        vmid: u32,
    },
    /// The spec is renamed from `from` (`proxsync.io/renamed-from`), whose record names VM
    /// `vmid`, but that VM's marker does not show it is `from`'s (`why`, from `gate::rename`):
    /// neither is it re-labelled nor is `from` removed, and nothing is created for the spec,
    /// until a person settles it.
    RenameUnproven {
        /// The removed spec it is renamed from.
        from: String,
        /// The VM `from`'s record names.
        vmid: u32,
        /// What the marker showed, from `gate::rename` (serialised as its words).
        why: Box<crate::gate::rename::Refused>,
    },
    /// The spec moved to another site, and its VM `vmid` is still on site `from`: proxsync
    /// never moves a VM between clusters by itself (a create here plus a delete there). It is
    /// reported until a person removes it there (then the spec is created on its new site) or
    /// moves the spec back.
    SiteMoved {
        /// The site the VM is still on.
        from: String,
        /// The VM's VMID.
        vmid: u32,
    },
    /// The spec's guest `vmid` (by its record or its marker) is a `found` (a VM where the spec
    /// now asks for a container, or the other way round). Neither converged, replaced nor
    /// deleted: a person removes the old guest or changes the kind back.
    KindChanged {
        /// The spec's guest.
        vmid: u32,
        /// The kind that guest is.
        found: crate::guest::GuestKind,
    },
    /// No guest of the spec is known, and guest `vmid`, which no record explains, carries this
    /// install's tag and the spec's guest's name but no marker line (a person replaced its notes,
    /// and the record was lost): nothing is created until a person confirms it (`proxsync
    /// adopt`) or removes the tag.
    Unmarked {
        /// The guest with the tag and the name but no marker line.
        vmid: u32,
    },
    /// No VM of the spec is known, and VM `vmid` claims it with a marker that does not verify
    /// (a copy, a typed marker, or a lost marker key): nothing is created until a human
    /// confirms it (`proxsync adopt`) or removes it.
    UnverifiedClaim {
        /// The VM whose marker claims the spec.
        vmid: u32,
    },
    /// VM `vmid` carries this spec's marker for another install, `install`, and still an
    /// ownership tag `proxsync.*`: the spec moved here from that install, which has not handed
    /// the VM over yet (or an unrelated install uses the same spec and VM name). Nothing is
    /// created or adopted until the tag is gone.
    HeldByInstall {
        /// The install whose marker the VM carries.
        install: String,
        /// The VM's VMID.
        vmid: u32,
    },
    /// The spec consents to take over VM `vmid` (`proxsync.io/adopt`), and it is refused:
    /// `why` says what differs from the consent (the VM is gone, renamed, carries a marker or
    /// an install's tag) and what to do. Nothing is created or changed.
    AdoptRefused {
        /// The VMID the consent names.
        vmid: u32,
        /// What differs from the consent, and what to do (serialised as its words).
        why: AdoptRefusal,
    },
    /// The spec is observe-only (`managementPolicy: Observe`, `observe_paths`, the install's
    /// policy): nothing is done for it. `vmid`: its VM (by record, marker or consent), `None`
    /// when there is none; `drift`: how the VM differs from the spec in what the listing shows.
    /// `renamed_from`: the spec is renamed from that removed spec, which was observe-only when
    /// last seen: its VM (`vmid`) is not re-labelled, and nothing is done for this spec.
    Observed {
        /// The spec's VM, if it has one.
        vmid: Option<u32>,
        /// How the VM differs from the spec in what the listing shows.
        drift: Vec<FieldDrift>,
        /// The removed, observe-only spec this one is renamed from.
        #[serde(skip_serializing_if = "Option::is_none")]
        renamed_from: Option<String>,
    },
    /// The spec is suspended (`spec.suspend`, `proxsync suspend`): observed as `Observed` is,
    /// and no action of any kind is taken for it until resumed. `renamed_from`: the suspension
    /// is that of the removed spec this one is renamed from: its VM (`vmid`) is not re-labelled,
    /// and nothing is done for this spec, until that name is resumed.
    Suspended {
        /// The spec's VM, if it has one.
        vmid: Option<u32>,
        /// How the VM differs from the spec in what the listing shows.
        drift: Vec<FieldDrift>,
        /// The suspension: who, since when, why.
        by: Box<crate::model::Suspension>,
        /// The removed spec this one is renamed from, whose suspension this is.
        #[serde(skip_serializing_if = "Option::is_none")]
        renamed_from: Option<String>,
    },
    /// The spec's guest is made from `ProxmoxImage` `image`, which is not on its node's
    /// storage yet: it is not created until it is.
    WaitingForImage {
        /// The image's name.
        image: String,
        /// Why it is not there: downloading, failed (PVE's words), or not reachable.
        why: String,
    },
    /// The spec depends on spec `on` (`dependsOn`), which is not Ready: its VM is not created,
    /// started or rebooted until it is.
    WaitingForDependencies {
        /// The spec it waits for.
        on: String,
        /// `on` is another install's spec (outside `[source] selector`): this install never
        /// sees it Ready, so the wait lasts until the spec stops naming it.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        elsewhere: bool,
        /// `on`'s guest runs and matches its spec but has not passed its health checks
        /// (`spec.health`).
        #[serde(rename = "notHealthy", skip_serializing_if = "std::ops::Not::not")]
        not_healthy: bool,
    },
    /// The spec is a member of set `set`, and rebooting or rebuilding it for a change now would
    /// make more than `max_unavailable` of its members unavailable: it waits for its turn. Without
    /// a set: a spec of its own whose rebuild from a new image waits for the one of its site
    /// being rebuilt (one at a time per site).
    RollingOut {
        /// The set's name; `None`: the specs of their own of the spec's site.
        #[serde(skip_serializing_if = "Option::is_none")]
        set: Option<String>,
        /// How many of the set's members may be unavailable at once (`maxUnavailable`).
        max_unavailable: u32,
        /// The member whose guest did not pass its health checks after a change (`Unhealthy`):
        /// the roll stops there until it passes or a person acts.
        #[serde(skip_serializing_if = "Option::is_none")]
        stopped_by: Option<String>,
    },
    /// This cycle would take over `count` VMs by consent, more than `[reconcile]
    /// max_adopt_per_cycle` = `max`: none is taken until the limit is raised or the specs
    /// come in smaller commits.
    AdoptionsHeld {
        /// The adoptions by consent this cycle would make.
        count: usize,
        /// `[reconcile] max_adopt_per_cycle`.
        max: u32,
    },
}

/// An orphan: owned by this install, matching no spec and no record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Orphan {
    /// The site it is on.
    pub site: String,
    /// Its VMID.
    pub vmid: u32,
    /// What the guest is, as the listing shows it: `qemu` or `lxc` in `plan --json`.
    pub kind: crate::guest::GuestKind,
    /// The node it is listed on.
    pub node: String,
    /// Its name as listed.
    pub name: Option<String>,
    /// Its power state as listed (`running`, `stopped`, `unknown`).
    pub power: String,
    /// When it was first seen as an orphan (unix ms).
    pub first_seen_ms: u64,
    /// What happens to it.
    pub disposition: OrphanDisposition,
    /// A second VM claiming this spec (its marker names it; another VM is the spec's).
    pub duplicate_of: Option<String>,
}

/// What happens to an orphan. Its `Display` is the text `proxsync plan` shows (and the
/// plan's JSON holds); the status files render it with a time (`status::orphan_entries`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrphanDisposition {
    /// Left alone and listed.
    Reported,
    /// Its marker names spec `spec` of this install but does not verify (typed by hand or
    /// copied from another VM): never adopted, changed or deleted.
    ForeignClaim {
        /// The spec its marker names.
        spec: String,
    },
    /// A template of this install's carrying the marker of spec `spec`, which no record
    /// explains (a `ProxmoxTemplate`'s old version whose record was lost, or a guest a person
    /// made a template): never deleted by proxsync.
    Template {
        /// The spec its marker names.
        spec: String,
    },
    /// Deleted in this cycle (`DeleteOrphan`).
    Deleting,
    /// Stopped, under `orphans = "delete-stopped"`: deleted once its grace period ends at
    /// `at_ms` (unix ms).
    DeleteAfter {
        /// When its grace period ends (unix ms).
        at_ms: u64,
    },
    /// It was due for deletion, but a safety valve refused this cycle's deletes.
    Refused,
    /// The VM of spec `spec`, which now names site `to`: kept and listed until a person deletes
    /// it (a move between clusters is never a silent create plus delete).
    SiteMoved {
        /// The spec whose VM it is.
        spec: String,
        /// The site the spec names now.
        to: String,
    },
}

impl Serialize for OrphanDisposition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What the planner held back from a cycle's plan as a whole, and why (its words in `words`;
/// serialised as those words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// `removals` removals on `site` wait: its listing had entries that could not be read.
    ListingIncomplete {
        /// How many.
        removals: usize,
        /// The site.
        site: String,
        /// Which entries, as the observation says (`SiteView::incomplete_why`).
        why: String,
    },
    /// The safety valves refused every delete, release and hand-over of the cycle.
    Deletes {
        /// Which valve, and what it counted.
        valve: Valve,
        /// How many of them were hand-overs to another install.
        hand_overs: usize,
    },
    /// `count` adoptions by consent, more than `max_adopt_per_cycle` = `max`: none is taken.
    AdoptionsHeld {
        /// The adoptions by consent this cycle would make.
        count: usize,
        /// `[reconcile] max_adopt_per_cycle`.
        max: u32,
    },
    /// An action, or a count of removals, held because a guest is hands-off.
    HandsOff(Held),
}

impl Serialize for Refused {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The plan of one cycle.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Plan {
    /// The actions to take, sorted.
    pub actions: Vec<Action>,
    /// Each spec's verdict, valid or invalid, by name. Shared, so that a clone of the plan
    /// (an idle cycle's report, kept and returned again) holds no second copy of a map with
    /// one entry per spec; the planner changes it with `Arc::make_mut`, which never copies
    /// while the plan is being made.
    #[serde(serialize_with = "shared_map")]
    pub verdicts: Arc<BTreeMap<compact_str::CompactString, Verdict>>,
    /// The orphans found, and what happens to each.
    pub orphans: Vec<Orphan>,
    /// Orphan sightings to remember (seen now; forgotten when gone).
    #[serde(skip)]
    pub orphans_seen: BTreeMap<(String, u32), u64>,
    /// What the planner held back as a whole, and why: the safety valves that refused deletes,
    /// the adoptions by consent over the limit, hands-off actions.
    pub refused: Vec<Refused>,
    /// Specs claimed by more than one VM (this install's marker naming the spec): the VM
    /// kept and the extras. The extras are never converged; they are reported, and handled
    /// by the orphan policy when they carry the ownership tag.
    pub duplicates: BTreeMap<String, Duplicate>,
    /// Renames of `metadata.name` this plan found: the removed spec -> the spec renamed from
    /// it. The removed spec is not removed meanwhile, and it has no status of its own (the
    /// renamed spec's tells the rename's progress).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub renamed: BTreeMap<String, String>,
    /// Until when (unix ms, exclusive) this is the plan of the same inputs at any later
    /// instant: the earliest time a comparison with `now_ms` could turn out otherwise (a
    /// backoff deadline, an orphan's grace end, a reboot becoming due). `u64::MAX` when time
    /// changes nothing; 0 (the default) claims nothing.
    #[serde(skip)]
    pub valid_until_ms: u64,
    /// Removed specs whose VM's removal waits for the VM of a removed spec that depended on
    /// it (`dependsOn`: dependants go first).
    #[serde(skip)]
    pub removals_waiting: BTreeSet<String>,
    /// Old versions of a `ProxmoxTemplate` kept this cycle, with why
    /// (`removals::template_still_needed`): `plan` and their status files say it.
    #[serde(skip)]
    pub templates_kept: BTreeMap<String, TemplateKept>,
}

/// A shared map serialized as the map itself (serde's `rc` feature is left off for one field).
fn shared_map<S: serde::Serializer, T: Serialize>(map: &Arc<T>, s: S) -> Result<S::Ok, S::Error> {
    map.as_ref().serialize(s)
}

/// Why an old version of a `ProxmoxTemplate` is kept this cycle (its words in `words`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateKept {
    /// Spec `guest`'s guest is being cloned from it (its create's intent names it).
    Cloning {
        /// The spec being cloned.
        guest: String,
    },
    /// A clone of this install's token that no record explains runs on the site.
    UnexplainedClone,
    /// `current`, the current version of template `template`, is not built yet.
    Successor {
        /// The current version's spec.
        current: String,
        /// The template's name.
        template: String,
    },
}

/// Two or more VMs carry the marker of one spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicate {
    /// The site the VMs are on.
    pub site: String,
    /// The VM the spec maps to: the record's, else the one with the recorded uid, else the
    /// lowest VMID.
    pub kept: u32,
    /// The other VMs that carry the marker.
    pub extras: Vec<u32>,
    /// The removed spec this one is renamed from (`proxsync.io/renamed-from`), when its VM is
    /// among the extras: the spec had a VM of its own already. That VM is kept and listed,
    /// never deleted by the orphan policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
}

/// Plans one cycle: each valid spec's decision (or its rename), the invalid ones, then the
/// removals of gone specs and orphans, which the safety valves may refuse as a whole.
/// `proxsync.io/renamed-from` annotations that cannot be applied (`spec::renames`; the loader
/// refuses them first) hold the specs they involve as invalid ones.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    match held_by_renames(input) {
        Some((desired, invalid)) => plan_checked(&PlanInput {
            desired: &desired,
            invalid: &invalid,
            ..*input
        }),
        None => plan_checked(input),
    }
}

/// The desired and invalid specs with those `spec::renames` holds moved from the first to the
/// second; `None` when it holds none.
fn held_by_renames(input: &PlanInput<'_>) -> Option<(Specs, BTreeSet<String>)> {
    if input.desired.iter().all(|s| s.renamed_from.is_none()) {
        return None;
    }
    let desired: FnvHashSet<&str> = input.desired.iter().map(|s| s.name.as_str()).collect();
    let exists = |name: &str| {
        desired.contains(name) || input.is_invalid(name) || input.elsewhere.contains(name)
    };
    let found = crate::spec::renames::conflicts(input.desired, exists);
    if found.is_empty() {
        return None;
    }
    let held = crate::spec::renames::held(&found, input.desired);
    let kept = input.desired.shared().iter();
    let kept = kept.filter(|s| !held.contains(s.name.as_str())).cloned();
    let mut invalid = input.invalid.clone();
    invalid.extend(held.iter().map(|s| s.to_string()));
    Some((kept.collect(), invalid))
}

fn plan_checked(input: &PlanInput<'_>) -> Plan {
    let mut out = Plan::default();
    let tag = ownership_tag(input.install_id);
    let desired_names: FnvHashSet<&str> = input.desired.iter().map(|s| s.name.as_str()).collect();
    let indexes = index::site_indexes(input, &tag);
    let renames = rename::renames(input, &desired_names, &indexes);
    let hands_off = hands_off::HandsOff::new(input);
    let mut reboots_change = u64::MAX;
    // Collected, then built at once: a map built from sorted entries has full nodes, one
    // filled by inserting in order about half-empty ones.
    let mut verdicts = Vec::with_capacity(input.desired.len() + input.invalid.len());
    for spec in input.desired {
        let rec = input.records.get(spec.name.as_str());
        let index = indexes.get(spec.site.as_str());
        if let Some(at) = rec.and_then(|r| hash::reboot_due_changes_at(spec, r, input.now_ms)) {
            reboots_change = reboots_change.min(at);
        }
        // An observe-only or suspended spec gets no action of any kind, a re-label included;
        // nor does a spec renamed from one (the rename and all after it wait).
        let held = match hands_off.spec(spec) {
            Some(cause) => Some((cause, None)),
            None => (renames.decided_from(spec))
                .and_then(|(from, old)| Some((hands_off.name(from)?, old))),
        };
        let verdict = match held {
            Some((cause, old)) => {
                let looked = spec::look(input, spec, rec, index, old);
                hands_off::verdict(&spec.name, looked, cause)
            }
            None => match renames.decide(input, spec, &mut out.actions) {
                Some(v) => v,
                None => spec::plan_spec(input, spec, rec, index, &mut out.actions),
            },
        };
        let duplicate = spec::duplicate(spec, rec, index, &verdict);
        if let Some(d) = renames.duplicate(spec, duplicate) {
            out.duplicates.insert(spec.name.to_string(), d);
        }
        verdicts.push((spec.name.clone(), verdict));
    }
    for name in input.invalid {
        verdicts.push((name.as_str().into(), Verdict::Invalid));
    }
    // As inserting them in this order would: for a name seen twice, the last verdict.
    out.verdicts = Arc::new(BTreeMap::from_iter(verdicts));

    let mut removals =
        removals::gone_specs(input, &desired_names, &renames, &mut out.templates_kept);
    let held_back = removals::held_back(input, &desired_names, &renames);
    removals::orphans(input, &desired_names, &renames, &mut out, &mut removals);
    out.renamed = (renames.by_spec.iter())
        .map(|(to, r)| (r.from.to_string(), to.to_string()))
        .collect();
    let removals = incomplete_listings(input, removals, &mut out);
    removals::apply_valves(input, removals, held_back, &mut out);
    adoption_valve(input, &mut out);
    // After the valves, which judge every removal due at once: an order spreading them over
    // cycles must not spread them under the valves' limits.
    dependencies::hold(input, &mut out);
    images::hold(input, &mut out);
    rollout::hold(input, &mut out);
    // Last, over every action of every kind: the removals of hands-off specs among them
    // (after the valves, which judge every removal due at once: holding a suspended or
    // observe-only spec's removal must not bring the others under `max_delete_fraction`).
    hands_off::hold(&hands_off, &mut out, |name| {
        let spec = input.desired.iter().find(|s| s.name == name)?;
        let index = indexes.get(spec.site.as_str());
        let rec = input.records.get(name);
        Some(spec::look(input, spec, rec, index, None))
    });
    out.actions.sort();
    out.valid_until_ms = valid_until(input, &out).min(reboots_change);
    out
}

/// No removal on a site whose listing had entries that could not be read: the guests of its
/// records may be among them, so a record is not forgotten, and a delete waits for a whole
/// view. Each site's held removals are reported in `refused`.
fn incomplete_listings(
    input: &PlanInput<'_>,
    removals: Vec<Action>,
    out: &mut Plan,
) -> Vec<Action> {
    let incomplete: BTreeMap<&str, &crate::model::SiteView> = (input.sites.iter())
        .filter(|(_, v)| v.incomplete())
        .map(|(name, v)| (name.as_str(), v))
        .collect();
    if incomplete.is_empty() || removals.is_empty() {
        return removals;
    }
    let site_of = |a: &'_ Action| a.site(input.records).map(str::to_string);
    let (held, kept): (Vec<Action>, Vec<Action>) = removals
        .into_iter()
        .partition(|a| site_of(a).is_some_and(|s| incomplete.contains_key(s.as_str())));
    let mut by_site: BTreeMap<String, usize> = BTreeMap::new();
    for a in &held {
        if let Some(site) = site_of(a) {
            *by_site.entry(site).or_default() += 1;
        }
        if let Action::DeleteOrphan { site, vmid, .. } = a
            && let Some(o) = (out.orphans.iter_mut()).find(|o| o.site == *site && o.vmid == *vmid)
        {
            o.disposition = OrphanDisposition::Refused;
        }
    }
    for (site, removals) in by_site {
        let why = incomplete[site.as_str()].incomplete_why();
        (out.refused).push(Refused::ListingIncomplete {
            removals,
            site,
            why,
        });
    }
    kept
}

/// Whether `action`, for `spec`, may reboot the spec's running VM: a reboot planned for
/// pending changes, or any converge of a running VM whose `rebootPolicy` reboots (the converge
/// reboots in the same action when what it applies goes pending).
pub(super) fn may_reboot(input: &PlanInput<'_>, spec: &crate::spec::Spec, action: &Action) -> bool {
    let Action::Converge {
        site, vmid, why, ..
    } = action
    else {
        return false;
    };
    if why.iter().any(|w| w == "reboot") {
        return true;
    }
    if spec.reboot.mode == crate::spec::RebootMode::Never || why.is_empty() {
        return false;
    }
    (input.sites.get(site))
        .and_then(|v| v.vms.get(vmid))
        .is_some_and(|vm| vm.power == crate::model::Power::Running)
}

/// More adoptions by consent than `max_adopt_per_cycle`: none of them this cycle (a wrong
/// directory of imported specs must not take over a cluster in one commit unnoticed).
fn adoption_valve(input: &PlanInput<'_>, out: &mut Plan) {
    let max = input.reconcile.max_adopt_per_cycle;
    let is_consent = |a: &Action| matches!(a, Action::AdoptByConsent { .. });
    let count = out.actions.iter().filter(|a| is_consent(a)).count();
    if count <= max as usize {
        return;
    }
    for action in out.actions.iter().filter(|a| is_consent(a)) {
        if let Some(spec) = action.spec() {
            Arc::make_mut(&mut out.verdicts)
                .insert(spec.into(), Verdict::AdoptionsHeld { count, max });
        }
    }
    out.actions.retain(|a| !is_consent(a));
    out.refused.push(Refused::AdoptionsHeld { count, max });
}

/// Until when `out` is the plan of its inputs at any instant from `input.now_ms` on, from what
/// it says (besides a reboot becoming due, which `plan` finds per spec). Every comparison with
/// `now_ms` is one of these, and each turns only once as time passes:
/// - a spec backs off until its deadline (a deadline passed stays passed), and only a
///   `BackingOff` verdict came from one that is still ahead;
/// - a stopped orphan is deleted at the end of its grace period (`DeleteAfter`);
/// - an orphan seen for the first time is stamped with `now_ms` itself: this plan is that
///   instant's only (the sighting is stored, so the next cycle's inputs differ anyway).
fn valid_until(input: &PlanInput<'_>, out: &Plan) -> u64 {
    let backoffs = out.verdicts.values().filter_map(|v| match v {
        Verdict::BackingOff { until_ms } => Some(*until_ms),
        _ => None,
    });
    let graces = out.orphans.iter().filter_map(|o| match o.disposition {
        OrphanDisposition::DeleteAfter { at_ms } => Some(at_ms),
        _ => None,
    });
    let sighted_now = out
        .orphans_seen
        .keys()
        .any(|k| !input.orphans_seen.contains_key(k))
        .then(|| input.now_ms.saturating_add(1));
    backoffs
        .chain(graces)
        .chain(sighted_now)
        .min()
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    /// A plan can hold an action per spec (10,000 at an adoption): the rare large part (a
    /// resumed create's UPID) is boxed so it does not size every action.
    #[test]
    fn actions_stay_small() {
        let size = std::mem::size_of::<super::Action>();
        eprintln!("Action: {size} bytes");
        assert!(size <= 104, "{size}");
    }

    /// The idle daemon keeps a verdict per spec between cycles (for its statuses): the rare
    /// large part (why a rename is unproven, 96 bytes) is boxed so it does not size every
    /// verdict (128 bytes before: 2.7 MiB more at 50,000 specs).
    #[test]
    fn verdicts_stay_small() {
        let size = std::mem::size_of::<super::Verdict>();
        eprintln!("Verdict: {size} bytes");
        assert!(size <= 72, "{size}");
    }
}
