//! The gate's refusals of an HA group, rule or resource ([`HaRefusal`]): what proxsync leaves
//! to a person, and why.

use std::fmt;

use crate::gate::ha::{AffinityRefused, HaRefusal};

impl fmt::Display for HaRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HaRefusal::Guest(r) => r.fmt(f),
            HaRefusal::Affinity { what, id, why } => {
                let what = what.word();
                match why {
                    AffinityRefused::NotMade { comment, mark } => write!(
                        f,
                        "the {what} {id} exists and proxsync did not make it (its comment is {}, \
                         not {mark:?}): proxsync never changes a {what} it did not make; rename \
                         or remove it (ha-manager), or drop ha.nodes from the spec",
                        comment
                            .as_ref()
                            .map_or_else(|| "empty".to_string(), |c| format!("{c:?}"))
                    ),
                    AffinityRefused::NotTheGuests { kind, vmid } => write!(
                        f,
                        "the {what} {id} is not the one proxsync makes for {}: left to a person",
                        kind.named(*vmid)
                    ),
                    AffinityRefused::NotRecorded => write!(
                        f,
                        "the {what} {id} is not recorded as made by proxsync for this spec: left \
                         to a person"
                    ),
                    AffinityRefused::MarkChanged { mark } => write!(
                        f,
                        "the {what} {id} no longer carries proxsync's mark {mark:?} (someone \
                         changed it): left to a person"
                    ),
                }
            }
            HaRefusal::ResourceNotRecorded { sid } => write!(
                f,
                "the HA resource {sid} is not recorded as added by proxsync for this spec: left \
                 to a person"
            ),
        }
    }
}
