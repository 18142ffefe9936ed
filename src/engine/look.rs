//! A cycle's look at its sites: which sites a push's cycle looks at again, the observation of
//! every site in parallel with its identity checked, and the markers the planner needs, read
//! or vouched for by the records (the engine's marker cache).

use super::*;

/// Markers read from VM configs: site -> VMID -> the marker (`None`: read, none there).
/// The markers known per site, kept across cycles (a cycle clones pointers, not strings).
pub(super) type MarkerCache = HashMap<String, SiteMarkers>;

#[derive(Default)]
pub(super) struct SiteMarkers {
    /// Read from configs (`None`: read, and the VM has none).
    read: FnvHashMap<u32, Option<Arc<Marker>>>,
    /// Vouched for by a record and never read this process: built once, not each cycle.
    vouched: FnvHashMap<u32, Option<Arc<Marker>>>,
}

/// The sites a cycle after a push looks at again (see [`Engine::reconcile_after_push`]): for
/// each spec the push added, removed or changed (any field, its position included), its old
/// and new site and its record's; for each spec that became or stopped being invalid, its
/// record's site. `None` (every site) when the set's completeness or the config changed
/// since `last` (either may change what happens at every site). A site without a last view
/// is looked at too.
pub(super) fn push_scope(
    last: &LastLook,
    specs: &SpecSet,
    invalid: &BTreeSet<String>,
    records: &BTreeMap<String, SpecRecord>,
    config_hash: &str,
    sites: &BTreeMap<String, Arc<SiteCtx>>,
) -> Option<BTreeSet<String>> {
    if last.complete != specs.is_complete() || last.config_hash != config_hash {
        return None;
    }
    let mut scope = BTreeSet::new();
    let mut touch = |name: &str, site: Option<&str>| {
        scope.extend(site.map(str::to_string));
        scope.extend(records.get(name).map(|r| r.site.to_string()));
    };
    let mut before: FnvHashMap<&str, &Arc<crate::spec::Spec>> = last
        .specs
        .shared()
        .iter()
        .map(|s| (s.name.as_str(), s))
        .collect();
    for spec in specs.specs.shared() {
        match before.remove(spec.name.as_str()) {
            // The source's cache shares an unchanged file's specs: mostly a pointer compare.
            Some(old) if Arc::ptr_eq(old, spec) || old == spec => {}
            Some(old) => {
                touch(&old.name, Some(&old.site));
                touch(&spec.name, Some(&spec.site));
            }
            None => touch(&spec.name, Some(&spec.site)),
        }
    }
    for (name, old) in before {
        touch(name, Some(&old.site));
    }
    // An image added, changed or removed: its site (old and new) is looked at, where it is
    // downloaded and its old version judged.
    let images_before: FnvHashMap<&str, &crate::spec::images::ImageSpec> = (last.images.iter())
        .map(|i| (i.name.as_str(), i.as_ref()))
        .collect();
    let images_now: FnvHashMap<&str, &crate::spec::images::ImageSpec> = (specs.images.iter())
        .map(|i| (i.name.as_str(), i.as_ref()))
        .collect();
    for (name, image) in &images_now {
        if images_before.get(name) != Some(image) {
            touch(name, Some(&image.site));
        }
    }
    for (name, image) in &images_before {
        if images_now.get(name) != Some(image) {
            touch(name, Some(&image.site));
        }
    }
    for name in invalid.symmetric_difference(&last.invalid) {
        touch(name, None);
    }
    // A site without a last view (there is one even of an unreachable site, unless
    // observing it failed outright) is looked at too.
    let unseen: Vec<String> = sites
        .keys()
        .filter(|name| !last.views.contains_key(*name))
        .cloned()
        .collect();
    scope.extend(unseen);
    Some(scope)
}

/// Observes `sites` (every site, or those a push touched) in parallel, checks each is its
/// recorded cluster, and reads the markers the planner needs.
// Many arguments because: the engine's caches (markers, site identities) and what the cycle
// reads, each borrowed for this call only.
#[allow(clippy::too_many_arguments)]
pub(super) async fn observe_all(
    sites: &BTreeMap<String, Arc<SiteCtx>>,
    config: &Config,
    specs: &SpecSet,
    records: &BTreeMap<String, SpecRecord>,
    cache: &mut MarkerCache,
    identities: &mut SiteChecks,
    key: Option<&MarkerKey>,
    fresh: Option<&mut FreshConfigs>,
) -> BTreeMap<String, SiteView> {
    let listing = list_sites(sites, identities);
    observe_listed(
        listing, sites, config, specs, records, cache, identities, key, fresh,
    )
    .await
}

/// Each site's listing and who answered it, being read: what observing needs no spec for.
pub(crate) type Listing =
    tokio::task::JoinSet<(SiteView, Option<Result<site_identity::Seen, String>>)>;

/// Starts listing `sites` in parallel (the guests, the cluster's status, who answers): the
/// part of [`observe_all`] that needs no spec, so `proxsync plan` starts it before it parses.
/// Call within the runtime.
pub(crate) fn list_sites(
    sites: &BTreeMap<String, Arc<SiteCtx>>,
    identities: &SiteChecks,
) -> Listing {
    let mut set = tokio::task::JoinSet::new();
    for (name, site) in sites {
        let (name, site) = (name.clone(), site.clone());
        let last = identities.last_seen(&name);
        set.spawn(async move {
            let (view, answering) = observe_site_answered(&name, &site.client).await;
            let seen = site_identity::see(&site.client, &view, answering.as_deref(), last).await;
            (view, seen)
        });
    }
    set
}

/// [`observe_all`] from a [`Listing`] of `sites` under way.
// Many arguments because: observe_all's, and the listing it started.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn observe_listed(
    mut set: Listing,
    sites: &BTreeMap<String, Arc<SiteCtx>>,
    config: &Config,
    specs: &SpecSet,
    records: &BTreeMap<String, SpecRecord>,
    cache: &mut MarkerCache,
    identities: &mut SiteChecks,
    key: Option<&MarkerKey>,
    mut fresh: Option<&mut FreshConfigs>,
) -> BTreeMap<String, SiteView> {
    let verifies = |m: &Option<Arc<Marker>>, vmid: u32| {
        m.as_ref()
            .is_some_and(|m| key.is_some_and(|k| m.verifies(k, vmid)))
    };
    let mut views = BTreeMap::new();
    while let Some(joined) = set.join_next().await {
        if let Ok((mut view, seen)) = joined {
            // Another cluster than the recorded one leaves the view unreachable: nothing on it
            // is judged or touched (gate::site).
            identities.judge(&mut view, seen);
            views.insert(view.name.clone(), view);
        }
    }
    // Each site's records, grouped in one pass (not a pass over every record per site).
    let mut site_records: BTreeMap<&str, Vec<(&str, &SpecRecord)>> = BTreeMap::new();
    for (spec_name, rec) in records {
        site_records
            .entry(rec.site.as_str())
            .or_default()
            .push((spec_name.as_str(), rec));
    }
    let no_records = Vec::new();
    // Forget the cached markers of sites no longer configured (`sites` may be some of them).
    cache.retain(|site_name, _| config.sites.iter().any(|s| s.name == *site_name));
    let per_node = config.reconcile.max_parallel_per_node;
    let keep_configs = fresh.is_some();
    // Each site's markers are read side by side with the other sites' (each site within its
    // nodes' limits): read site after site, an empty-database start at 10 sites took ten
    // times one site's reads.
    let mut reads = tokio::task::JoinSet::new();
    let mut known_by_site = BTreeMap::new();
    let spec_names = std::cell::OnceCell::new();
    for (name, view) in views.iter_mut() {
        let Some(site) = sites.get(name) else {
            continue;
        };
        let records = site_records.get(name.as_str()).unwrap_or(&no_records);
        // FNV: built each cycle with a VMID per record.
        let mut known = FnvHashSet::with_capacity_and_hasher(records.len(), Default::default());
        known.extend(records.iter().filter_map(|(_, r)| r.vmid()));
        // A guest a create or clone of this install's token is making that no record explains
        // (a lost database): held, never answered with a second one.
        if let Some(token) = config.site(name).map(|s| s.token_id.as_str()) {
            crate::observe::mark_in_making(view, &site.client, &known, token).await;
        }
        let cache = cache.entry(name.clone()).or_default();
        let to_read = markers_to_read(view, config, specs, &spec_names, &known, cache, &verifies);
        if !to_read.is_empty() {
            let (name, site) = (name.clone(), site.clone());
            reads.spawn(async move {
                let mut read = read_markers(&site, to_read, per_node).await;
                // Held until every site has answered: the configs only when kept for actions.
                if !keep_configs {
                    for (_, r) in &mut read {
                        if let Ok(MarkerRead::Read { config, .. }) = r {
                            *config = None;
                        }
                    }
                }
                (name, read)
            });
        }
        known_by_site.insert(name.clone(), known);
    }
    let mut read_by_site = BTreeMap::new();
    while let Some(joined) = reads.join_next().await {
        match joined {
            Ok((name, read)) => {
                read_by_site.insert(name, read);
            }
            // A read that panicked fails the cycle, as it did when read in this task.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: only by dropping the set, which outlives this loop.
            Err(_) => {}
        }
    }
    let tag = crate::ownership::ownership_tag(&config.install_id);
    for (name, view) in views.iter_mut() {
        let Some(known) = known_by_site.remove(name) else {
            continue;
        };
        let cache = cache.entry(name.clone()).or_default();
        let read = read_by_site.remove(name).unwrap_or_default();
        take_marker_reads(view, cache, read, fresh.as_deref_mut(), &verifies);
        let records = site_records.get(name.as_str()).unwrap_or(&no_records);
        mark_known(view, cache, &known, records, &config.install_id, &tag);
    }
    views
}

/// The specs' guest names, by site.
type SpecNames<'a> = FnvHashMap<&'a str, FnvHashSet<&'a str>>;

/// The VMIDs of `view` whose marker must be read from their config; those the cache knows
/// are marked from it. `known`: the VMIDs the site's records explain. `spec_names`: the
/// specs' guest names by site, gathered at the first site that needs them, for every site.
fn markers_to_read<'a>(
    view: &mut SiteView,
    config: &Config,
    specs: &'a SpecSet,
    spec_names: &std::cell::OnceCell<SpecNames<'a>>,
    known: &FnvHashSet<u32>,
    cache: &mut SiteMarkers,
    verifies: &impl Fn(&Option<Arc<Marker>>, u32) -> bool,
) -> Vec<(u32, String, crate::guest::GuestKind)> {
    // A VM named like a spec that is not the spec's recorded VM is read too (once, then
    // cached): it may be the spec's lost VM, or a second one claiming it (a clone gets the
    // ownership tag only when converged). The names are gathered only if such a VM shows, in
    // one pass for all sites (a pass per site was 30 ms of a `plan` at 50,000 specs).
    let is_spec_vm_name = |vm_name: &str| {
        let by_site = spec_names.get_or_init(|| {
            let mut by_site = SpecNames::default();
            for s in specs.specs.iter() {
                (by_site.entry(s.site.as_str()).or_default()).insert(s.guest_name());
            }
            by_site
        });
        (by_site.get(view.name.as_str())).is_some_and(|names| names.contains(vm_name))
    };
    // Forget cached markers of VMs that are gone (a VMID may be reused).
    cache.read.retain(|vmid, _| view.vms.contains_key(vmid));
    let mut to_read = Vec::new();
    for vmid in needs_marker(view, &config.install_id, known, is_spec_vm_name) {
        // A template no record explains is read each cycle: nothing converges it, and a
        // person clearing its marker (as a spec it holds is told to) must be seen at once.
        let template = view.vms.get(&vmid).is_some_and(|vm| vm.template);
        match cache.read.get(&vmid).filter(|_| !template) {
            Some(m) => set_marker(view, vmid, m.clone(), verifies),
            None => {
                let (node, kind) = view
                    .vms
                    .get(&vmid)
                    .map(|vm| (vm.node.to_string(), vm.kind))
                    .unwrap_or_default();
                to_read.push((vmid, node, kind));
            }
        }
    }
    to_read
}

/// Marks `view`'s VMs with the markers read from their configs, caching them, and keeps the
/// configs read for this cycle's actions (`fresh`).
fn take_marker_reads(
    view: &mut SiteView,
    cache: &mut SiteMarkers,
    read: Vec<(u32, Result<MarkerRead, crate::pve::Error>)>,
    mut fresh: Option<&mut FreshConfigs>,
    verifies: &impl Fn(&Option<Arc<Marker>>, u32) -> bool,
) {
    for (vmid, read) in read {
        match read {
            Ok(MarkerRead::Read { marker, config }) => {
                let marker = marker.map(Arc::new);
                cache.read.insert(vmid, marker.clone());
                if let (Some(fresh), Some(cfg)) = (fresh.as_deref_mut(), config) {
                    fresh.insert((view.name.clone(), vmid), cfg);
                }
                set_marker(view, vmid, marker, verifies);
            }
            // Being made: unread, so nothing is judged on it this cycle.
            Ok(MarkerRead::NotYet) => {}
            // Unread: not known to be ours, so not touched this cycle.
            Err(e) => {
                tracing::warn!(site = %view.name, vmid, error = %e, "cannot read a VM's marker");
            }
        }
    }
}

/// Marks the VMs the site's records explain (`known`, `records`): from the marker read
/// before, else vouched for by the record while the VM carries this install's `tag`.
fn mark_known(
    view: &mut SiteView,
    cache: &mut SiteMarkers,
    known: &FnvHashSet<u32>,
    records: &[(&str, &SpecRecord)],
    install_id: &str,
    tag: &str,
) {
    // Known VMs: their marker was verified when created or adopted; the tag shows in the
    // listing, and execute re-reads the config before any change.
    for vmid in known {
        if let Some(vm) = view.vms.get_mut(vmid)
            && let Some(Some(m)) = cache.read.get(vmid)
        {
            vm.marker = Some(m.clone());
            vm.marker_read = true;
            // Known by the record: it vouches for the VM even with a marker from before
            // signing (converge rewrites that one signed).
            vm.marker_verified = true;
        }
    }
    // Known VMs whose marker was never read this process: mark from the record. Markers
    // of VMs gone or read since stay until they outnumber the records.
    if cache.vouched.len() > records.len() {
        cache.vouched.clear();
    }
    for (spec_name, rec) in records {
        if let Some(vmid) = rec.vm.made_vmid()
            && let Some(vm) = view.vms.get_mut(&vmid)
            && !vm.marker_read
            && vm.has_tag(tag)
        {
            // The record vouches for it: we made or adopted this VM at this VMID.
            let slot = cache.vouched.entry(vmid).or_default();
            vm.marker = Some(vouched_marker(slot, install_id, spec_name, &rec.uid));
            vm.marker_verified = true;
        }
    }
}

/// The marker a record vouches for: the one `slot` holds from an earlier cycle while it
/// names the same install, spec and uid; else a new one, kept in `slot`.
pub(super) fn vouched_marker(
    slot: &mut Option<Arc<Marker>>,
    install: &str,
    spec: &str,
    uid: &str,
) -> Arc<Marker> {
    match slot {
        Some(m) if m.install == install && m.spec == spec && m.uid == uid => m.clone(),
        _ => slot
            .insert(Arc::new(Marker {
                install: install.into(),
                spec: spec.into(),
                uid: uid.into(),
                mac: None,
            }))
            .clone(),
    }
}

/// Sets what a marker read found on the listed VM.
pub(super) fn set_marker(
    view: &mut SiteView,
    vmid: u32,
    marker: Option<Arc<Marker>>,
    verifies: &impl Fn(&Option<Arc<Marker>>, u32) -> bool,
) {
    if let Some(vm) = view.vms.get_mut(&vmid) {
        vm.marker_verified = verifies(&marker, vmid);
        vm.marker = marker;
        vm.marker_read = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vouched_marker_is_reused_only_while_it_says_the_same() {
        let mut slot = None;
        let first = vouched_marker(&mut slot, "main", "web", "u1");
        assert_eq!(
            (
                first.install.as_str(),
                first.spec.as_str(),
                first.uid.as_str()
            ),
            ("main", "web", "u1")
        );
        let again = vouched_marker(&mut slot, "main", "web", "u1");
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same marker is not built again"
        );
        // A renamed spec, a new uid or another install: never the stale marker.
        for (install, spec, uid) in [
            ("main", "web-2", "u1"),
            ("main", "web", "u2"),
            ("b", "web", "u1"),
        ] {
            let mut slot = Some(first.clone());
            let m = vouched_marker(&mut slot, install, spec, uid);
            assert_eq!(
                (m.install.as_str(), m.spec.as_str(), m.uid.as_str()),
                (install, spec, uid)
            );
            assert!(
                Arc::ptr_eq(&m, slot.as_ref().unwrap()),
                "kept for the next cycle"
            );
        }
    }
}
