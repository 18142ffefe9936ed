//! What an action lacks ([`Missing`]): the evidence its kind needs that the plan's inputs do not
//! show, the guest named by its kind.

use std::fmt;

use crate::plan::evidence::Missing;

impl fmt::Display for Missing {
    // Long because: one arm per kind of evidence, the planner's promises in one place.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::SiteNotObserved { site } => write!(f, "site {site} was not observed"),
            Missing::OtherCluster { site } => write!(
                f,
                "site {site} reaches another cluster than the recorded one"
            ),
            Missing::SiteUnreadable { site, error } => {
                write!(f, "site {site} could not be read: {error}")
            }
            Missing::NodeUnhealthy { node, site } => {
                write!(f, "node {node} of site {site} is not healthy")
            }
            Missing::NotDesired { spec } => write!(f, "spec {spec} is not desired"),
            Missing::OtherSite { spec, names, site } => {
                write!(f, "spec {spec} names site {names}, not {site}")
            }
            Missing::NotListed { vmid, site } => {
                // Not listed, its kind is not known: a guest.
                write!(f, "guest {vmid} is not listed on site {site}")
            }
            Missing::Template { kind, vmid } => write!(f, "{} is a template", kind.named(*vmid)),
            Missing::StateUnknown { kind, vmid } => {
                write!(f, "{}'s state is unknown", kind.named(*vmid))
            }
            Missing::NotOnNode {
                kind,
                vmid,
                node,
                want,
            } => write!(f, "{} is on node {node}, not {want}", kind.named(*vmid)),
            Missing::NotTheTarget {
                kind,
                vmid,
                target,
                spec,
            } => write!(
                f,
                "a migration of {} to node {target}, which is not another node its spec {spec} \
                 names",
                kind.named(*vmid)
            ),
            Missing::NotRecorded {
                spec,
                kind,
                vmid,
                site,
            } => write!(
                f,
                "no record of spec {spec} names {} on site {site}",
                kind.named(*vmid)
            ),
            Missing::SpecSetIncomplete => {
                f.write_str("the spec set was not read completely: nothing is removed")
            }
            Missing::DesiredSetEmpty => f.write_str("the desired set is empty: nothing is removed"),
            Missing::RewindUnreadable => f.write_str(
                "the commit rewinds the branch from one that cannot be read: its deletes cannot \
                 be judged as one batch",
            ),
            Missing::NotShownTheSpecs { kind, vmid, site } => write!(
                f,
                "neither a record nor a verified marker shows {} on site {site} to be the spec's",
                kind.named(*vmid)
            ),
            Missing::OtherNode { spec, names, node } => {
                write!(f, "spec {spec} names node {names}, not {node}")
            }
            Missing::CreateInFlight { spec } => write!(f, "a create of spec {spec} is in flight"),
            Missing::RecordedOnOtherSite { spec, kind, site } => write!(
                f,
                "spec {spec}'s record names a {} on site {site}: a site move",
                kind.noun()
            ),
            Missing::RecordedThere { spec, kind, vmid } => write!(
                f,
                "spec {spec}'s record names {}, which is there",
                kind.named(*vmid)
            ),
            Missing::CarriesMarker { kind, vmid, spec } => write!(
                f,
                "{} carries spec {spec}'s verified marker",
                kind.named(*vmid)
            ),
            Missing::UnverifiedClaim { kind, vmid, spec } => write!(
                f,
                "{} claims spec {spec} with a marker that does not verify",
                kind.named(*vmid)
            ),
            Missing::MarkerNotRead { kind, vmid, spec } => write!(
                f,
                "{}, named like spec {spec}'s {}, has a marker not read yet",
                kind.named(*vmid),
                kind.noun()
            ),
            Missing::AnotherInstalls { kind, vmid, spec } => write!(
                f,
                "{} carries spec {spec}'s marker for another install",
                kind.named(*vmid)
            ),
            Missing::RenamedFromThere {
                spec,
                from,
                kind,
                vmid,
            } => write!(
                f,
                "spec {spec} is renamed from {from}, whose {} is on its site",
                kind.named(*vmid)
            ),
            Missing::NoCreateInFlight {
                spec,
                kind,
                vmid,
                node,
            } => write!(
                f,
                "no record of spec {spec} holds a create of {} on node {node}",
                kind.named(*vmid)
            ),
            Missing::NotVerifiedFor { kind, vmid, spec } => write!(
                f,
                "{} carries no verified marker of spec {spec} (or another install still holds \
                 it)",
                kind.named(*vmid)
            ),
            Missing::NotConsented { spec, kind, vmid } => write!(
                f,
                "spec {spec} does not consent to take over {} (proxsync.io/adopt)",
                kind.named(*vmid)
            ),
            Missing::AlreadyRecorded { spec, kind } => {
                write!(f, "spec {spec} already has a {} in its record", kind.noun())
            }
            Missing::NotBare { kind, vmid, name } => write!(
                f,
                "{} is not a bare {} named {name} (read, without a marker or an install's tag)",
                kind.named(*vmid),
                kind.noun()
            ),
            Missing::StillInSet { spec } => write!(f, "spec {spec} is still in the set"),
            Missing::HandedOver { spec } => write!(
                f,
                "spec {spec} is another install's: handed over, never removed"
            ),
            Missing::NotAsked { spec } => write!(
                f,
                "no record of spec {spec} asks for this (deletionPolicy as recorded)"
            ),
            Missing::TemplateNeeded { spec } => write!(
                f,
                "template {spec} is still needed: a guest is being cloned from it, or its \
                 template's current version is not built yet"
            ),
            Missing::NotOlderImage { spec } => write!(
                f,
                "spec {spec} does not ask for its guest to be rebuilt (imagePolicy: Recreate, \
                 and a guest made from an older version of its image)"
            ),
            Missing::NoRecord { spec } => write!(f, "spec {spec} has no record"),
            Missing::StillOnOldSite { spec, kind, site } => write!(
                f,
                "spec {spec}'s {} is still on site {site}, its old site",
                kind.noun()
            ),
            Missing::DesiredOnSite { spec } => {
                write!(f, "spec {spec} is desired on its record's site")
            }
            Missing::Invalid { spec } => write!(f, "spec {spec} is invalid"),
            Missing::SpecSetUnread => f.write_str("the spec set was not read completely"),
            Missing::StillListed { spec, kind, site } => write!(
                f,
                "spec {spec}'s {} is still listed on site {site}",
                kind.noun()
            ),
            Missing::NotRenamedFrom { spec, from } => {
                write!(f, "spec {spec} is not annotated as renamed from {from}")
            }
            Missing::NotGone { from } => write!(f, "spec {from} is not shown to be gone"),
            Missing::HasOwnGuest { spec, kind } => {
                write!(f, "spec {spec} has a {} of its own", kind.noun())
            }
            Missing::Relabel(why) => why.fmt(f),
            Missing::NotElsewhere { spec } => write!(f, "spec {spec} is not another install's"),
            Missing::OrphansReported => {
                f.write_str("orphans are only reported (orphans = \"report\")")
            }
            Missing::NotOwned { kind, vmid } => write!(
                f,
                "{} lacks this install's tag or a verified marker",
                kind.named(*vmid)
            ),
            Missing::NotStopped { kind, vmid } => {
                write!(f, "{} is not stopped and unlocked", kind.named(*vmid))
            }
            Missing::NamedByARecord { kind, vmid } => {
                write!(f, "a record names {}", kind.named(*vmid))
            }
            Missing::SpecInSet { kind, vmid, spec } => write!(
                f,
                "{} is spec {spec}'s, which is in the set",
                kind.named(*vmid)
            ),
            Missing::OnlyGuest { kind, vmid, spec } => write!(
                f,
                "{} is desired spec {spec}'s only {}, not a second one",
                kind.named(*vmid),
                kind.noun()
            ),
            Missing::RenamedOriginal {
                kind,
                vmid,
                spec,
                renamed,
            } => write!(
                f,
                "{} is spec {spec}'s, which spec {renamed} is renamed from",
                kind.named(*vmid)
            ),
            Missing::InGrace { kind, vmid } => {
                write!(f, "{}'s grace period has not passed", kind.named(*vmid))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest missing from the listing has no kind to name: it is a guest, not a VM.
    #[test]
    fn a_guest_not_listed_is_not_called_a_vm() {
        let missing = Missing::NotListed {
            vmid: 101,
            site: "lab".into(),
        };
        assert_eq!(missing.to_string(), "guest 101 is not listed on site lab");
    }
}
