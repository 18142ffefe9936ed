//! Where the members of a set with `placement.strategy: FreeMemory` go: a member whose VM
//! exists (or is being made) stays where its record says; one without picks, among its set's
//! nodes that are healthy, the one with the most free memory, within `maxPerNode`. A node's
//! free memory is its own (`maxmem - mem` of `/cluster/resources?type=node`, what pvestatd
//! reports: the memory the host has not in use), less what this pass placed on it before. It
//! is read only when a member is to be placed (one request per site that has such a member),
//! so an idle cycle, or one whose members all have their VMs, costs no request. The choice is
//! made again only while the member has no VM, so a member never moves because the others
//! grew.
//!
//! Found in review: the strategy summed the `maxmem` of the guests the listing shows on each
//! node (stopped guests and templates included) and never looked at the nodes' own memory, so
//! nodes of different sizes were placed as if they were alike.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::execute::SiteCtx;
use crate::observe::SiteView;
use crate::spec::{MIB, Spec, SpecSet};
use crate::store::SpecRecord;

/// Free memory (bytes) per node, per site.
pub(super) type FreeMemory = BTreeMap<String, BTreeMap<String, u64>>;

/// Whether `spec` is a FreeMemory member without a VM: placed this cycle.
fn to_place(spec: &Spec, records: &BTreeMap<String, SpecRecord>) -> bool {
    spec.set.as_deref().is_some_and(|m| m.candidates.is_some())
        && records
            .get(spec.name.as_str())
            .and_then(|r| r.vm.node())
            .is_none()
}

/// The free memory of the nodes of each site where a FreeMemory member is to be placed, read
/// now (`observe::node_free_memory`, one request per such site, all at once). A site not
/// reachable this cycle is not asked (nothing is made there); a failed read leaves its site
/// out, and its members keep the node their index gives them (said in the log).
pub(super) async fn free_memory(
    specs: &SpecSet,
    records: &BTreeMap<String, SpecRecord>,
    views: &BTreeMap<String, SiteView>,
    sites: &BTreeMap<String, Arc<SiteCtx>>,
) -> FreeMemory {
    let wanted: BTreeSet<&str> = specs
        .specs
        .iter()
        .filter(|s| to_place(s, records))
        .map(|s| s.site.as_str())
        .filter(|site| views.get(*site).is_some_and(SiteView::reachable))
        .collect();
    let mut reads = tokio::task::JoinSet::new();
    for site in wanted {
        let Some(ctx) = sites.get(site).cloned() else {
            continue;
        };
        let site = site.to_string();
        reads.spawn(async move {
            let read = crate::observe::node_free_memory(&ctx.client).await;
            (site, read)
        });
    }
    let mut out = FreeMemory::new();
    while let Some(joined) = reads.join_next().await {
        let Ok((site, read)) = joined else {
            continue;
        };
        match read {
            Ok(nodes) => {
                out.insert(site, nodes);
            }
            Err(e) => tracing::warn!(
                site = %site,
                error = %e,
                "the nodes' memory could not be read: the set's members to be placed by free \
                 memory keep the node their index gives them this cycle"
            ),
        }
    }
    out
}

/// `specs` with each FreeMemory member's node decided; borrowed when there is none. `free`:
/// [`free_memory`]'s answer.
pub(super) fn place<'a>(
    specs: &'a SpecSet,
    views: &BTreeMap<String, SiteView>,
    records: &BTreeMap<String, SpecRecord>,
    free: &FreeMemory,
) -> Cow<'a, SpecSet> {
    let placed = |s: &Spec| s.set.as_deref().is_some_and(|m| m.candidates.is_some());
    if !specs.specs.iter().any(placed) {
        return Cow::Borrowed(specs);
    }
    // Memory placed per (site, node) in this pass, and members per (set, node).
    let mut given: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut per_node: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut out: Vec<Arc<Spec>> = Vec::with_capacity(specs.specs.len());
    // Members with a VM first: they hold their nodes before the others choose.
    let (with_vm, without): (Vec<&Arc<Spec>>, Vec<&Arc<Spec>>) = (specs.specs.shared().iter())
        .partition(|s| {
            records
                .get(s.name.as_str())
                .and_then(|r| r.vm.node())
                .is_some()
        });
    for spec in with_vm.into_iter().chain(without) {
        let Some(m) = spec.set.as_deref().filter(|m| m.candidates.is_some()) else {
            out.push(spec.clone());
            continue;
        };
        let candidates = m.candidates.as_deref().unwrap_or_default();
        let node = match records.get(spec.name.as_str()).and_then(|r| r.vm.node()) {
            Some(node) => node.to_string(),
            None => {
                let place = Place {
                    free: free.get(spec.site.as_str()),
                    given: &given,
                    per_node: &per_node,
                };
                choose(
                    spec,
                    candidates,
                    m.max_per_node,
                    views.get(spec.site.as_str()),
                    &place,
                )
                .unwrap_or_else(|| spec.node.to_string())
            }
        };
        *per_node.entry((m.set.clone(), node.clone())).or_default() += 1;
        if records
            .get(spec.name.as_str())
            .and_then(|r| r.vm.node())
            .is_none()
        {
            *given
                .entry((spec.site.to_string(), node.clone()))
                .or_default() += spec.memory_mib() * MIB;
        }
        if node == spec.node {
            out.push(spec.clone());
            continue;
        }
        let mut moved = Spec::clone(spec);
        moved.node = node.into();
        crate::spec::remember_hashes(&mut moved);
        out.push(Arc::new(moved));
    }
    // The specs in their first order (a set's order is its members' index order).
    let order: BTreeMap<&str, usize> = (specs.specs.iter().enumerate())
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    out.sort_by_key(|s| order.get(s.name.as_str()).copied().unwrap_or(usize::MAX));
    Cow::Owned(SpecSet {
        specs: out.into_iter().collect(),
        images: specs.images.clone(),
        diagnostics: specs.diagnostics.clone(),
    })
}

/// What a choice is made from: the site's nodes' free memory (`None`: not read), the memory
/// placed in this pass per (site, node), the members per (set, node).
struct Place<'p> {
    free: Option<&'p BTreeMap<String, u64>>,
    given: &'p BTreeMap<(String, String), u64>,
    per_node: &'p BTreeMap<(String, String), u32>,
}

/// The healthy candidate with the most free memory (less what this pass placed there) and
/// room under `max_per_node`; the first such in the set's order on a tie. `None` when the site
/// was not read, its nodes' memory was not, or no candidate fits (the spec's stand-in node
/// stays, and the planner says why).
fn choose(
    spec: &Spec,
    candidates: &[String],
    max_per_node: Option<u32>,
    view: Option<&SiteView>,
    place: &Place<'_>,
) -> Option<String> {
    let view = view.filter(|v| v.error.is_none())?;
    let free = place.free?;
    let set = spec.set.as_deref()?.set.clone();
    candidates
        .iter()
        .filter(|n| view.node_healthy(n))
        .filter(|n| {
            let here = place
                .per_node
                .get(&(set.clone(), n.to_string()))
                .copied()
                .unwrap_or(0);
            max_per_node.is_none_or(|max| here < max)
        })
        .filter_map(|n| {
            let given = place
                .given
                .get(&(spec.site.to_string(), n.to_string()))
                .copied()
                .unwrap_or(0);
            Some((n, free.get(n)?.saturating_sub(given)))
        })
        .min_by_key(|(_, left)| std::cmp::Reverse(*left))
        .map(|(n, _)| n.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::SiteView;
    use crate::pve::types::ClusterHealth;

    /// A set of `replicas` members of 4 GiB, placed by free memory over pve1..pve3.
    fn set(replicas: u32, extra: &str) -> SpecSet {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxVMSet\nmetadata:\n  name: web\nspec:\n  \
             replicas: {replicas}\n  placement: {{strategy: FreeMemory, nodes: [pve1, pve2, pve3]{extra}}}\n  \
             template:\n    forProvider:\n      site: lab\n      image: \"9000\"\n      memory: 4Gi\n"
        );
        let (specs, diags) = crate::spec::parse_file("web.yaml", yaml.as_bytes());
        assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
        SpecSet {
            specs: specs.into_iter().collect(),
            ..SpecSet::default()
        }
    }

    fn views() -> BTreeMap<String, SiteView> {
        let mut view = SiteView::unreachable("lab", String::new());
        view.error = None;
        view.health = ClusterHealth {
            quorate: true,
            nodes: [("pve1", true), ("pve2", true), ("pve3", true)]
                .into_iter()
                .map(|(n, up)| (n.to_string(), up))
                .collect(),
        };
        [("lab".to_string(), view)].into()
    }

    fn nodes_of(placed: &SpecSet) -> Vec<String> {
        placed.specs.iter().map(|s| s.node.to_string()).collect()
    }

    const GIB: u64 = 1 << 30;

    /// The nodes' own free memory decides, less what this pass placed: a big node takes more
    /// members than two small ones, and a node whose memory is in use takes none.
    #[test]
    fn members_go_where_the_nodes_memory_is_free() {
        let specs = set(4, "");
        let free: FreeMemory = [(
            "lab".to_string(),
            [("pve1", 6 * GIB), ("pve2", 20 * GIB), ("pve3", 7 * GIB)]
                .into_iter()
                .map(|(n, f)| (n.to_string(), f))
                .collect(),
        )]
        .into();
        let placed = place(&specs, &views(), &BTreeMap::new(), &free);
        // 20 -> 16 -> 12 -> 8 on pve2, then pve3 (7) before pve1 (6).
        assert_eq!(nodes_of(&placed), ["pve2", "pve2", "pve2", "pve2"]);
        let specs = set(5, "");
        let placed = place(&specs, &views(), &BTreeMap::new(), &free);
        assert_eq!(nodes_of(&placed), ["pve2", "pve2", "pve2", "pve2", "pve3"]);
        // maxPerNode holds.
        let specs = set(4, ", maxPerNode: 2");
        let placed = place(&specs, &views(), &BTreeMap::new(), &free);
        assert_eq!(nodes_of(&placed), ["pve2", "pve2", "pve3", "pve1"]);
    }

    /// A member whose VM exists keeps its node; without the nodes' memory (not read, or the
    /// read failed) a member keeps the node its index gives it.
    #[test]
    fn a_placed_member_stays_and_unknown_memory_places_nothing() {
        let specs = set(2, "");
        let mut records = BTreeMap::new();
        let rec = SpecRecord {
            vm: crate::store::VmState::Exists {
                vmid: 100,
                node: "pve3".into(),
            },
            ..Default::default()
        };
        records.insert("web-01".to_string(), rec);
        let free: FreeMemory =
            [("lab".to_string(), [("pve1".to_string(), 64 * GIB)].into())].into();
        let placed = place(&specs, &views(), &records, &free);
        assert_eq!(nodes_of(&placed), ["pve3", "pve1"]);
        let placed = place(&specs, &views(), &BTreeMap::new(), &FreeMemory::new());
        let by_index: Vec<String> = specs.specs.iter().map(|s| s.node.to_string()).collect();
        assert_eq!(nodes_of(&placed), by_index);
    }
}
