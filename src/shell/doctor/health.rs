//! Cluster health: quorum, and every node online (a node a spec names must be).

use std::collections::BTreeSet;

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::pve::types::ClusterHealth;
use crate::spec::Spec;

pub(super) fn check_health(
    site: &SiteConfig,
    health: &ClusterHealth,
    specs: &[&Spec],
) -> Vec<Check> {
    let mut out = Vec::new();
    let subject = format!("{} quorum", site.name);
    if health.quorate {
        out.push(check(
            Level::Ok,
            subject,
            format!("quorate, {} node(s)", health.nodes.len()),
            None,
        ));
    } else {
        out.push(check(
            Level::Fail,
            subject,
            "the cluster has no quorum: proxsync creates and deletes nothing until it returns",
            Some("check corosync (`pvecm status`) on the nodes".into()),
        ));
    }
    let wanted: BTreeSet<&str> = specs.iter().map(|s| s.node.as_str()).collect();
    for (node, online) in &health.nodes {
        let subject = format!("{} node {node}", site.name);
        if *online {
            out.push(check(Level::Ok, subject, "online", None));
        } else {
            let level = if wanted.contains(node.as_str()) {
                Level::Fail
            } else {
                Level::Warn
            };
            out.push(check(
                level,
                subject,
                "offline: its VMs get no changes until it is back",
                Some("bring the node back, or move its specs to another node".into()),
            ));
        }
    }
    for node in wanted {
        if !health.nodes.contains_key(node) {
            out.push(check(
                Level::Fail,
                format!("{} node {node}", site.name),
                "named by a spec but not a node of this cluster",
                Some(format!(
                    "known nodes: {}",
                    health.nodes.keys().cloned().collect::<Vec<_>>().join(", ")
                )),
            ));
        }
    }
    out
}
