//! What becomes of a guest's cloud-init seed images once the guest is gone. A seed is a NoCloud
//! ISO holding the guest's user data (with SOPS, the decrypted secret) on a storage anyone who
//! may read the storage can read, so it goes with its guest: every delete path removes the
//! deleted guest's seeds ([`after_delete`]), and a sweep ([`sweep`]) removes this install's
//! seeds whose spec is gone, which an interrupted delete, a guest deleted by hand or an older
//! release left behind. Never a seed a guest's config names: a hand clone of a managed VM
//! keeps its CD-ROM. Each delete carries the gate's permit (`gate::volume::seed_unused`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::gate::site::{SiteChecked, checked};
use crate::gate::volume::{SeedUnused, seed_unused};
use crate::guest::GuestKind;
use crate::observe::{ObservedVm, SiteView};
use crate::pve::types::{StorageVolume, VmConfig};
use crate::pve::values::DriveValue;
use crate::pve::{Pve, TaskOutcome};

use super::{ExecCtx, SiteCtx};

/// Whether `cfg` (with its `pending` values) names volume `volid` in any drive.
fn names(cfg: &VmConfig, pending: &[String], volid: &str) -> bool {
    (cfg.values.values().chain(pending.iter())).any(|v| DriveValue::parse(v).volume == volid)
}

/// A guest's config and the values pending for its next start.
type Read = (VmConfig, Vec<String>);

/// A guest's config and the values pending for its next start (a VM's; a container takes no
/// seed), read now; `None` when it could not be read (a guest gone meanwhile reads as empty).
async fn read_guest(client: &impl Pve, vm: &ObservedVm) -> Option<Read> {
    let cfg = match client.vm_config(&vm.node, vm.kind, vm.vmid).await {
        Ok(cfg) => cfg,
        Err(e) if e.is_not_found() => return Some((VmConfig::default(), Vec::new())),
        Err(_) => return None,
    };
    if vm.kind != GuestKind::Qemu {
        return Some((cfg, Vec::new()));
    }
    let pending = client.vm_pending(&vm.node, vm.kind, vm.vmid).await.ok()?;
    let values = pending
        .into_iter()
        .filter_map(|p| p.pending)
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    Some((cfg, values))
}

/// The guests of `view` but `gone` that may use spec `spec`'s seeds: their marker (of any
/// install; read, or vouched for by a record) names it, or a create of this install's token is
/// making them, or they carry this install's tag and no marker is known of them.
fn claimants<'v>(view: &'v SiteView, tag: &str, spec: &str, gone: u32) -> Vec<&'v ObservedVm> {
    (view.vms.values())
        .filter(|vm| !vm.template && vm.vmid != gone)
        .filter(|vm| {
            vm.marker.as_ref().is_some_and(|m| m.spec == spec)
                || vm.making.is_some()
                || (vm.marker.is_none() && !vm.marker_read && vm.has_tag(tag))
        })
        .collect()
}

/// Deletes `volume` with `permit` and waits for its task; a failure is logged (a sweep finds
/// the volume again).
async fn delete(
    client: &impl Pve,
    node: &str,
    storage: &str,
    volume: &str,
    permit: &crate::gate::permit::Permit,
    task_wait: Duration,
) -> bool {
    let result = match client.delete_volume(node, storage, volume, permit).await {
        Ok(Some(upid)) => (client.wait_task(&upid, task_wait).await)
            .map(|o| !matches!(o, TaskOutcome::StillRunning)),
        Ok(None) => Ok(true),
        Err(e) => Err(e),
    };
    match result {
        Ok(done) => done,
        Err(e) => {
            tracing::warn!(volume, error = %e, "cannot remove a seed image");
            false
        }
    }
}

/// Removes the seed images of spec `spec` on `storages` of `node` (site `site_name`) once its
/// guest `gone` was deleted (its delete task ended, or PVE says its VMID is free): each seed of
/// this install and that spec the storage lists, unless another guest's config names it or a
/// guest that may use the spec's seeds cannot be read (a hand clone of the VM, a second VM of
/// the spec). Best effort: a failure is logged, and the sweep finds the seed again.
pub(super) async fn after_delete(
    ctx: &ExecCtx<impl Pve>,
    site_name: &str,
    node: &str,
    spec: &str,
    gone: u32,
    storages: &BTreeSet<String>,
) {
    let (Some(site), Some(view)) = (ctx.sites.get(site_name), ctx.views.get(site_name)) else {
        return;
    };
    let Ok(checked) = checked(view) else {
        return;
    };
    let client = &site.client;
    let tag = crate::ownership::ownership_tag(&ctx.install_id);
    // The other guests that may use the spec's seeds, read once for every storage.
    let mut others: Option<Vec<(u32, Option<Read>)>> = None;
    for storage in storages {
        let listing = match client.storage_content(node, storage, Some("iso")).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(spec, storage, error = %e, "cannot list the seed images of a deleted guest");
                continue;
            }
        };
        let seeds: Vec<StorageVolume> = (listing.into_iter())
            .filter(|v| crate::cloudinit::is_seed_of(&v.volid, &ctx.install_id, spec))
            .collect();
        if seeds.is_empty() {
            continue;
        }
        if others.is_none() {
            let mut read = Vec::new();
            for vm in claimants(view, &tag, spec, gone) {
                read.push((vm.vmid, read_guest(client, vm).await));
            }
            others = Some(read);
        }
        let others = others.as_deref().unwrap_or_default();
        let unread: Vec<u32> = (others.iter())
            .filter(|(_, r)| r.is_none())
            .map(|(id, _)| *id)
            .collect();
        for v in seeds {
            let named_by: Vec<u32> = (others.iter())
                .filter(|(_, r)| r.as_ref().is_some_and(|(c, p)| names(c, p, &v.volid)))
                .map(|(id, _)| *id)
                .collect();
            let evidence = SeedUnused {
                volid: &v.volid,
                install: &ctx.install_id,
                spec,
                named_by: &named_by,
                unread: &unread,
                gone: Some(gone),
                spec_gone: false,
            };
            match seed_unused(&checked, evidence) {
                Ok(permit) => {
                    tracing::info!(spec, vmid = gone, volume = %v.volid, "removing the seed image of a deleted guest");
                    delete(client, node, storage, &v.volid, &permit, ctx.task_wait).await;
                }
                Err(why) => tracing::warn!(spec, volume = %v.volid, "{why}"),
            }
        }
    }
}

/// The storages a deleted guest's seeds are on: those its config named (`cfg`) and those the
/// record says proxsync uploaded to (`recorded`).
pub(super) fn seed_storages(
    cfg: Option<&VmConfig>,
    install: &str,
    spec: &str,
    recorded: Option<&crate::store::SpecRecord>,
) -> BTreeSet<String> {
    let named = cfg
        .map(|c| crate::render::cloud_init::seed_slots(c, install, spec))
        .unwrap_or_default()
        .into_iter()
        .map(|(_, v)| v);
    let uploaded = (recorded.and_then(|r| r.volumes.as_ref()))
        .map(|v| v.seeds.iter().map(|s| s.volid.clone()).collect::<Vec<_>>())
        .unwrap_or_default();
    named
        .chain(uploaded)
        .filter_map(|v| v.split_once(':').map(|(s, _)| s.to_string()))
        .collect()
}

/// What a sweep needs besides the sites: see [`sweep`].
pub(crate) struct SweepInput<'a> {
    pub install_id: &'a str,
    /// This cycle's views (after its actions).
    pub views: &'a BTreeMap<String, SiteView>,
    /// Every spec name of the source (valid or not, every shard's) and every record's: a seed
    /// of one of these is its spec's converge's to remove, not the sweep's.
    pub known_specs: &'a BTreeSet<String>,
    /// The sites where this install keeps seeds: a spec there has `userData`, or a record
    /// there recorded an upload.
    pub seed_sites: &'a BTreeSet<String>,
    /// The limit of config reads at once per node.
    pub per_node: u32,
    pub task_wait: Duration,
}

/// Seeds the sweep kept because a guest's config named them, by (site, volume): that guest.
/// Kept across cycles, so that a seed a person attached to another guest costs no reads while
/// that guest is listed.
pub(crate) type SweepKept = HashMap<(String, String), u32>;

/// The sweep: on each site of `seed_sites` the cycle found reachable, its recorded cluster and
/// read whole, lists each storage with `iso` content of its healthy nodes once (a shared one
/// once per site: at most one listing per storage), and removes this install's seed images
/// whose spec no source spec or record names any more ([`SweepInput::known_specs`]), unless a
/// guest claims that spec (its marker, of any install, names it: it may use them, and its own
/// delete removes them) or a guest's config names the image. Only when a storage holds such an
/// image are the configs of the site's guests read (one per guest, within the node's limit); a
/// guest found naming one keeps it (`kept`). Returns how many were removed.
pub(crate) async fn sweep<P: Pve + 'static>(
    sites: &BTreeMap<String, Arc<SiteCtx<P>>>,
    input: &SweepInput<'_>,
    kept: &mut SweepKept,
) -> usize {
    let mut removed = 0;
    kept.retain(|(site, _), vmid| {
        (input.views.get(site)).is_some_and(|v| v.vms.contains_key(vmid))
    });
    for site_name in input.seed_sites {
        let (Some(site), Some(view)) = (sites.get(site_name), input.views.get(site_name)) else {
            continue;
        };
        let Ok(checked) = checked(view) else {
            continue;
        };
        if view.incomplete() {
            continue;
        }
        let client = &site.client;
        let nodes: Vec<&String> = (view.health.nodes.keys())
            .filter(|n| view.node_healthy(n))
            .collect();
        let mut listed_shared = BTreeSet::new();
        for node in nodes {
            let storages = match client.node_storages(node, Some("iso")).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(site = %site_name, node = %node, error = %e, "seed sweep: cannot list the node's storages");
                    continue;
                }
            };
            for storage in storages.iter().filter(|s| {
                s.has_content("iso") && s.active != Some(false) && s.enabled != Some(false)
            }) {
                let shared = storage.shared == Some(true);
                if shared && !listed_shared.insert(storage.storage.clone()) {
                    continue;
                }
                let found = SweptStorage {
                    site,
                    view,
                    checked: &checked,
                    node,
                    storage: &storage.storage,
                };
                removed += found.sweep(input, kept).await;
            }
        }
    }
    removed
}

/// One storage of a sweep.
struct SweptStorage<'a, P> {
    site: &'a Arc<SiteCtx<P>>,
    view: &'a SiteView,
    checked: &'a SiteChecked,
    node: &'a str,
    storage: &'a str,
}

impl<P: Pve + 'static> SweptStorage<'_, P> {
    async fn sweep(&self, input: &SweepInput<'_>, kept: &mut SweepKept) -> usize {
        let client = &self.site.client;
        let site_name = self.view.name.as_str();
        let listing = match client
            .storage_content(self.node, self.storage, Some("iso"))
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(site = %site_name, storage = self.storage, error = %e, "seed sweep: cannot list the storage");
                return 0;
            }
        };
        // This install's seeds of a spec that is gone, which no guest claims and no guest was
        // found naming before.
        let claimed: BTreeSet<&str> = (self.view.vms.values())
            .filter_map(|vm| vm.marker.as_ref().map(|m| m.spec.as_str()))
            .collect();
        let candidates: Vec<(String, String)> = (listing.into_iter())
            .filter_map(|v| {
                let (install, spec, _) = crate::cloudinit::parse_seed_file_name(&v.volid)?;
                (install == input.install_id
                    && !input.known_specs.contains(spec)
                    && !claimed.contains(spec))
                .then(|| (v.volid.clone(), spec.to_string()))
            })
            .filter(|(volid, _)| !kept.contains_key(&(site_name.to_string(), volid.clone())))
            .collect();
        if candidates.is_empty() {
            return 0;
        }
        // Every guest of the site: its config, read now. Only a local storage's own node's
        // guests can name its volumes; all are read all the same, so that a storage shared in
        // fact but not flagged `shared` keeps what any guest names.
        let guests: Vec<ObservedVm> = (self.view.vms.values())
            .filter(|vm| !vm.template)
            .cloned()
            .collect();
        let reads = read_all(self.site, guests, input.per_node).await;
        let unread: Vec<u32> = (reads.iter())
            .filter(|(_, r)| r.is_none())
            .map(|(id, _)| *id)
            .collect();
        let mut removed = 0;
        for (volid, spec) in candidates {
            let named_by: Vec<u32> = (reads.iter())
                .filter(|(_, r)| r.as_ref().is_some_and(|(c, p)| names(c, p, &volid)))
                .map(|(id, _)| *id)
                .collect();
            if let Some(vmid) = named_by.first() {
                tracing::info!(site = %site_name, volume = %volid, vmid, "seed sweep: a guest names the seed image of a gone spec; kept");
                kept.insert((site_name.to_string(), volid.clone()), *vmid);
                continue;
            }
            let evidence = SeedUnused {
                volid: &volid,
                install: input.install_id,
                spec: &spec,
                named_by: &named_by,
                unread: &unread,
                gone: None,
                spec_gone: true,
            };
            match seed_unused(self.checked, evidence) {
                Ok(permit) => {
                    tracing::info!(site = %site_name, volume = %volid, spec, "seed sweep: removing the seed image of a spec that is gone");
                    if delete(
                        client,
                        self.node,
                        self.storage,
                        &volid,
                        &permit,
                        input.task_wait,
                    )
                    .await
                    {
                        removed += 1;
                    }
                }
                Err(why) => tracing::warn!(site = %site_name, volume = %volid, "seed sweep: {why}"),
            }
        }
        removed
    }
}

/// Reads the config (and a VM's pending values) of each of `guests`, within each node's limit
/// (the client's, else `per_node`): by VMID, `None` where it could not be read.
async fn read_all<P: Pve + 'static>(
    site: &Arc<SiteCtx<P>>,
    guests: Vec<ObservedVm>,
    per_node: u32,
) -> Vec<(u32, Option<Read>)> {
    let jobs = guests.into_iter().map(|vm| (vm.node.clone(), vm));
    crate::util::lanes::run(
        jobs,
        |node: &compact_str::CompactString| {
            site.client.parallel_limit(node).unwrap_or(per_node).max(1) as usize
        },
        |vm: ObservedVm| {
            let site = site.clone();
            async move {
                let read = read_guest(&site.client, &vm).await;
                (vm.vmid, read)
            }
        },
    )
    .await
}
