//! cloud-init on a VM: PVE's cloud-init options and drive, or proxsync's NoCloud seed image
//! (uploaded, attached as a CD-ROM only while the storage lists the file proxsync uploaded:
//! `gate::volume`; old ones removed).

use crate::category::Category;
use crate::gate::identity::VerifiedMarker;
use crate::gate::volume::{
    SeedCheck, cloudinit_drive_removal, seed_attach, seed_delete, seed_on_storage, seed_uploaded,
};
use crate::guest::GuestKind;
use crate::model::{Blocked, SlotFor};
use crate::pve::types::VmConfig;
use crate::pve::values::nic_macs;
use crate::pve::{Pve, TaskOutcome, VmParams};
use crate::spec::{Spec, VmSpec};
use crate::store::SpecRecord;

use super::preflight::pick_seed_storage;
use super::{ActionError, ExecCtx, SiteCtx, blocked, fail, protected, wait};
use crate::render::cloud_init::{
    CLOUDINIT_DRIVE_SLOTS, EJECTED, cloud_init_params, cloudinit_drive_slot, free_seed_slot,
    free_slot, seed_slots, with_pending,
};

pub(super) enum CloudInitStep {
    /// Whether anything changed.
    Done(bool),
    /// An upload task outlived our wait.
    Running(String),
}

/// The storage for seed images: the spec's `cloudInit.seedStorage`, else the first active
/// storage of the node with `iso` content.
async fn seed_storage(
    client: &impl Pve,
    spec: &Spec,
    vm_spec: &VmSpec,
) -> Result<String, ActionError> {
    let storages = client.node_storages(&spec.node, None).await?;
    pick_seed_storage(&storages, &spec.node, vm_spec)
}

/// Deletes the seed images of `ours`'s spec on `storage` except `keep` (best effort: a failure
/// is logged and retried at the next change), each with the gate's permit
/// (`gate::volume::seed_delete`). Only this spec's VM ever uses them.
pub(super) async fn remove_old_seeds(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    node: &str,
    storage: &str,
    ours: &VerifiedMarker,
    keep: &[String],
) {
    let spec = ours.spec();
    let volumes = match client.storage_content(node, storage, Some("iso")).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(spec, storage, error = %e, "cannot list seed images to remove old ones");
            return;
        }
    };
    for v in volumes {
        if !crate::cloudinit::is_seed_of(&v.volid, ours.install(), spec) || keep.contains(&v.volid)
        {
            continue;
        }
        let permit = match seed_delete(ours, &v.volid, keep) {
            Ok(permit) => permit,
            Err(why) => {
                tracing::warn!(spec, volume = %v.volid, "{why}");
                continue;
            }
        };
        tracing::info!(spec, volume = %v.volid, "removing a seed image no VM uses any more");
        let result = match client.delete_volume(node, storage, &v.volid, &permit).await {
            Ok(Some(upid)) => client.wait_task(&upid, ctx.task_wait).await.map(|_| ()),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(spec, volume = %v.volid, error = %e, "cannot remove an old seed image");
        }
    }
}

/// Brings the VM's cloud-init in line with the spec. Never logs user-data or keys.
// Long because: PVE's options, then the seed image (built, uploaded, attached) or PVE's own
// drive, then one config update; the branches share the update being built.
#[allow(clippy::too_many_arguments)]
pub(super) async fn converge_cloud_init(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    vm_spec: &VmSpec,
    rec: &mut SpecRecord,
    ours: &VerifiedMarker,
    node: &str,
    cfg: &VmConfig,
) -> Result<CloudInitStep, ActionError> {
    let client = &site.client;
    let vmid = ours.vmid();
    let attached = seed_slots(cfg, &ctx.install_id, &spec.name);
    if vm_spec.cloud_init.is_none() && vm_spec.user_data.is_none() && attached.is_empty() {
        return Ok(CloudInitStep::Done(false));
    }
    let mut changed: Vec<String> = Vec::new();
    // Values waiting for the next start count as set (PVE keeps changes to a running VM's
    // cloud-init options pending).
    let effective = with_pending(cfg, client.vm_pending(node, GuestKind::Qemu, vmid).await?);
    let cfg = &effective;
    let mut params = cloud_init_params(vm_spec, cfg, VmParams::new(), &mut changed)?;
    let mut deletes: Vec<String> = Vec::new();
    // The gate's permit to detach PVE's cloud-init drive, when the seed takes its place.
    let mut drive_permit = None;
    let mut keep_seed: Option<(String, String)> = None; // (storage, volid)
    match &vm_spec.user_data {
        Some(_) => {
            let macs = nic_macs(
                cfg,
                vm_spec.cloud_init.as_ref().map_or(0, |c| c.ip_config.len()),
            );
            let Some(seed) = crate::cloudinit::build_seed(&ctx.install_id, spec, &rec.uid, &macs)
            else {
                return Ok(CloudInitStep::Done(false));
            };
            // PVE's own drive would be a second `cidata` volume: cloud-init would pick either.
            // It goes in the update that attaches the seed, which PVE refuses on a protected VM.
            let drive = cloudinit_drive_slot(cfg);
            if let Some(slot) = &drive {
                let protection = super::vm::protection_of(spec, cfg);
                drive_permit =
                    Some(cloudinit_drive_removal(ours, protection, slot).map_err(protected)?);
            }
            let storage = seed_storage(client, spec, vm_spec).await?;
            let volid = iso_volid(&storage, &seed.file_name);
            // Attached (or kept attached) only as the file proxsync uploaded; anything else
            // under the seed's name is overwritten by a new upload first.
            let mut listing = client.storage_content(node, &storage, Some("iso")).await?;
            let listed = listing.iter().find(|v| v.volid == volid);
            let check = seed_on_storage(&volid, listed, rec.seed_upload(&volid));
            if let SeedCheck::Upload { found } = check {
                if let Some(why) = found {
                    tracing::warn!(spec = %spec.name, vmid, volume = %volid, "{why}");
                    rec.note(ctx.clock.now_ms(), "seed uploaded again", &why.to_string());
                }
                tracing::info!(spec = %spec.name, vmid, volume = %volid, bytes = seed.image.len(), "uploading the cloud-init seed image");
                let upid = client
                    .upload_iso(node, &storage, &seed.file_name, &seed.image, &seed.sha256)
                    .await?;
                if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
                    return Ok(CloudInitStep::Running(upid.to_string()));
                }
                listing = client.storage_content(node, &storage, Some("iso")).await?;
                let listed = listing.iter().find(|v| v.volid == volid);
                let upload = seed_uploaded(&volid, seed.image.len() as u64, listed)
                    .map_err(|why| fail(Category::Conflict, why))?;
                let seeds = &mut rec.volumes_mut().seeds;
                seeds.retain(|s| s.volid != volid);
                seeds.push(upload);
            }
            let slot = match attached.first() {
                Some((slot, _)) => Some(slot.as_str()),
                None => free_seed_slot(cfg),
            };
            let Some(slot) = slot else {
                return Err(blocked(Blocked::NoFreeSlot {
                    vmid,
                    drive: SlotFor::SeedCdrom,
                }));
            };
            if attached.first().map(|(_, v)| v.as_str()) != Some(volid.as_str()) {
                // The gate's permit: the file the storage lists is the one proxsync uploaded.
                let listed = listing.iter().find(|v| v.volid == volid);
                let permit = seed_attach(ours, slot, &volid, listed, rec.seed_upload(&volid))
                    .map_err(|why| fail(Category::Conflict, why))?;
                params = params.attach_seed(&permit)?;
                changed.push(
                    if attached.is_empty() {
                        "seed attached"
                    } else {
                        "userData changed"
                    }
                    .into(),
                );
            }
            for (other, _) in attached.iter().skip(1) {
                params = params.set(other, EJECTED);
            }
            deletes.extend(drive);
            // Only this seed's upload is kept on record: the others are removed below, and
            // one of them wanted again is uploaded again.
            if let Some(v) = rec.volumes.as_mut() {
                v.seeds.retain(|s| s.volid == volid);
            }
            keep_seed = Some((storage, volid));
        }
        None => {
            if let Some(v) = rec.volumes.as_mut() {
                v.seeds.clear();
            }
            rec.tidy_volumes();
            // Ejected rather than removed: a CD-ROM's medium changes at once on a running VM,
            // where removing the drive would wait for a reboot (and keep the image in use).
            for (slot, _) in &attached {
                params = params.set(slot, EJECTED);
                changed.push("userData removed".into());
            }
            if vm_spec.cloud_init.is_some() && cloudinit_drive_slot(cfg).is_none() {
                let Some(slot) = free_slot(cfg, &CLOUDINIT_DRIVE_SLOTS) else {
                    return Err(blocked(Blocked::NoFreeSlot {
                        vmid,
                        drive: SlotFor::CloudInitDrive,
                    }));
                };
                params = params.cloudinit_drive(slot, spec.root_storage())?;
                changed.push("cloud-init drive".into());
            }
        }
    }
    deletes.sort();
    deletes.dedup();
    if let Some(permit) = &drive_permit
        && !deletes.is_empty()
    {
        params = params.detach(permit)?;
    }
    if !changed.is_empty() || !deletes.is_empty() {
        // Names of what changed only: never values (keys, user-data).
        tracing::info!(spec = %spec.name, vmid, changed = %changed.join(","), removed = %deletes.join(","), "updating cloud-init");
        // `POST .../config`: a new cloud-init drive allocates a volume, and PVE does that in a
        // task (the synchronous PUT is for changes that allocate nothing).
        if let Some(upid) = client.set_config_async(node, vmid, &params, None).await?
            && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
        {
            return Ok(CloudInitStep::Running(upid.to_string()));
        }
    }
    // Seeds of this spec that the VM no longer uses.
    let swapped = attached
        .iter()
        .any(|(_, v)| keep_seed.as_ref().is_none_or(|(_, k)| k != v));
    if swapped || (keep_seed.is_some() && !changed.is_empty()) {
        remove_unused_seeds(ctx, client, node, ours, &attached, keep_seed.as_ref()).await?;
    }
    Ok(CloudInitStep::Done(
        !changed.is_empty() || !deletes.is_empty(),
    ))
}

/// Removes this spec's seed images from the storages of the `attached` seeds and of
/// `keep_seed`, except any image the VM still names, now or at its next start.
async fn remove_unused_seeds(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    node: &str,
    ours: &VerifiedMarker,
    attached: &[(String, String)],
    keep_seed: Option<&(String, String)>,
) -> Result<(), ActionError> {
    let vmid = ours.vmid();
    let old_storages: Vec<String> = attached
        .iter()
        .filter_map(|(_, v)| v.split_once(':').map(|(s, _)| s.to_string()))
        .chain(keep_seed.iter().map(|(s, _)| s.clone()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    // Never an image the VM still names, now or at its next start.
    let in_use: Vec<String> = client
        .vm_pending(node, GuestKind::Qemu, vmid)
        .await?
        .into_iter()
        .flat_map(|p| [p.value, p.pending])
        .flatten()
        .filter_map(|v| {
            v.as_str()
                .map(|s| s.split(',').next().unwrap_or_default().to_string())
        })
        .filter(|v| crate::cloudinit::is_seed_of(v, ours.install(), ours.spec()))
        .collect();
    for storage in &old_storages {
        remove_old_seeds(ctx, client, node, storage, ours, &in_use).await;
    }
    Ok(())
}

/// The volume id of `file` in `storage`'s iso content, as PVE names it.
fn iso_volid(storage: &str, file: &str) -> String {
    format!("{storage}:iso/{file}")
}
