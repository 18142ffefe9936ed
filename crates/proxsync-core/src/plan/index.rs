//! The per-site lookups of the planner.

use std::collections::BTreeMap;

use crate::util::fnv::{FnvHashMap, FnvHashSet};

use super::PlanInput;
use crate::guest::GuestKind;
use crate::model::{Making, ObservedVm, SiteView};

/// What `plan_spec` looks up per spec, built once per site so a plan stays linear in the
/// number of specs and VMs. Hash maps: only looked up, never walked in order, and string
/// keys in B-trees cost a comparison per level.
pub(super) struct SiteIndex<'a> {
    /// VMs carrying this install's marker, by the spec the marker names; templates apart.
    pub(super) by_marker: FnvHashMap<&'a str, Vec<&'a ObservedVm>>,
    /// Templates carrying this install's marker, by the spec the marker names: a
    /// `ProxmoxTemplate`'s only (`spec::claimants`); no guest spec, rename or orphan judges
    /// them.
    pub(super) templates_by_marker: FnvHashMap<&'a str, Vec<&'a ObservedVm>>,
    /// VMs whose marker could not be read and that no record explains: by name; and tagged
    /// ones listed without a name, by node. The uncertainty stays with what such a VM can be:
    /// the spec of its name, or (nameless) the specs of its node; other specs of the site are
    /// created as usual.
    pub(super) unread_by_name: FnvHashMap<&'a str, u32>,
    pub(super) unread_tagged_nameless: FnvHashMap<&'a str, u32>,
    /// Guests a create of this install's token is making, which no record explains
    /// (`ObservedVm::making`), by kind and node (the lowest VMID); and those a clone (or a task
    /// listing that could not be read) is making, by kind alone: a clone is listed on its
    /// template's node until its task ends. A spec of that kind (on that node) without a guest
    /// waits for them: its guest may be among them, its marker written when the task ends.
    pub(super) making_on_node: FnvHashMap<(GuestKind, &'a str), u32>,
    pub(super) making_anywhere: FnvHashMap<GuestKind, u32>,
    /// VMs whose marker names this install but does not verify, by the spec it claims (the
    /// lowest VMID): a copy, a typed marker, or a lost marker key.
    pub(super) unverified_by_spec: FnvHashMap<&'a str, u32>,
    /// VMs with this install's tag, read and without any marker line, that no record explains:
    /// by name (the lowest VMID). A guest whose notes a person replaced, after the record that
    /// named it was lost: it may be the spec of its name's.
    pub(super) unmarked_tagged_by_name: FnvHashMap<&'a str, u32>,
    /// VMs whose marker names another install, by the spec it names (verified or not): a VM
    /// handed over to this install, or still held by the other one.
    pub(super) other_install_by_spec: FnvHashMap<&'a str, Vec<&'a ObservedVm>>,
}

impl<'a> SiteIndex<'a> {
    fn new(
        view: &'a SiteView,
        install_id: &str,
        known: &FnvHashSet<u32>,
        tag: &str,
    ) -> SiteIndex<'a> {
        let mut index = SiteIndex {
            by_marker: FnvHashMap::default(),
            templates_by_marker: FnvHashMap::default(),
            unread_by_name: FnvHashMap::default(),
            unread_tagged_nameless: FnvHashMap::default(),
            making_on_node: FnvHashMap::default(),
            making_anywhere: FnvHashMap::default(),
            unverified_by_spec: FnvHashMap::default(),
            unmarked_tagged_by_name: FnvHashMap::default(),
            other_install_by_spec: FnvHashMap::default(),
        };
        for vm in view.vms.values() {
            // Only a marker that verifies (or that the state vouches for) claims a spec. A
            // template's claims only a `ProxmoxTemplate` (`spec::claimants`); nothing else of
            // a template is a guest's.
            if let Some(m) = vm.marker.as_ref().filter(|m| m.install == install_id)
                && vm.marker_verified
            {
                let map = match vm.template {
                    true => &mut index.templates_by_marker,
                    false => &mut index.by_marker,
                };
                map.entry(m.spec.as_str()).or_default().push(vm);
            }
            if vm.template {
                continue;
            }
            if let Some(spec) = vm.unverified_claim(install_id) {
                index.unverified_by_spec.entry(spec).or_insert(vm.vmid);
            }
            if let Some(m) = vm.marker.as_ref().filter(|m| m.install != install_id) {
                index
                    .other_install_by_spec
                    .entry(m.spec.as_str())
                    .or_default()
                    .push(vm);
            }
            if vm.marker_read
                && vm.marker.is_none()
                && vm.has_tag(tag)
                && !known.contains(&vm.vmid)
                && let Some(name) = vm.name.as_deref()
            {
                let entry = index.unmarked_tagged_by_name.entry(name).or_insert(vm.vmid);
                *entry = (*entry).min(vm.vmid);
            }
            match vm.making {
                Some(Making::Create) => {
                    let entry = (index.making_on_node)
                        .entry((vm.kind, vm.node.as_str()))
                        .or_insert(vm.vmid);
                    *entry = (*entry).min(vm.vmid);
                }
                Some(Making::Clone | Making::Unread) => {
                    let entry = index.making_anywhere.entry(vm.kind).or_insert(vm.vmid);
                    *entry = (*entry).min(vm.vmid);
                }
                None => {}
            }
            if !vm.marker_read && !known.contains(&vm.vmid) {
                match vm.name.as_deref() {
                    Some(name) => {
                        index.unread_by_name.entry(name).or_insert(vm.vmid);
                    }
                    None if vm.has_tag(tag) => {
                        index
                            .unread_tagged_nameless
                            .entry(vm.node.as_str())
                            .or_insert(vm.vmid);
                    }
                    None => {}
                }
            }
        }
        index
    }
}

/// The index of every site, by site name. `tag` is the ownership tag.
pub(super) fn site_indexes<'a>(
    input: &'a PlanInput<'a>,
    tag: &str,
) -> BTreeMap<&'a str, SiteIndex<'a>> {
    // The VMIDs the records explain, per site: their markers need not be read.
    let mut known: BTreeMap<&str, FnvHashSet<u32>> = BTreeMap::new();
    for r in input.records.values() {
        if let Some(id) = r.vmid() {
            known.entry(r.site.as_str()).or_default().insert(id);
        }
    }
    let no_vmids = FnvHashSet::default();
    input
        .sites
        .iter()
        .map(|(name, view)| {
            let known = known.get(name.as_str()).unwrap_or(&no_vmids);
            (
                name.as_str(),
                SiteIndex::new(view, input.install_id, known, tag),
            )
        })
        .collect()
}
