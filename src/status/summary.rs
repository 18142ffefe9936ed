//! The summary's and the orphan report's entries, from the site views and the plan.

use std::time::{Duration, UNIX_EPOCH};

use super::{OrphanEntry, SiteSummary};
use crate::observe::SiteView;
use crate::plan::{Orphan, OrphanDisposition};

/// One site of the summary, from its view.
pub(crate) fn site_summary(v: &SiteView) -> SiteSummary {
    SiteSummary {
        name: v.name.clone(),
        reachable: v.reachable(),
        quorate: v.health.quorate,
        nodes_online: v
            .health
            .nodes
            .iter()
            .filter(|(_, on)| **on)
            .map(|(n, _)| n.clone())
            .collect(),
        nodes_offline: v
            .health
            .nodes
            .iter()
            .filter(|(_, on)| !**on)
            .map(|(n, _)| n.clone())
            .collect(),
        error: v.error.clone(),
        parallel: Vec::new(),
    }
}

/// The entries of the orphan report, from the plan.
pub(crate) fn orphan_entries(orphans: &[Orphan]) -> Vec<OrphanEntry> {
    orphans
        .iter()
        .map(|o| OrphanEntry {
            site: o.site.clone(),
            vm_id: o.vmid,
            kind: o.kind,
            node: o.node.clone(),
            name: o.name.clone(),
            state: o.power.clone(),
            first_seen: UNIX_EPOCH + Duration::from_millis(o.first_seen_ms),
            action: orphan_action(&o.disposition),
            duplicate_of: o.duplicate_of.clone(),
        })
        .collect()
}

/// The `action` of an orphan entry: the plan's disposition, with the time of a pending delete
/// in RFC 3339.
fn orphan_action(disposition: &OrphanDisposition) -> String {
    match disposition {
        OrphanDisposition::DeleteAfter { at_ms } => format!(
            "will delete after {}",
            crate::status::rfc3339(UNIX_EPOCH + Duration::from_millis(*at_ms))
        ),
        OrphanDisposition::Reported
        | OrphanDisposition::ForeignClaim { .. }
        | OrphanDisposition::Deleting
        | OrphanDisposition::Refused
        | OrphanDisposition::SiteMoved { .. } => disposition.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphan_actions_read_as_before_the_typed_disposition() {
        let cases = [
            (OrphanDisposition::Reported, "reported"),
            (OrphanDisposition::Deleting, "deleting"),
            (
                OrphanDisposition::DeleteAfter {
                    at_ms: 1_740_827_400_000,
                },
                "will delete after 2025-03-01T11:10:00Z",
            ),
            (
                OrphanDisposition::Refused,
                "reported (delete refused: see _summary.yaml)",
            ),
            (
                OrphanDisposition::ForeignClaim { spec: "web".into() },
                "reported: foreign VM claiming spec web (its marker does not verify); never \
                 adopted or deleted",
            ),
        ];
        for (disposition, text) in cases {
            assert_eq!(orphan_action(&disposition), text);
        }
        assert_eq!(
            OrphanDisposition::DeleteAfter { at_ms: 5 }.to_string(),
            "delete after 5"
        );
    }
}
