//! What blocks an action until a person acts or the guest is let go ([`Blocked`]): a lock no
//! running task holds, a guest without the spec's marker, another guest at the record's VMID
//! ([`Stranger`]). Execute decides it and records it as the spec's error; `words` says it.

use crate::guest::{GuestId, GuestKind};

/// Why an action ends in an error that is no PVE answer, with the guest named by its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// The guest is locked and no running task can hold the lock: only a person can tell it
    /// is stale and clear it.
    StaleLock {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// Its node.
        node: String,
        /// The lock.
        lock: String,
    },
    /// A template to delete (an old version of a `ProxmoxTemplate`) is the base of linked
    /// clones: it is kept until they are gone (PVE refuses the delete, and a clone on LVM-thin
    /// would lose nothing, but its base is not ours to judge).
    LinkedClones {
        /// The template's VMID.
        vmid: u32,
        /// Its node.
        node: String,
        /// The clones' volumes, as the storage lists them.
        clones: Vec<String>,
    },
    /// The template to clone from is locked and no running task holds the lock.
    StaleTemplateLock {
        /// The template's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// Its node.
        node: String,
        /// The lock.
        lock: String,
    },
    /// The guest at a create intent's VMID is locked by a create or clone that no running
    /// task holds: an interrupted create, never judged foreign.
    InterruptedCreate {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// Its node.
        node: String,
        /// The lock (`create`, `clone`).
        lock: String,
        /// Which create it may be.
        of: Interrupted,
    },
    /// The guest the record names does not carry the spec's marker, and may still be the
    /// spec's: a person confirms it (`proxsync adopt`) or removes it.
    MarkerMissing {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The spec whose record names it.
        spec: String,
        /// The marker check's refusal, in its words.
        why: String,
        /// The identity check's refusal, in its words.
        not: String,
        /// This install's ownership tag.
        tag: String,
        /// The spec was removed (there is nothing to adopt it for).
        removed: bool,
    },
    /// Another guest holds the record's VMID: the spec's guest is gone, and a new one is made
    /// at the next cycle.
    Gone(Stranger),
    /// Another guest held the VMID on the read just before a delete: nothing is deleted.
    ChangedIdentity(Stranger),
    /// The guest is not on its node any more: it is looked for again, and made again only
    /// once PVE says its VMID is free.
    NotOnNode {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The node it was looked for on.
        node: String,
    },
    /// Reads of the guest's config answered differently: nothing is judged on it this cycle.
    ReadsDisagree {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// Two reads (a stranger read again), not the streak of the identity's reads.
        two: bool,
    },
    /// The guest's config came without its digest, which guards the write that follows.
    NoDigest {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
    },
    /// An orphan to delete is not this install's any more: nothing is deleted.
    OrphanNotOurs {
        /// The orphan's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The gate's refusal, in its words.
        why: String,
    },
    /// A handed-over guest no longer carries a verifying marker of the spec from another
    /// install: it is not taken over.
    NotHandedOver {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The spec that would take it over.
        spec: String,
        /// The gate's refusal, in its words.
        why: String,
    },
    /// A create in flight was sent for one kind of guest and the spec now asks for the other.
    KindChanged {
        /// The kind the create was sent for.
        kind: GuestKind,
        /// The intent's VMID.
        vmid: u32,
        /// The kind the spec asks for now.
        now: GuestKind,
    },
    /// A guest the listing lost whose VMID PVE says is taken: the record is kept.
    StillTaken {
        /// The guest's kind, as recorded.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The site whose listing lost it.
        site: String,
        /// The spec whose record is kept.
        spec: String,
    },
    /// The guest the record names is not in the site's listing, but PVE says its VMID is
    /// taken: nothing is created while it may exist.
    HiddenFromListing {
        /// The guest's kind, as recorded.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The site whose listing lacks it.
        site: String,
    },
    /// The spec's pinned `vmId` is held by another guest or another spec's create.
    PinnedVmidHeld {
        /// The pinned VMID.
        vmid: u32,
    },
    /// The guest to adopt does not carry the spec's verifying marker.
    NoMarkerOfSpec {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The spec.
        spec: String,
    },
    /// The record a re-label would move has a create or delete in flight.
    RelabelInFlight {
        /// The spec the guest is re-labelled from.
        from: String,
        /// The kind of the guest the record's action is for.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The kind of the guest to re-label.
        guest: GuestKind,
        /// Its VMID.
        guest_vmid: u32,
    },
    /// The gate refused a re-label.
    NotRelabelled {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The spec it is labelled for.
        from: String,
        /// The spec it would be labelled for.
        to: String,
        /// The gate's refusal, in its words.
        why: String,
    },
    /// An adoption by consent was asked of a spec without `adopt`.
    NoConsent {
        /// The spec.
        spec: String,
    },
    /// The gate refused an adoption by consent.
    NotAdopted {
        /// The gate's refusal, in its words.
        why: String,
    },
    /// The consented guest cannot follow the spec as it is (a container's `unprivileged`).
    ConsentUnfit {
        /// What does not fit, in words.
        why: String,
    },
    /// The consented guest left its node before it was adopted.
    ConsentedGone {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The node it was on.
        node: String,
    },
    /// A VM has no free slot for a drive cloud-init needs.
    NoFreeSlot {
        /// The VM's VMID.
        vmid: u32,
        /// The drive it needs.
        drive: SlotFor,
    },
    /// An action on a site this cycle did not observe.
    SiteNotObserved {
        /// The site.
        site: String,
    },
    /// The guest cannot move to the spec's node.
    Unmovable {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The node it is on.
        node: String,
        /// The spec's node.
        target: String,
        /// What blocks the move, in PVE's terms.
        why: String,
    },
    /// A `destroyDisks` slot changed while the converge ran: nothing is destroyed.
    SlotChanged {
        /// The VM's VMID.
        vmid: u32,
        /// The slot.
        slot: String,
        /// The volume it held.
        volume: String,
    },
    /// The guest's HA resource is in the `error` state, where PVE refuses every change of it
    /// but disabling it.
    HaErrorState {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The state the spec asks for.
        state: String,
    },
    /// The guest did not shut down for its reboot within the timeout.
    RebootGivenUp {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The timeout, in seconds.
        timeout: u32,
        /// What the shutdown's wait said.
        why: String,
    },
    /// The snapshot `changePolicy` takes before a change could not be taken: the change is held,
    /// not applied unprotected (`snapshot: IfPossible` applies it where the storage cannot
    /// snapshot).
    SnapshotFailed {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The storage cannot snapshot (PVE's `snapshot feature is not available`).
        unsupported: bool,
        /// What PVE said.
        why: String,
    },
    /// The snapshot taken before a change was left incomplete (its task died): no guard for the
    /// change, and asked again under its name PVE refuses it; held until it is deleted.
    SnapshotIncomplete {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The snapshot.
        snapshot: String,
        /// Its `snapstate` (`prepare`, `delete`).
        snapstate: String,
    },
    /// The guest is unhealthy after its change, but the snapshot taken before it cannot be
    /// rolled back to: gone (`snapstate` `None`: deleted by someone else) or incomplete. Not
    /// rolled back; the change stays applied.
    RollbackImpossible {
        /// The guest's kind.
        kind: GuestKind,
        /// Its VMID.
        vmid: u32,
        /// The snapshot.
        snapshot: String,
        /// Its `snapstate` when it is incomplete; `None` when it is gone.
        snapstate: Option<String>,
        /// What failed, in proxsync's words.
        why: String,
    },
    /// A protected container's mount points that cannot be added, changed or removed.
    MountPointsHeld {
        /// The container's VMID.
        vmid: u32,
        /// The spec manages `protection` and asks for it set.
        managed: bool,
        /// The mount points held.
        held: Vec<String>,
    },
    /// An action names a spec this cycle did not load.
    SpecNotLoaded {
        /// The spec.
        spec: String,
    },
    /// An action names a site the config lacks.
    SiteNotConfigured {
        /// The site.
        site: String,
    },
}

/// The drive a VM has no free slot for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotFor {
    /// The CD-ROM of proxsync's cloud-init seed image (`userData`).
    SeedCdrom,
    /// PVE's own cloud-init drive.
    CloudInitDrive,
}

/// Which create an interrupted create at an intent's VMID may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupted {
    /// The spec's own, resumed: the VMID stays reserved.
    Resumed,
    /// The create of a spec that left this install's selector.
    LeftSelector {
        /// The spec.
        spec: String,
    },
    /// The create of a removed spec.
    Removed {
        /// The spec.
        spec: String,
    },
}

/// A guest at the record's VMID that two reads agree is not the spec's: what it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stranger {
    /// The guest's kind.
    pub kind: GuestKind,
    /// Its VMID.
    pub vmid: u32,
    /// What shows it is not the spec's.
    pub shows: Shows,
}

/// What shows a guest is not the spec's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shows {
    /// Another spec's or install's marker, signed for the VMID.
    OtherMarker {
        /// The spec the marker names.
        spec: String,
        /// The install the marker names.
        install: String,
    },
    /// Neither this install's tag (`tag`) nor its marker, with the recorded identity: a
    /// person let it go.
    LetGo {
        /// This install's ownership tag.
        tag: String,
    },
    /// Neither this install's tag nor its marker, and not the recorded identity: another
    /// guest holds the VMID.
    OtherIdentity {
        /// This install's ownership tag.
        tag: String,
        /// The identity the record keeps.
        recorded: GuestId,
    },
    /// Neither this install's tag nor its marker, and no identity recorded.
    Untagged {
        /// This install's ownership tag.
        tag: String,
    },
}
