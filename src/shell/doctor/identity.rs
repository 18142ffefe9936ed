//! The site's cluster identity: the cluster the endpoint reaches is the one recorded for the
//! site (`gate::site`, `site_identity`). Read-only: a first contact is recorded by a cycle.

use std::path::Path;

use super::{Check, Level, check};
use crate::config::SiteConfig;
use crate::gate::site::{ClusterShape, SiteIdentity, SitePermit};
use crate::pve::Client;
use crate::pve::types::ClusterStatusEntry;

pub(super) async fn check_identity(
    client: &Client,
    site: &SiteConfig,
    state_dir: &Path,
    entries: &[ClusterStatusEntry],
) -> Check {
    let name = site.name.as_str();
    let subject = format!("{name} cluster identity");
    let shape = ClusterShape::from_entries(entries);
    let Some(node) = ClusterStatusEntry::answering_node(entries) else {
        return check(
            Level::Fail,
            subject,
            "no node is online to read the cluster's root CA from",
            None,
        );
    };
    let root_ca = match client.root_ca_fingerprint(&node).await {
        Ok(fp) => fp,
        Err(e) => {
            return check(
                Level::Fail,
                subject,
                format!("cannot read the cluster's root CA: {e}"),
                Some(
                    "proxsync identifies a site's cluster by its root CA \
                     (/etc/pve/pve-root-ca.pem) and acts on no site it cannot identify"
                        .into(),
                ),
            );
        }
    };
    let seen = SiteIdentity {
        root_ca,
        cluster: shape.cluster.clone(),
        nodes: shape.node_names(),
    };
    let recorded = match crate::site_identity::read_recorded(state_dir, name) {
        Ok(r) => r,
        Err(e) => {
            return check(
                Level::Fail,
                subject,
                e,
                Some(
                    "fix the file, or remove it to record the cluster the site reaches now".into(),
                ),
            );
        }
    };
    match crate::gate::site::check(name, recorded.as_ref(), &seen) {
        Ok(SitePermit::FirstContact) => check(
            Level::Ok,
            subject,
            format!("{seen}; not recorded yet (the first reconcile records it)"),
            None,
        ),
        Ok(SitePermit::Recorded) => check(Level::Ok, subject, format!("{seen}, as recorded"), None),
        Err(refusal) => check(
            Level::Fail,
            subject,
            refusal.to_string(),
            Some(format!(
                "fix the endpoint of site {name}; or, if this is now its cluster, `proxsync accept \
                 site {name}` once a reconcile has refused it"
            )),
        ),
    }
}
