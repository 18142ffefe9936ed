//! A rename's refusals ([`Refused`]): why a guest's marker is not re-signed.

use std::fmt;

use crate::gate::rename::{Refused, Unshown};
use crate::guest::GuestKind;

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::OtherSite {
                kind,
                vm_site,
                spec_site,
            } => write!(
                f,
                "the {noun} is on site {vm_site} and the renamed spec names site {spec_site}: a \
                 rename never moves a {noun} between clusters; the spec waits (SiteMoved) until \
                 the {noun} is removed on {vm_site} or the spec names {vm_site} again",
                noun = kind.noun()
            ),
            Refused::NotShown { kind, vmid, why } => unshown(f, *kind, *vmid, why),
        }
    }
}

/// What showed guest `vmid` (of `kind`) is not the old spec's.
fn unshown(f: &mut fmt::Formatter<'_>, kind: GuestKind, vmid: u32, why: &Unshown) -> fmt::Result {
    let (named, noun) = (kind.named(vmid), kind.noun());
    match why {
        Unshown::SelfRename { to } => write!(f, "spec {to} cannot be renamed from itself"),
        Unshown::RecordElsewhere {
            from,
            recorded_vmid,
            recorded_site,
            site,
        } => write!(
            f,
            "the record of spec {from} names {} on site {recorded_site}, not {named} on site \
             {site}",
            kind.named(*recorded_vmid),
        ),
        Unshown::NoMarker { from } => write!(
            f,
            "{named} carries no proxsync marker: it is not shown to be spec {from}'s; nothing is \
             re-labelled"
        ),
        Unshown::OtherInstall { install, ours } => write!(
            f,
            "{named} carries the marker of install {install}, not {ours}'s"
        ),
        Unshown::OtherSpec { carries, from } => write!(
            f,
            "{named} carries the marker of spec {carries}, not of {from}"
        ),
        Unshown::OtherUid {
            carries,
            from,
            recorded,
        } => write!(
            f,
            "{named}'s marker carries uid {carries}, and the record of spec {from} uid \
             {recorded}: it is another {noun}"
        ),
        Unshown::Unverified { from } => write!(
            f,
            "{named}'s marker does not verify (copied from another {noun}, typed by hand, or \
             signed with a lost marker key) and no record vouches for it: it is not re-labelled; \
             if it is spec {from}'s {noun}, remove the annotation and confirm it with proxsync \
             adopt"
        ),
        Unshown::NotOurs(refusal) => write!(f, "{refusal}"),
    }
}
