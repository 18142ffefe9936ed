//! What a container's actions do differently from a VM's: its create request
//! (`POST /nodes/{node}/lxc` from a `vztmpl` archive, or a clone of a CT template), its
//! converge (pve-container's options, the root filesystem and mount points grown with
//! `resize`, a removed mount point detached to `unusedN` under the gate's permit), and its
//! move to another node (a restart migration: a container cannot move live). Everything else
//! (the intent before the create, the task waits, the marker read again before each change,
//! power, reboots, removal) is the VM's code, addressed by [`crate::guest::GuestKind`].

use crate::pve::types::VmConfig;
use crate::pve::values::pve_size;
use crate::pve::{CloneRequest, Error as PveError, Pve, TaskOutcome, Upid};
use crate::spec::container::PasswordSource;
use crate::spec::{PowerState, Spec};
use crate::store::{SpecRecord, VmState};

use super::identity::{desired_tags, marker};
use super::preflight::Source;
use super::reboot::{pending_keys, reboot_if_due};
use super::vm::{check_lock, power_off, protection_of, read_own_config, settle_ha};
use super::{ActionError, ExecCtx, Outcome, SiteCtx, VmRef, protected, site, wait};

/// The create or clone request of a new container; the intent is durable before it is sent
/// (`create::create`). Its identity (hostname and marker; tags where PVE takes them) travels
/// in the request, so a finished create is recognisable without a second request.
pub(super) async fn send_create(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    rec: &SpecRecord,
    vmid: u32,
    source: &Source,
) -> Result<Upid, PveError> {
    let signed = marker(ctx, spec, rec, vmid);
    let description = match &spec.hardware.description {
        Some(text) => signed.replace_in(text),
        None => signed.description(),
    };
    match source {
        Source::Clone {
            template,
            template_node,
        } => {
            let req = CloneRequest {
                newid: vmid,
                name: spec.vm_name.clone(),
                description,
                full: true,
                storage: Some(spec.storage.clone()),
                target: (template_node != &spec.node).then(|| spec.node.clone()),
                pool: spec.hardware.pool.clone(),
            };
            site.client.clone_ct(template_node, *template, &req).await
        }
        Source::OsTemplate { volume } => {
            let mut params = crate::render::container::create_params(
                spec,
                description,
                &desired_tags(ctx, spec),
            )?
            .checked("ostemplate", volume)?;
            if let Some(password) = root_password(spec)? {
                params = params.secret("password", password.expose());
            }
            site.client.create_ct(&spec.node, vmid, &params).await
        }
        Source::Import { .. } | Source::Iso { .. } => Err(PveError::Setup(format!(
            "spec {}: a container is made from a vztmpl archive or a CT template, not a disk image",
            spec.name
        ))),
    }
}

/// The root password a container spec names (from its file or systemd credential), read
/// right before the create; never logged, never kept.
fn root_password(spec: &Spec) -> Result<Option<crate::config::Secret>, PveError> {
    let Some(source) = spec.container.as_ref().and_then(|c| c.password.as_ref()) else {
        return Ok(None);
    };
    let read = match source {
        PasswordSource::File(path) => {
            crate::config::read_credential(Some(std::path::Path::new(path)), "", "root password")
        }
        PasswordSource::Credential(name) => {
            crate::config::read_credential(None, name, "root password")
        }
    };
    read.map(Some).map_err(|why| {
        PveError::Setup(format!(
            "spec {}: spec.forProvider.password: {why}",
            spec.name
        ))
    })
}

// Long because: the converge steps in their request order (config, pool, mount points, root
// filesystem, power, what waits for the next start), each of which may end the action early.
/// Brings an existing container in line with its spec, after verifying it is the spec's.
pub(super) async fn converge(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    just_created: bool,
) -> Result<Outcome, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let site = site(ctx, vm.site)?;
    let client = &site.client;
    let (cfg, ours) = read_own_config(ctx, client, vm, spec, rec).await?;
    if let Some(waiting) = check_lock(ctx, site, node, kind, vmid, &cfg).await? {
        return Ok(waiting);
    }
    let pending = if just_created {
        Vec::new()
    } else {
        client.vm_pending(node, kind, vmid).await?
    };
    let (mut params, mut changed) = crate::render::container::container_changes(
        &ctx.marker_key,
        &ctx.install_id,
        spec,
        rec,
        &ours,
        &cfg,
        &pending,
    )
    .map_err(ActionError::from)?;
    // A mount point leaving `mountPoints` is detached (its volume kept as `unusedN`), under
    // the gate's permit; a protected container keeps it (PVE would refuse the whole update).
    let protection = protection_of(spec, &cfg);
    let removed = crate::render::container::mount_points_removed(spec, &cfg);
    let mut held = Vec::new();
    if !removed.is_empty() {
        match crate::gate::volume::detach(&ours, protection, &removed) {
            Ok(permit) => {
                params = params.detach(&permit)?;
                changed.push("mountPoints");
            }
            Err(_) => held = removed,
        }
    }
    if !changed.is_empty() {
        tracing::info!(spec = %spec.name, vmid, changed = %changed.join(","), "updating the container config");
        client
            .set_config(node, kind, vmid, &params, cfg.digest())
            .await?;
    }
    rec.applied_tags = spec.tags.clone();
    rec.applied_protection = spec.hardware.protection;
    if let Some(pool) = &spec.hardware.pool
        && !client.pool_vmids(pool).await?.contains(&vmid)
    {
        client.move_to_pool(pool, vmid).await?;
        changed.push("pool");
    }
    if let Some(o) = grow(ctx, client, vm, spec, rec, &cfg).await? {
        return Ok(o);
    }
    let is_running = !just_created && client.vm_running(node, kind, vmid).await?;
    match spec.power_state {
        PowerState::Running if !is_running => {
            let upid = client.start_vm(node, kind, vmid).await?;
            if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(Outcome::StillRunning {
                    upid: upid.to_string(),
                });
            }
            if let Some(o) = settle_ha(ctx, client, node, kind, vmid, &upid, true).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(o);
            }
            changed.push("power");
        }
        PowerState::Stopped if is_running => {
            if let Some(o) = power_off(ctx, site, node, kind, vmid, rec).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(o);
            }
            changed.push("power");
        }
        _ => {}
    }
    // pve-container keeps a running container's changes it cannot hot-plug pending until the
    // next start; the reboot policy decides when that is.
    let pending = if changed.is_empty() {
        pending
    } else if is_running {
        client.vm_pending(node, kind, vmid).await?
    } else {
        Vec::new()
    };
    rec.reboot_pending = pending_keys(&pending);
    if is_running && let Some(o) = reboot_if_due(ctx, site, vm, spec, rec).await? {
        ctx.store.put(&spec.name, rec)?;
        return Ok(o);
    }
    // The container's addresses, as PVE reads them from its network namespace (best effort).
    rec.ip_addresses = if spec.power_state == PowerState::Running && !changed.contains(&"power") {
        client
            .guest_interfaces(node, kind, vmid)
            .await
            .map(|ifaces| super::converge::guest_addresses(&ifaces))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    if let Err(why) = crate::gate::volume::drive_removal(vmid, protection, &held, &[]) {
        return Err(protected(why));
    }
    rec.applied_hash = Some(crate::spec::spec_hash(spec));
    rec.applied_content = Some(crate::spec::content_hash(spec));
    rec.provisioned = true;
    let here = VmState::Exists {
        vmid,
        node: node.to_string(),
    };
    if rec.vm != here {
        ctx.store.transition(&spec.name, rec, here)?;
    }
    Ok(Outcome::Done)
}

/// The root filesystem and the mount points grown to the spec's sizes (`PUT .../resize`, a
/// task; they only grow). `Some` when a resize outlived the wait.
async fn grow(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
) -> Result<Option<Outcome>, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let mut resizes: Vec<(String, u64, u64)> =
        crate::render::container::mount_points_to_grow(spec, cfg)
            .into_iter()
            .filter_map(|(slot, now)| {
                let want = spec
                    .container
                    .as_ref()?
                    .mount_points
                    .as_ref()?
                    .iter()
                    .find(|mp| mp.slot == slot)?
                    .size_bytes;
                Some((slot, now, want))
            })
            .collect();
    if let Some(now) = crate::render::container::rootfs_to_grow(spec, rec, cfg) {
        resizes.insert(0, ("rootfs".to_string(), now, spec.disk_bytes));
    }
    for (disk, from, to) in resizes {
        tracing::info!(spec = %spec.name, vmid, disk = %disk, from, to, "growing the container's volume");
        let resize = client
            .resize_disk(node, kind, vmid, &disk, &pve_size(to), None)
            .await?;
        if let Some(upid) = resize
            && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
        {
            ctx.store.put(&spec.name, rec)?;
            return Ok(Some(Outcome::StillRunning {
                upid: upid.to_string(),
            }));
        }
        if disk == "rootfs" {
            rec.applied_disk_bytes = Some(spec.disk_bytes);
        }
    }
    Ok(None)
}
