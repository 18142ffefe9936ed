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
