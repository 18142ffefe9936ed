//! Where the members of a set with `placement.strategy: FreeMemory` go: a member whose VM
//! exists (or is being made) stays where its record says; one without picks, among its set's
//! nodes that are healthy, the one with the least memory given to VMs in this cycle's listing
//! (and to the members placed before it in this pass), within `maxPerNode`. No request: the
//! listing is read anyway. The choice is made again only while the member has no VM, so a
//! member never moves because the others grew.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::observe::SiteView;
use crate::spec::{MIB, Spec, SpecSet};
use crate::store::SpecRecord;

/// `specs` with each FreeMemory member's node decided; borrowed when there is none.
pub(super) fn place<'a>(
    specs: &'a SpecSet,
    views: &BTreeMap<String, SiteView>,
    records: &BTreeMap<String, SpecRecord>,
) -> Cow<'a, SpecSet> {
    let placed = |s: &Spec| s.set.as_deref().is_some_and(|m| m.candidates.is_some());
    if !specs.specs.iter().any(placed) {
        return Cow::Borrowed(specs);
    }
    // Memory given to VMs per (site, node), and members per (set, node), as placing goes.
    let mut given: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (site, view) in views {
        for vm in view.vms.values() {
            *given.entry((site.clone(), vm.node.clone())).or_default() +=
                vm.memory_bytes.unwrap_or(0);
        }
    }
    let mut per_node: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut out: Vec<Arc<Spec>> = Vec::with_capacity(specs.specs.len());
    // Members with a VM first: they hold their nodes before the others choose.
    let (with_vm, without): (Vec<&Arc<Spec>>, Vec<&Arc<Spec>>) = (specs.specs.shared().iter())
        .partition(|s| records.get(&s.name).and_then(|r| r.vm.node()).is_some());
    for spec in with_vm.into_iter().chain(without) {
        let Some(m) = spec.set.as_deref().filter(|m| m.candidates.is_some()) else {
            out.push(spec.clone());
            continue;
        };
        let candidates = m.candidates.as_deref().unwrap_or_default();
        let node = match records.get(&spec.name).and_then(|r| r.vm.node()) {
            Some(node) => node.to_string(),
            None => choose(
                spec,
                candidates,
                m.max_per_node,
                views.get(&spec.site),
                &given,
                &per_node,
            )
            .unwrap_or_else(|| spec.node.clone()),
        };
        *per_node.entry((m.set.clone(), node.clone())).or_default() += 1;
        if records.get(&spec.name).and_then(|r| r.vm.node()).is_none() {
            *given.entry((spec.site.clone(), node.clone())).or_default() += spec.memory_mib * MIB;
        }
        if node == spec.node {
            out.push(spec.clone());
            continue;
        }
        let mut moved = Spec::clone(spec);
        moved.node = node;
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
        diagnostics: specs.diagnostics.clone(),
    })
}

/// The healthy candidate with the least memory given to VMs and room under `max_per_node`;
/// the first such in the set's order on a tie. `None` when the site was not read or no
/// candidate fits (the spec's stand-in node stays, and the planner says why).
fn choose(
    spec: &Spec,
    candidates: &[String],
    max_per_node: Option<u32>,
    view: Option<&SiteView>,
    given: &BTreeMap<(String, String), u64>,
    per_node: &BTreeMap<(String, String), u32>,
) -> Option<String> {
    let view = view.filter(|v| v.error.is_none())?;
    let set = spec.set.as_deref()?.set.clone();
    candidates
        .iter()
        .filter(|n| view.node_healthy(n))
        .filter(|n| {
            let here = per_node
                .get(&(set.clone(), n.to_string()))
                .copied()
                .unwrap_or(0);
            max_per_node.is_none_or(|max| here < max)
        })
        .min_by_key(|n| {
            given
                .get(&(spec.site.clone(), n.to_string()))
                .copied()
                .unwrap_or(0)
        })
        .cloned()
}
