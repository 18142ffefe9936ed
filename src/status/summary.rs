//! The summary's and the orphan report's entries, from the site views and the plan.

use std::time::{Duration, UNIX_EPOCH};

use super::{OrphanEntry, SiteSummary};
use crate::observe::SiteView;
use crate::plan::Orphan;

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
            action: o.disposition.to_string(),
            duplicate_of: o.duplicate_of.clone(),
        })
        .collect()
}
