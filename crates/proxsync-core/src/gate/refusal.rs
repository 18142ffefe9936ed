//! What the gate refuses, as a value: which guest of which kind, and what evidence was missing
//! or said otherwise. A permit function returns one instead of prose built where it decided,
//! and its words are said here, once ([`Refusal`]'s `Display`), for the status condition, the
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

impl std::fmt::Display for Refusal {
    // Long because: one arm per refusal, the gate's words in one place.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, vmid) = (self.kind, self.vmid);
        let named = kind.named(vmid);
        let noun = kind.noun();
        let exercises = "not the exercise's to delete";
        match &self.why {
            Refused::OtherInstall { install } => write!(
                f,
                "{named} carries the marker of install {install}: not this install's to act on"
            ),
            Refused::OtherSpec { carries, wanted } => write!(
                f,
                "{named} carries the marker of spec {carries}, not of {wanted}"
            ),
            Refused::MarkerLineMissing => write!(
                f,
                "{named} carries no marker line: it is written back first, and the {noun} \
                 removed at the next cycle"
            ),
            Refused::UnsignedOrphan => write!(
                f,
                "{named}'s marker does not verify for {named}: an orphan is deleted only on a \
                 signed marker"
            ),
            Refused::NoOwnershipTag { tag } => write!(
                f,
                "{named} does not carry the ownership tag {tag}: not deleting it"
            ),
            Refused::NotHandedOver { spec } => write!(
                f,
                "{named} does not carry a verifying marker of spec {spec} from another install"
            ),
            Refused::NotReleased { install, tag } => write!(
                f,
                "{named} carries install {install}'s marker and the ownership tag {tag}: that \
                 install has not handed it over yet; wait until it has (its tag removed)"
            ),
            Refused::NothingToTakeOver { spec } => write!(
                f,
                "{named} does not carry the marker of spec {spec} of another install: nothing \
                 to take over"
            ),
            Refused::NotRecorded { spec } => write!(
                f,
                "{named} is not the {noun} spec {spec}'s record names: proxsync writes a missing \
                 marker line back only on the guest it made or adopted"
            ),
            Refused::ForeignMarkerLine { spec } => write!(
                f,
                "{named}'s notes hold a proxsync-id line that is not spec {spec}'s: remove it \
                 first if the guest is the spec's"
            ),
            Refused::NotRecognised { spec, tag, name } => write!(
                f,
                "{named} is neither the guest spec {spec}'s record names nor one with the tag \
                 {tag} and the spec's {noun} name {name}: proxsync adopts it only with a \
                 proxsync-id line of the spec"
            ),
            Refused::IdentityChanged { found, want, spec } => {
                let (what, want) = match want {
                    GuestId::Uuid(w) => (format!("{named} has smbios1 uuid"), w),
                    GuestId::Hwaddr(w) => (format!("{named}'s first NIC has MAC"), w),
                };
                write!(
                    f,
                    "{what} {}, not {want} as when spec {spec} was written: another guest holds \
                     the VMID now; import it again if it is the one to adopt",
                    found.as_deref().unwrap_or("(none)"),
                )
            }
            Refused::NotConsented { spec, consented } => write!(
                f,
                "{named} is not the {noun} spec {spec} consents to take over ({consented})"
            ),
            Refused::NameDiffers { found, want, spec } => write!(
                f,
                "{named} is named {}, not {want} as spec {spec} says",
                found.as_deref().unwrap_or("(no name)")
            ),
            Refused::Managed { tag } => write!(
                f,
                "{named} carries the ownership tag {tag}: an install of proxsync manages it"
            ),
            Refused::HasMarkerLine => write!(
                f,
                "{named} carries a proxsync marker line: it is some install's, never taken by \
                 consent"
            ),
            Refused::EmptyExerciseMarks {
                pool,
                prefix,
                marker,
            } => write!(
                f,
                "an exercise's pool, name prefix and marker must each say something: pool \
                 {pool:?}, prefix {prefix:?}, marker {marker:?} would take {named} without proof"
            ),
            Refused::NotInExercisePool { found, pool } => write!(
                f,
                "{named} is in pool {}, not the exercise's pool {pool}: {exercises}",
                found.as_deref().unwrap_or("(none)")
            ),
            Refused::NotExerciseNamed { found, prefix } => write!(
                f,
                "{named} is named {found:?}, not {prefix}...: {exercises}"
            ),
            Refused::ManagedByLine => write!(
                f,
                "{named} carries a proxsync-id line: a guest an install manages, never an \
                 exercise's"
            ),
            Refused::ManagedByTag { tag } => write!(
                f,
                "{named} carries the ownership tag {tag}: a guest an install manages, never an \
                 exercise's"
            ),
            Refused::HaManaged => write!(
                f,
                "{named} is HA-managed: an exercise makes no HA resource, and a delete would \
                 drop it"
            ),
            Refused::Template => write!(
                f,
                "{named} is a template: an exercise makes none, so it deletes none"
            ),
            Refused::NoExerciseLine { marker } => write!(
                f,
                "{named} lacks the exercise's line {marker:?}: {exercises}"
            ),
            Refused::ExerciseUnsigned { identity } => write!(
                f,
                "{named} carries an exercise line whose signature does not verify for this \
                 VMID and guest ({}): {exercises}",
                identity
                    .as_ref()
                    .map_or("no identity".to_string(), ToString::to_string)
            ),
        }
    }
}
