//! The gate's refusals of an act on a guest ([`Refusal`]): the guest named by its kind
//! (`VM 101`, `container 101`), what was refused and what to do.

use crate::gate::refusal::{Refusal, Refused};
use crate::guest::GuestId;

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
            Refused::NotRecreate { spec } => write!(
                f,
                "{named} is not rebuilt: spec {spec} does not say imagePolicy: Recreate with \
                 deletionPolicy: Delete"
            ),
            Refused::NotOwnSnapshot { snapshot } => write!(
                f,
                "snapshot {snapshot} of {named} is not one proxsync took before a change: it is \
                 never rolled back to or deleted"
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
