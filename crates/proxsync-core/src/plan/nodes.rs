//! A node a spec names that is no member of its site's cluster: a typo (`pve9` for `pve1`),
//! or a node since removed from the cluster. It is not an outage to wait out: the spec is
//! invalid, and its guest is left exactly as it is until the spec is fixed.
//!
//! Judged only on a membership read whole this cycle ([`SiteView::members`]): a site that
//! could not be read, has no quorum or listed its members partly judges no node, and a spec
//! on it waits as before (its node offline, or its site unreachable).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::SiteView;
use crate::spec::Spec;

/// A node a spec names that its site's cluster does not have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnknownNode {
    /// The node as the spec names it.
    pub node: String,
    /// The spec's site.
    pub site: String,
    /// The nodes the site's cluster has, sorted.
    pub known: Vec<String>,
    /// The member closest to `node`, when it is close enough to be what was meant.
    pub closest: Option<String>,
}

/// The nodes `spec` names that are not among `members` (its site's cluster's nodes, read
/// whole): its `forProvider.node`, and the nodes a `FreeMemory` set may place it on (any of
/// them may be chosen), each once, in that order. Empty when every node is a member.
pub fn unknown_nodes(spec: &Spec, members: &[&str]) -> Vec<UnknownNode> {
    let candidates = spec.set.as_deref().and_then(|m| m.candidates.as_deref());
    let named = std::iter::once(spec.node.as_str())
        .chain(candidates.into_iter().flatten().map(String::as_str));
    let mut out: Vec<UnknownNode> = Vec::new();
    for node in named {
        if members.contains(&node) || out.iter().any(|u| u.node == node) {
            continue;
        }
        out.push(UnknownNode {
            node: node.to_string(),
            site: spec.site.to_string(),
            known: members.iter().map(|m| m.to_string()).collect(),
            closest: crate::spec::closest(node, members.iter().copied()).map(str::to_string),
        });
    }
    out
}

/// Each spec of `specs` that names a node its site's cluster does not have, as `views` read
/// the sites (a site not in `views`, or whose membership is not known, judges none), with the
/// nodes it names wrongly. Each site's members are listed once.
pub fn specs_with_unknown_nodes<'a>(
    specs: impl IntoIterator<Item = &'a Spec>,
    views: &BTreeMap<String, SiteView>,
) -> Vec<(&'a Spec, Vec<UnknownNode>)> {
    let members: BTreeMap<&str, Vec<&str>> = (views.iter())
        .filter_map(|(name, view)| Some((name.as_str(), view.members()?)))
        .collect();
    if members.is_empty() {
        return Vec::new();
    }
    specs
        .into_iter()
        .filter_map(|spec| {
            let unknown = unknown_nodes(spec, members.get(spec.site.as_str())?);
            (!unknown.is_empty()).then_some((spec, unknown))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pve::types::{ClusterShape, ClusterStatusEntry};

    /// A view of site `lab` as `/cluster/status` answers `status`.
    fn view(status: &str) -> SiteView {
        let entries: Vec<ClusterStatusEntry> = serde_json::from_str(status).unwrap();
        SiteView {
            error: None,
            health: crate::pve::types::ClusterHealth::from_entries(&entries),
            cluster: ClusterShape::from_entries(&entries),
            ..SiteView::unreachable("lab", String::new())
        }
    }

    const TWO_NODES: &str = r#"[{"type":"cluster","name":"c","nodes":2,"quorate":1},
        {"type":"node","name":"pve1","online":1},{"type":"node","name":"pve2","online":0}]"#;

    /// web-01 on site lab, node `node`.
    fn spec(node: &str) -> Spec {
        Spec {
            node: node.into(),
            ..crate::spec::test_spec("")
        }
    }

    fn judged(spec: &Spec, view: SiteView) -> Vec<UnknownNode> {
        let views = BTreeMap::from([("lab".to_string(), view)]);
        specs_with_unknown_nodes([spec], &views)
            .into_iter()
            .flat_map(|(_, u)| u)
            .collect()
    }

    #[test]
    fn a_node_the_cluster_does_not_have_is_named_with_the_members_and_the_closest() {
        let unknown = judged(&spec("pve9"), view(TWO_NODES));
        assert_eq!(
            unknown,
            vec![UnknownNode {
                node: "pve9".into(),
                site: "lab".into(),
                known: vec!["pve1".into(), "pve2".into()],
                closest: Some("pve1".into()),
            }]
        );
        // Far from every member: no guess.
        assert_eq!(
            judged(&spec("storage-west"), view(TWO_NODES))[0].closest,
            None
        );
    }

    #[test]
    fn a_member_is_no_stranger_online_or_not() {
        assert!(judged(&spec("pve1"), view(TWO_NODES)).is_empty());
        // Offline is an outage, waited out: not this.
        assert!(judged(&spec("pve2"), view(TWO_NODES)).is_empty());
    }

    #[test]
    fn no_node_is_judged_without_the_whole_membership() {
        // The site could not be read.
        let unreachable = SiteView::unreachable("lab", "connection refused".into());
        assert!(judged(&spec("pve9"), unreachable).is_empty());
        // Another cluster than the recorded one answered.
        let refused = SiteView {
            health: view(TWO_NODES).health,
            cluster: view(TWO_NODES).cluster,
            ..SiteView::identity_refused("lab", "another cluster".into())
        };
        assert!(judged(&spec("pve9"), refused).is_empty());
        // No quorum: the answering node's list may be old.
        let lost = view(
            r#"[{"type":"cluster","name":"c","nodes":2,"quorate":0},
                {"type":"node","name":"pve1","online":1},{"type":"node","name":"pve2","online":0}]"#,
        );
        assert!(judged(&spec("pve9"), lost).is_empty());
        // Fewer members listed than counted, or one without a name.
        for partial in [
            r#"[{"type":"cluster","name":"c","nodes":3,"quorate":1},
                {"type":"node","name":"pve1","online":1},{"type":"node","name":"pve2","online":1}]"#,
            r#"[{"type":"cluster","name":"c","nodes":2,"quorate":1},
                {"type":"node","name":"pve1","online":1},{"type":"node","online":1}]"#,
        ] {
            assert!(judged(&spec("pve9"), view(partial)).is_empty(), "{partial}");
        }
        // A site not observed at all (another site's spec).
        assert!(specs_with_unknown_nodes([&spec("pve9")], &BTreeMap::new()).is_empty());
    }

    /// A standalone host's answer is also what a cluster's node without corosync gives (one
    /// node, no cluster entry): no node is judged on it.
    #[test]
    fn an_answer_without_a_cluster_entry_judges_no_node() {
        let single = view(r#"[{"type":"node","name":"pve","online":1,"local":1}]"#);
        assert!(judged(&spec("pve1"), single).is_empty());
    }

    #[test]
    fn every_node_a_free_memory_set_may_choose_is_judged() {
        let mut member = spec("pve1");
        member.set = Some(Box::new(crate::spec::sets::SetMember {
            set: "web".into(),
            index: 1,
            max_unavailable: 1,
            replicas: 3,
            candidates: Some(vec!["pve1".into(), "pve3".into(), "pve3".into()].into()),
            max_per_node: None,
        }));
        let unknown = judged(&member, view(TWO_NODES));
        let names: Vec<&str> = unknown.iter().map(|u| u.node.as_str()).collect();
        assert_eq!(names, vec!["pve3"], "each once");
    }
}
