//! Converging a VM's disks to its spec's `disks` (the changes from `render::disks`): one
//! config update adding, rewriting and detaching drives, a resize per disk to grow, and the
//! destroys `destroyDisks` names, each only as `gate::volume` allows.

use crate::category::Category;
use crate::gate::identity::VerifiedMarker;
use crate::gate::volume::{self as gate, Protection, SlotHolds};
use crate::pve::types::{PendingEntry, VmConfig};
use crate::pve::values::{DriveValue, pve_size};
use crate::pve::{Pve, TaskOutcome, VmParams};
use crate::spec::{Spec, VmSpec};
use crate::store::{DestroyState, SpecRecord};

use super::{ActionError, ExecCtx, VmRef, blocked, fail, wait};
use crate::guest::GuestKind;
use crate::model::{Blocked, Note};
use crate::render::current::{boot_disk, effective_value};
use crate::render::disks::disk_changes;

/// How the disk step ended.
pub(super) enum DiskStep {
    /// Done; whether anything changed.
    Done(bool),
    /// A task outlived the wait: its UPID.
    Running(String),
}

/// Brings the VM's disks to `spec.disks` (nothing for the short form): one `POST .../config`
/// adding, rewriting and detaching drives, then a resize per disk to grow. A detached disk is
/// noted in the spec's history (its volume stays as `unusedN`). A protected VM gets no detach
/// (PVE would refuse the whole update with it): its slots go to `held`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn converge_disks(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    ours: &VerifiedMarker,
    vm: VmRef<'_>,
    spec: &Spec,
    vm_spec: &VmSpec,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
    pending: &[PendingEntry],
    protection: Protection,
    held: &mut Vec<String>,
) -> Result<DiskStep, ActionError> {
    if vm_spec.disks.is_none() {
        return Ok(DiskStep::Done(false));
    }
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let effective = |key: &str| effective_value(cfg, pending, key);
    let pending_delete: Vec<String> = pending
        .iter()
        .filter(|p| p.delete == Some(true))
        .map(|p| p.key.clone())
        .collect();
    let mut keys: Vec<String> = cfg.values.keys().cloned().collect();
    keys.extend(
        pending
            .iter()
            .filter(|p| p.pending.is_some())
            .map(|p| p.key.clone()),
    );
    keys.sort();
    keys.dedup();
    let boot = boot_disk(cfg).map(|(k, _)| k);
    let mut changes = disk_changes(vm_spec, &effective, &keys, &pending_delete, boot.as_deref())
        .map_err(|why| fail(Category::ConfigurationError, why))?;
    // The gate's permit for the detach; none on a protected VM, whose drives stay.
    let mut detach = None;
    if !changes.detach.is_empty() {
        match gate::detach(ours, protection, &changes.detach) {
            Ok(permit) => detach = Some(permit),
            Err(_) => held.extend(changes.keep_detached()),
        }
    }
    if changes.is_empty() {
        return Ok(DiskStep::Done(false));
    }
    tracing::info!(spec = %spec.name, vmid, changed = %changes.changed.join(","), "updating the disks");
    let mut params = changes.params;
    if let Some(permit) = &detach {
        params = params.detach(permit)?;
    }
    if params != VmParams::default() {
        // `POST`: a new disk allocates a volume, which PVE does in a task. No digest: the
        // cloud-init step may have changed the config since `cfg` was read (as it sends none).
        if let Some(upid) = client.set_config_async(node, vmid, &params, None).await?
            && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
        {
            return Ok(DiskStep::Running(upid.to_string()));
        }
    }
    for slot in &changes.detach {
        let volume = cfg
            .get(slot)
            .map(|v| DriveValue::parse(v).volume)
            .unwrap_or_default();
        tracing::warn!(spec = %spec.name, vmid, slot = %slot, volume = %volume, "disk detached from the VM; its volume is kept");
        rec.note(
            ctx.clock.now_ms(),
            "disk detached",
            &Note::DriveDetached {
                vmid,
                slot: slot.clone(),
                volume,
            }
            .to_string(),
        );
    }
    for (slot, bytes) in &changes.grow {
        tracing::info!(spec = %spec.name, vmid, disk = %slot, to = bytes, "growing the disk");
        if let Some(upid) = client
            .resize_disk(node, kind, vmid, slot, &pve_size(*bytes), None)
            .await?
            && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
        {
            return Ok(DiskStep::Running(upid.to_string()));
        }
    }
    Ok(DiskStep::Done(true))
}

/// The decision for each `destroyDisks` slot of `vm_spec` (`gate::volume::destroy`), with the
/// volume the slot holds in `cfg` (a pending delete: none), judged by the record's bindings
/// (none when the record followed another VM). Pure: the converge applies it, `plan` shows it.
pub(crate) fn destroy_steps(
    kind: GuestKind,
    vmid: u32,
    vm_spec: &VmSpec,
    rec: &SpecRecord,
    cfg: &VmConfig,
    pending: &[PendingEntry],
    now_ms: u64,
) -> Vec<(
    String,
    Option<String>,
    Result<gate::DestroyStep, gate::VolumeRefusal>,
)> {
    let followed = rec.destroy_disks_vmid == Some(vmid);
    let boot = boot_disk(cfg).map(|(k, _)| k);
    let mut out = Vec::new();
    for slot in &vm_spec.destroy_disks {
        let pending_delete = pending
            .iter()
            .any(|p| &p.key == slot && p.delete == Some(true));
        let value = cfg
            .get(slot)
            .filter(|_| !pending_delete)
            .map(DriveValue::parse);
        let holds = match &value {
            None => SlotHolds::Nothing,
            Some(v) if v.is_cdrom_or_cloudinit() => SlotHolds::Kept("CD-ROM or cloud-init drive"),
            Some(_) if boot.as_deref() == Some(slot.as_str()) => SlotHolds::Kept("boot disk"),
            Some(v) => SlotHolds::Disk(&v.volume),
        };
        let binding = rec.disk_destroy(slot).filter(|_| followed);
        let step = gate::destroy(kind, vmid, slot, holds, binding, followed, now_ms);
        let volume = match holds {
            SlotHolds::Disk(v) => Some(v.to_string()),
            _ => None,
        };
        out.push((slot.clone(), volume, step));
    }
    out
}

/// Destroys the disks of `destroyDisks` the VM still has, each only when its destroy is bound
/// to the volume in its slot (`gate::volume::destroy`: the volume the slot held when the
/// destroy was first applied, recorded before the request; once done, never again):
/// `delete=<slots>` with `force=1` (qemu-server `vmconfig_delete_or_detach_drive` with
/// `$force`: the volume is deallocated, not kept as `unusedN`). Never the boot disk, a CD-ROM
/// or the cloud-init drive; nothing on a protected VM (its slots go to `held`). Each destroyed
/// disk, and a volume in a slot whose destroy no longer applies, is noted in the history.
// Long because: the bindings kept up to date slot by slot, then the one destroy request and
// what it destroyed, each step in its order.
#[allow(clippy::too_many_arguments)]
pub(super) async fn destroy_disks(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    ours: &VerifiedMarker,
    vm: VmRef<'_>,
    spec: &Spec,
    vm_spec: &VmSpec,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
    pending: &[PendingEntry],
    protection: Protection,
    held: &mut Vec<String>,
) -> Result<DiskStep, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let now = ctx.clock.now_ms();
    let followed = rec.destroy_disks_vmid == Some(vmid);
    if let Some(v) = rec.volumes.as_mut() {
        // Bindings belong to the VM the record followed, and to the slots still listed.
        v.destroys
            .retain(|d| followed && vm_spec.destroy_disks.contains(&d.slot));
    }
    // Each slot to destroy with the volume it holds, which its destroy is bound to.
    let mut bound: Vec<(String, String)> = Vec::new();
    for (slot, volume, step) in destroy_steps(kind, vmid, vm_spec, rec, cfg, pending, now) {
        let step = step.map_err(|why| fail(Category::ConfigurationError, why))?;
        if let Some(note) = &step.note {
            tracing::warn!(spec = %spec.name, vmid, slot = %slot, "{note}");
            rec.note(now, "destroyDisks", &note.to_string());
        }
        let destroys = &mut rec.volumes_mut().destroys;
        destroys.retain(|d| d.slot != slot);
        destroys.push(step.binding);
        if let (Some(_), Some(volume)) = (&step.destroy, volume) {
            bound.push((slot, volume));
        }
    }
    rec.destroy_disks_vmid = Some(vmid);
    rec.tidy_volumes();
    let slots: Vec<String> = bound.iter().map(|(slot, _)| slot.clone()).collect();
    if slots.is_empty() {
        return Ok(DiskStep::Done(false));
    }
    if gate::drive_removal(kind, vmid, protection, &[], &slots).is_err() {
        held.extend(slots);
        return Ok(DiskStep::Done(false));
    }
    // The bindings are durable before the request: a crash after it resolves by what the
    // slot holds then (`gate::volume::destroy`), never by destroying whatever is there.
    ctx.store.put(&spec.name, rec)?;
    // What the slots hold now, not when this converge began: the destroy is checked against a
    // fresh read and sent with its digest, so a disk swapped into a slot in between makes PVE
    // refuse the request rather than destroy that disk.
    let now_cfg = client.vm_config(node, kind, vmid).await?;
    // One permit per slot, each bound to the volume its recorded destroy names.
    let mut params = VmParams::default();
    for (slot, volume) in &bound {
        let holds = now_cfg.get(slot).map(DriveValue::parse);
        if holds.as_ref().map(|v| v.volume.as_str()) != Some(volume.as_str()) {
            return Err(blocked(Blocked::SlotChanged {
                vmid,
                slot: slot.clone(),
                volume: volume.clone(),
            }));
        }
        let permit = gate::destroy_drive(
            ours,
            slot,
            SlotHolds::Disk(volume),
            rec.disk_destroy(slot),
            protection,
        )
        .map_err(|why| fail(Category::Conflict, why))?;
        params = params.destroy_drive(&permit)?;
    }
    tracing::warn!(spec = %spec.name, vmid, slots = %slots.join(","), "destroying disks (destroyDisks)");
    if let Some(upid) = client
        .set_config_async(node, vmid, &params, now_cfg.digest())
        .await?
        && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
    {
        return Ok(DiskStep::Running(upid.to_string()));
    }
    for slot in &slots {
        let Some(d) = rec
            .volumes
            .as_mut()
            .and_then(|v| v.destroys.iter_mut().find(|d| &d.slot == slot))
        else {
            continue;
        };
        d.state = DestroyState::Destroyed;
        d.at_ms = now;
        let volume = d.volume.clone().unwrap_or_default();
        rec.note(
            now,
            "disk destroyed",
            &Note::VolumeDestroyed {
                kind: GuestKind::Qemu,
                slot: slot.clone(),
                volume,
            }
            .to_string(),
        );
    }
    Ok(DiskStep::Done(true))
}
