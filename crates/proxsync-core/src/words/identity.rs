//! Why a guest is not shown to be this install's or the spec's ([`NotOurs`]): the guest named
//! by its kind and what its marker or identity said.

use std::fmt;

use crate::gate::identity::{NotOurs, NotShown};
use crate::guest::GuestKind;

impl fmt::Display for NotOurs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, named) = (self.kind, self.kind.named(self.vmid));
        let no_line = "carries no proxsync marker line, and";
        match &self.why {
            NotShown::NoMarker => {
                write!(f, "{named} carries no proxsync marker in its description")
            }
            NotShown::OtherInstall { install, ours } => write!(
                f,
                "{named} carries the marker of install {install}, not {ours}'s"
            ),
            NotShown::OtherSpec { carries, wanted } => write!(
                f,
                "{named} carries the marker of spec {carries}, not of {wanted}"
            ),
            NotShown::Unverified => write!(
                f,
                "{named}'s marker does not verify (copied from another {}, typed by hand, or \
                 signed with a lost marker key) and no record vouches for it",
                kind.noun()
            ),
            NotShown::NotHanded {
                carries,
                install,
                wanted,
            } => write!(
                f,
                "{named} carries the marker of spec {carries} of install {install}, not of spec \
                 {wanted} from another install"
            ),
            NotShown::HandedUnverified { install } => write!(
                f,
                "{named}'s marker (install {install}) does not verify with this install's marker \
                 key"
            ),
            NotShown::ForeignLine { spec } => write!(
                f,
                "{named}'s notes hold a proxsync-id line that is not spec {spec}'s"
            ),
            NotShown::NoTag { tag } => write!(
                f,
                "{named} carries neither a proxsync marker line nor the tag {tag}"
            ),
            NotShown::NoIdentityRecorded { spec } => write!(
                f,
                "{named} {no_line} proxsync has not recorded its identity to show it is still \
                 spec {spec}'s"
            ),
            NotShown::NoIdentityShown { want } => write!(
                f,
                "{named} {no_line} its config shows no {} to compare with the recorded {want}",
                identity_word(kind)
            ),
            NotShown::IdentityDiffers { found, want } => write!(
                f,
                "{named} {no_line} its {found} is not the recorded {}",
                want.value()
            ),
        }
    }
}

/// What identifies a guest of `kind`, in words.
fn identity_word(kind: GuestKind) -> &'static str {
    match kind {
        GuestKind::Qemu => "smbios1 uuid",
        GuestKind::Lxc => "NIC MAC",
    }
}
