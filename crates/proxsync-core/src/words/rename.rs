//! A rename's refusals ([`Refused`]): why a guest's marker is not re-signed.

use std::fmt;

use crate::gate::rename::Refused;

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
            Refused::NotShown(why) => f.write_str(why),
        }
    }
}
