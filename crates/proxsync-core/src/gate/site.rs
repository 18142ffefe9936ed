//! A site's cluster identity: is the cluster a site's endpoint reaches now the one recorded for
//! that site at first contact (or accepted since by an operator)?
//!
//! **The evidence is the fingerprint of the cluster's root CA**, `/etc/pve/pve-root-ca.pem`,
//! as `GET /nodes/{node}/certificates/info` reports it (pve-manager `PVE/API2/Certificates.pm`
//! `info`: any user may read it; the fingerprint is pve-common `PVE/Certificate.pm`
//! `get_certificate_info`'s SHA-256). Why that and not what `GET /cluster/status` says:
//! - It is one per cluster and random: pve-cluster `src/PVE/Cluster/Setup.pm` `gen_pveca_cert`
//!   makes it once, on the first node, with a fresh UUID in its subject, and keeps it while the
//!   file exists. It lives on the cluster file system, so every node serves the same one; a
//!   node that joins takes the cluster's (`finish_join` replaces the node's own config database)
//!   and a node that leaves takes nothing with it. Nodes joining and leaving never change it;
//!   `pvecm create` on a standalone node keeps the node's (`src/PVE/API2/ClusterConfig.pm`
//!   `create` calls `gen_pve_node_files`, whose `gen_pveca_cert` returns while the CA exists).
//! - The cluster name and the node names are neither unique nor stable: a standalone node has no
//!   cluster name at all (`get_status` answers only a made-up entry for the local node), a
//!   node is often called `pve` or `pve1` on every cluster of a company, and nodes come and go.
//!   A copied config or a DNS record pointing at another cluster with the same naming looks the
//!   same there; its root CA does not.
//!
//! A node that carries VMs cannot join another cluster (`assert_joinable`: "this host already
//! contains virtual guests"), so a cluster's VMs never move to a cluster with another root CA
//! without a person rebuilding it; regenerating the root CA by hand is such a rebuild, and is
//! accepted the same way (`proxsync accept site`).
//!
//! What `/cluster/status` says (read every cycle anyway, for quorum) is the cheap part: its
//! [`ClusterShape`] decides when the root CA must be read again ([`needs_root_ca`]), so an idle
//! cycle costs no request beyond the two it always makes, and a node joining costs one.
//!
//! Everything here is pure: the caller reads PVE and the recorded identity and hands them in.

use serde::{Deserialize, Serialize};

use crate::model::SiteView;

pub use crate::pve::types::{ClusterShape, ShapeNode};

/// Whether the root CA must be read (again): never read in this process for this site, or
/// the cluster's shape changed since it was (a node joined or left, a name or an address
/// changed, a standalone node became a cluster, or the endpoint reaches another cluster).
pub fn needs_root_ca(read_at: Option<&ClusterShape>, now: &ClusterShape) -> bool {
    read_at != Some(now)
}

/// A cluster's identity: its root CA, with its name and nodes when it was seen (these two only
/// tell a person which cluster it was; they decide nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteIdentity {
    /// The SHA-256 fingerprint of `/etc/pve/pve-root-ca.pem`, upper-case colon hex
    /// (`AB:CD:...`, as `pvenode cert info` prints it).
    pub root_ca: String,
    /// The corosync cluster name; `None` for a standalone node.
    #[serde(default)]
    pub cluster: Option<String>,
    /// The cluster's node names when it was seen.
    #[serde(default)]
    pub nodes: Vec<String>,
}

/// A site may be acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SitePermit {
    /// Nothing is recorded for the site: this is its first contact, and what is seen is to be
    /// recorded.
    FirstContact,
    /// The cluster is the recorded one.
    Recorded,
}

/// Evidence that the site a VM is on reaches its recorded cluster: the cycle's check of the
/// site's root CA ([`check`], applied by `site_identity` to every observation) passed, or the
/// site was seen for the first time and its cluster recorded. Every permit of the gate is made
/// on a checked site ([`super::identity::verify`] takes one). Made only by [`checked`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteChecked {
    site: String,
}

impl SiteChecked {
    pub(crate) fn site(&self) -> &str {
        &self.site
    }
}

/// Whether `view`, a site as the cycle observed it, was checked to reach its recorded cluster:
/// the observation leaves a view unreachable when the site reaches another cluster, when its
/// root CA could not be read, or when the site could not be read at all (`site_identity`), so
/// only a reachable view passed the check. `Err` says why nothing may be done there.
pub fn checked(view: &SiteView) -> Result<SiteChecked, SiteRefusal> {
    match &view.error {
        None => Ok(SiteChecked {
            site: view.name.clone(),
        }),
        Some(why) => Err(SiteRefusal {
            site: view.name.clone(),
            why: SiteRefused::NotShown { why: why.clone() },
        }),
    }
}

/// Nothing on a site is to be judged or touched: it reaches another cluster than the recorded
/// one (until a person fixes the endpoint or accepts the cluster), or this cycle's observation
/// did not show it reaches its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteRefusal {
    /// The site.
    pub site: String,
    /// Why.
    pub why: SiteRefused,
}

/// Why nothing may be done on a site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteRefused {
    /// It reaches another cluster than the one recorded for it.
    OtherCluster {
        /// The cluster recorded.
        recorded: Box<SiteIdentity>,
        /// The cluster seen.
        seen: Box<SiteIdentity>,
    },
    /// The cycle's observation left it unreachable.
    NotShown {
        /// The observation's reason.
        why: String,
    },
}

impl From<SiteRefusal> for String {
    fn from(r: SiteRefusal) -> String {
        r.to_string()
    }
}

/// The decision: is `seen` the cluster recorded for `site`? Only the root CA decides (see the
/// module's doc); the names are in the refusal's words.
pub fn check(
    site: &str,
    recorded: Option<&SiteIdentity>,
    seen: &SiteIdentity,
) -> Result<SitePermit, SiteRefusal> {
    let Some(recorded) = recorded else {
        return Ok(SitePermit::FirstContact);
    };
    if same_fingerprint(&recorded.root_ca, &seen.root_ca) {
        return Ok(SitePermit::Recorded);
    }
    Err(SiteRefusal {
        site: site.to_string(),
        why: SiteRefused::OtherCluster {
            recorded: Box::new(recorded.clone()),
            seen: Box::new(seen.clone()),
        },
    })
}

/// Fingerprints compare without regard to case (PVE prints upper case; a hand-edited record
/// may not).
fn same_fingerprint(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pve::types::ClusterStatusEntry;
    use crate::pve::values::normalize_fingerprint;

    /// A site the cycle checked: a reachable view of it.
    pub(crate) fn checked(site: &str) -> SiteChecked {
        let mut view = SiteView::unreachable(site, String::new());
        view.error = None;
        super::checked(&view).expect("a reachable view")
    }

    #[test]
    fn only_a_reachable_view_is_a_checked_site() {
        assert_eq!(checked("lab").site(), "lab");
        let down = SiteView::unreachable("lab", "connection refused".into());
        let why = super::checked(&down).unwrap_err().to_string();
        assert!(
            why.contains("site lab") && why.contains("connection refused"),
            "{why}"
        );
        let other = SiteView::identity_refused("lab", "reaches another cluster".into());
        assert!(
            super::checked(&other)
                .unwrap_err()
                .to_string()
                .contains("another cluster")
        );
    }

    fn fp(byte: &str) -> String {
        vec![byte; 32].join(":")
    }

    fn identity(ca: &str, cluster: Option<&str>, nodes: &[&str]) -> SiteIdentity {
        SiteIdentity {
            root_ca: ca.to_string(),
            cluster: cluster.map(str::to_string),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        }
    }

    #[test]
    fn nothing_recorded_is_a_first_contact() {
        let seen = identity(&fp("AA"), Some("prod"), &["pve1"]);
        assert_eq!(check("lab", None, &seen), Ok(SitePermit::FirstContact));
    }

    #[test]
    fn the_same_root_ca_is_the_same_cluster_whatever_its_nodes() {
        let recorded = identity(&fp("AA"), Some("prod"), &["pve1", "pve2"]);
        // A node joined, another left, the names changed: the root CA says it is the cluster.
        let seen = identity(&fp("aa"), Some("prod"), &["pve2", "pve3"]);
        assert_eq!(
            check("lab", Some(&recorded), &seen),
            Ok(SitePermit::Recorded)
        );
        // A standalone node that became a cluster (`pvecm create` keeps its root CA).
        let single = identity(&fp("AA"), None, &["pve"]);
        let clustered = identity(&fp("AA"), Some("new"), &["pve"]);
        assert_eq!(
            check("lab", Some(&single), &clustered),
            Ok(SitePermit::Recorded)
        );
    }

    #[test]
    fn another_root_ca_is_another_cluster_even_with_the_same_names() {
        // Two standalone nodes both called `pve`: /cluster/status cannot tell them apart.
        let recorded = identity(&fp("AA"), None, &["pve"]);
        let seen = identity(&fp("BB"), None, &["pve"]);
        let refusal = check("lab", Some(&recorded), &seen).unwrap_err();
        let m = &refusal.to_string();
        assert!(m.contains(&fp("AA")) && m.contains(&fp("BB")), "{m}");
        assert!(m.contains("proxsync accept site lab"), "{m}");
        assert!(m.contains("fix it in the config"), "{m}");
        assert!(m.contains("a standalone node (nodes pve;"), "{m}");

        let recorded = identity(&fp("AA"), Some("prod"), &["pve1", "pve2"]);
        let seen = identity(&fp("CC"), Some("prod"), &["pve1", "pve2"]);
        let m = check("lab", Some(&recorded), &seen)
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("recorded cluster \"prod\" (nodes pve1, pve2;"),
            "{m}"
        );
    }

    #[test]
    fn fingerprints_are_checked_and_upper_cased() {
        let lower = fp("ab");
        assert_eq!(normalize_fingerprint(&lower), Some(fp("AB")));
        assert_eq!(
            normalize_fingerprint(&format!(" {} ", fp("01"))),
            Some(fp("01"))
        );
        for bad in [
            "",
            "AB",
            &fp("ABC"),
            &fp("ZZ"),
            &vec!["AB"; 31].join(":"),
            &vec!["AB"; 33].join(":"),
            &fp("AB").replace(':', "-"),
        ] {
            assert_eq!(normalize_fingerprint(bad), None, "{bad:?}");
        }
    }

    fn entries(json: &str) -> Vec<ClusterStatusEntry> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_shape_ignores_what_changes_without_the_cluster_changing() {
        let a = ClusterShape::from_entries(&entries(
            r#"[{"type":"cluster","id":"cluster","name":"prod","nodes":2,"quorate":1,"version":3},
                {"type":"node","id":"node/pve2","name":"pve2","nodeid":2,"ip":"10.0.0.2","online":1,"local":0},
                {"type":"node","id":"node/pve1","name":"pve1","nodeid":1,"ip":"10.0.0.1","online":1,"local":1}]"#,
        ));
        // Another node answered (a load balancer), one is offline, quorum lost, config bumped.
        let b = ClusterShape::from_entries(&entries(
            r#"[{"type":"cluster","id":"cluster","name":"prod","nodes":2,"quorate":0,"version":4},
                {"type":"node","id":"node/pve1","name":"pve1","nodeid":1,"ip":"10.0.0.1","online":0,"local":0},
                {"type":"node","id":"node/pve2","name":"pve2","nodeid":2,"ip":"10.0.0.2","online":1,"local":1}]"#,
        ));
        assert_eq!(a, b);
        assert_eq!(a.cluster.as_deref(), Some("prod"));
        assert_eq!(a.node_names(), vec!["pve1", "pve2"]);
        assert!(!needs_root_ca(Some(&a), &b));
        assert!(needs_root_ca(None, &a), "never read in this process");

        // A node joined: read the root CA again (it decides; the shape only notices).
        let joined = ClusterShape::from_entries(&entries(
            r#"[{"type":"cluster","name":"prod"},
                {"type":"node","name":"pve1","nodeid":1,"ip":"10.0.0.1"},
                {"type":"node","name":"pve2","nodeid":2,"ip":"10.0.0.2"},
                {"type":"node","name":"pve3","nodeid":3,"ip":"10.0.0.3"}]"#,
        ));
        assert!(needs_root_ca(Some(&a), &joined));

        // A standalone node: no cluster entry, nodeid 0.
        let single = ClusterShape::from_entries(&entries(
            r#"[{"type":"node","id":"node/pve","name":"pve","nodeid":0,"ip":"10.0.0.9","local":1,"online":1}]"#,
        ));
        assert_eq!(single.cluster, None);
        assert_eq!(single.node_names(), vec!["pve"]);
        assert!(needs_root_ca(Some(&a), &single));
    }

    #[test]
    fn an_identity_round_trips_through_its_file_format() {
        let id = identity(&fp("AB"), Some("prod"), &["pve1"]);
        let json = serde_json::to_string(&id).unwrap();
        assert!(json.contains("\"rootCa\""), "{json}");
        assert_eq!(serde_json::from_str::<SiteIdentity>(&json).unwrap(), id);
    }
}
