//! A site's cluster identity ([`SiteIdentity`]) and why nothing may be done on a site
//! ([`SiteRefusal`]): the cluster recorded and the one seen, and what to do.

use std::fmt;

use crate::gate::site::{SiteIdentity, SiteRefusal, SiteRefused};

/// `cluster "prod" (nodes pve1, pve2; root CA AB:CD:...)`.
impl fmt::Display for SiteIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            Some(name) => write!(f, "cluster {name:?}")?,
            None => f.write_str("a standalone node")?,
        }
        let nodes = if self.nodes.is_empty() {
            "unknown".to_string()
        } else {
            self.nodes.join(", ")
        };
        write!(f, " (nodes {nodes}; root CA {})", self.root_ca)
    }
}

impl fmt::Display for SiteRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let site = &self.site;
        match &self.why {
            SiteRefused::OtherCluster { recorded, seen } => write!(
                f,
                "site {site} reaches another cluster than the one recorded for it: recorded \
                 {recorded}, seen {seen}. Nothing is created, changed or deleted on site {site} \
                 until this is settled. If the endpoint is wrong (a copied config, a DNS change), \
                 fix it in the config; if this is now the site's cluster (rebuilt, or its root CA \
                 made anew), run `proxsync accept site {site}`"
            ),
            SiteRefused::NotShown { why } => write!(
                f,
                "site {site} is not shown to reach its recorded cluster this cycle: {why}"
            ),
        }
    }
}
