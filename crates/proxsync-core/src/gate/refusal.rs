//! What the gate refuses, as a value: which guest of which kind, and what evidence was missing
//! or said otherwise. A permit function returns one instead of prose built where it decided,
//! and its words are said once, in `crate::words`, for the status condition, the
//! journal and a command's answer alike: a guest is named by its kind (`VM 101`,
//! `container 101`) in every refusal.

use crate::guest::{GuestId, GuestKind};

/// A refusal of the gate: the guest it concerns and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: GuestKind,
    pub vmid: u32,
    pub why: Refused,
}

/// Why the gate refused an act on a guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Its marker names another install.
    OtherInstall { install: String },
    /// Its marker names another spec of this install.
    OtherSpec { carries: String, wanted: String },
    /// Known the spec's by its identity alone (its notes lost the marker line): the line is
    /// written back first, the guest removed only on the marker itself.
    MarkerLineMissing,
    /// An orphan whose marker does not verify.
    UnsignedOrphan,
    /// An orphan without this install's ownership tag.
    NoOwnershipTag { tag: String },
    /// A take-over of a guest without a verifying marker of the spec from another install.
    NotHandedOver { spec: String },
    /// Another install's marker and tag are still on it: not released yet.
    NotReleased { install: String, tag: String },
    /// `proxsync adopt` of a guest that holds no marker of the spec from another install.
    NothingToTakeOver { spec: String },
    /// `proxsync adopt` of a guest the spec's record does not name.
    NotRecorded { spec: String },
    /// Its notes hold a marker line of another spec or install.
    ForeignMarkerLine { spec: String },
    /// Neither the record's guest nor one with the install's tag and the spec's name.
    NotRecognised {
        spec: String,
        tag: String,
        name: String,
    },
    /// Its identity is not the one the consent pins (a reused VMID).
    IdentityChanged {
        found: Option<String>,
        want: GuestId,
        spec: String,
    },
    /// Another VMID than the one the spec consents to.
    NotConsented { spec: String, consented: u32 },
    /// Its name is not the spec's.
    NameDiffers {
        found: Option<String>,
        want: String,
        spec: String,
    },
    /// A rebuild from a new image its spec does not ask for (`imagePolicy: Recreate` with
    /// `deletionPolicy: Delete`).
    NotRecreate { spec: String },
    /// A snapshot the record does not name as proxsync's own for this guest: a person's, never
    /// rolled back to or deleted.
    NotOwnSnapshot { snapshot: String },
    /// An install of proxsync manages it (its ownership tag).
    Managed { tag: String },
    /// Some install's marker line is on it: never taken by consent.
    HasMarkerLine,
    /// An exercise's marks that would match any guest.
    EmptyExerciseMarks {
        pool: String,
        prefix: String,
        marker: String,
    },
    /// Not in the exercise's pool.
    NotInExercisePool { found: Option<String>, pool: String },
    /// Not named with the exercise's prefix.
    NotExerciseNamed { found: String, prefix: String },
    /// A guest an install manages, by its marker line.
    ManagedByLine,
    /// A guest an install manages, by its tag.
    ManagedByTag { tag: String },
    /// HA-managed: an exercise makes no HA resource.
    HaManaged,
    /// A template: an exercise makes none.
    Template,
    /// Without the exercise's line.
    NoExerciseLine { marker: String },
    /// Its exercise line's signature does not verify for this VMID and guest.
    ExerciseUnsigned { identity: Option<GuestId> },
}

impl From<Refusal> for String {
    fn from(r: Refusal) -> String {
        r.to_string()
    }
}
