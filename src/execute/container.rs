//! What a container's actions do differently from a VM's: its create request
//! (`POST /nodes/{node}/lxc` from a `vztmpl` archive, or a clone of a CT template), its
//! converge (pve-container's options, the root filesystem and mount points grown with
//! `resize`, a removed mount point detached to `unusedN` under the gate's permit), and its
//! move to another node (a restart migration: a container cannot move live). Everything else
//! (the intent before the create, the task waits, the marker read again before each change,
//! power, reboots, removal) is the VM's code, addressed by [`crate::guest::GuestKind`].

use crate::category::Category;
use crate::gate::volume::{self as gate, SlotHolds};
use crate::pve::texts::{self, Meaning};
use crate::pve::types::VmConfig;
use crate::pve::values::pve_size;
use crate::pve::{Error as PveError, Pve, TaskOutcome, Upid};
use crate::spec::container::PasswordSource;
use crate::spec::{ContainerSpec, Spec};
use crate::store::{DestroyState, SpecRecord};

use super::create::clone_request;
use super::identity::{desired_tags, marker};
use super::preflight::Source;
use super::vm::{check_lock, protection_of, read_own_config};
use super::{ActionError, ExecCtx, Outcome, SiteCtx, VmRef, blocked, fail, site, wait};
use crate::guest::GuestKind;
use crate::model::{Blocked, Note, Unfit};

/// The create or clone request of a new container; the intent is durable before it is sent
/// (`create::create`). Its identity (hostname and marker; tags where PVE takes them) travels
/// in the request, so a finished create is recognisable without a second request.
pub(super) async fn send_create(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    ct: &ContainerSpec,
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
            let req = clone_request(spec, vmid, description, template_node);
            site.client.clone_ct(template_node, *template, &req).await
        }
        Source::OsTemplate { volume } => {
            let mut params = crate::render::container::create_params(
                spec,
                ct,
                description,
                &desired_tags(ctx, spec),
            )?
            .checked("ostemplate", volume)?;
            if let Some(password) = root_password(&ctx.password_files, spec, ct)? {
                params = params.secret("password", password.expose());
            }
            site.client.create_ct(&spec.node, vmid, &params).await
        }
        // `create` has the image pulled before the intent (`oci::pull`).
        Source::Import { .. } | Source::Iso { .. } | Source::OciPull { .. } => {
            Err(PveError::Setup(
                Unfit::WrongSource {
                    spec: spec.name.to_string(),
                    kind: GuestKind::Lxc,
                }
                .to_string(),
            ))
        }
    }
}

/// Refuses a spec that names PVE 9.1's container options (`entrypoint`, `env`, a NIC's
/// `hostManaged`) on an older site, before any request that would carry them: its
/// pve-container would refuse them as unknown parameters (`spec::ct_init::refusal`). The
/// site's version is read once per run.
pub(super) async fn check_init_options(
    site: &SiteCtx<impl Pve>,
    ct: &ContainerSpec,
) -> Result<(), ActionError> {
    let named = crate::spec::ct_init::named(ct);
    if named.is_empty() {
        return Ok(());
    }
    let version = site.version().await?;
    match crate::spec::ct_init::refusal(&named, version.triple(), &version.version) {
        Some(why) => Err(fail(Category::ApiNotSupported, why)),
        None => Ok(()),
    }
}

/// The shortest root password pve-container takes (its create's `password`: `minLength => 5`).
const MIN_PASSWORD_CHARS: usize = 5;

/// The root password a container spec names (from its file or systemd credential), read
/// right before the create; never logged, never kept. Only from where the config allows
/// (`config::PasswordFiles`: a file in `container_password_dir`, never one of proxsync's own
/// secrets, compared by identity). One PVE would refuse (shorter than [`MIN_PASSWORD_CHARS`])
/// is refused here, before any request, its length and never its text said.
fn root_password(
    files: &crate::config::PasswordFiles,
    spec: &Spec,
    ct: &ContainerSpec,
) -> Result<Option<crate::config::Secret>, PveError> {
    let Some(source) = &ct.password else {
        return Ok(None);
    };
    let read = match source {
        PasswordSource::File(path) => files.read(path),
        PasswordSource::Credential(name) => files.read_credential(name),
    };
    let setup = |why: Unfit| PveError::Setup(why.to_string());
    let password = read.map_err(|why| {
        setup(Unfit::PasswordUnreadable {
            spec: spec.name.to_string(),
            why,
        })
    })?;
    let chars = password.expose().chars().count();
    if chars < MIN_PASSWORD_CHARS {
        return Err(setup(Unfit::PasswordShort {
            spec: spec.name.to_string(),
            from: source.clone(),
            chars,
            min: MIN_PASSWORD_CHARS,
        }));
    }
    Ok(Some(password))
}

/// Brings an existing container in line with its spec, after verifying it is the spec's: its
/// own steps (config, mount points, volumes, pool, root filesystem, HA), then [`super::converge::finish`]'s.
pub(super) async fn converge(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    ct: &ContainerSpec,
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
    check_init_options(site, ct).await?;
    let pending = if just_created {
        Vec::new()
    } else {
        client.vm_pending(node, kind, vmid).await?
    };
    let (params, mut changed) = crate::render::container::container_changes(
        &ctx.marker_key,
        &ctx.install_id,
        spec,
        ct,
        rec,
        &ours,
        &cfg,
        &pending,
    )
    .map_err(ActionError::from)?;
    // `destroyVolumes`: each slot's destroy bound, durably, to the volume it holds before the
    // detach below moves it to `unusedN`.
    bind_volume_destroys(ctx, vmid, spec, ct, rec, &cfg, &pending)?;
    let mut snapshotted = None;
    if !changed.is_empty() {
        match super::change::guard(ctx, site, vm, spec, rec, &params, just_created).await? {
            super::change::Guarded::Ended(o) => return Ok(o),
            super::change::Guarded::Snapshotted(c) => snapshotted = Some(c),
            super::change::Guarded::Unchanged => {}
        }
    }
    let digest = snapshotted.as_ref().unwrap_or(&cfg).digest();
    if !changed.is_empty() {
        tracing::info!(spec = %spec.name, vmid, changed = %changed.join(","), "updating the container config");
        client.set_config(node, kind, vmid, &params, digest).await?;
    }
    // Mount points added or detached in a request of their own, after the update above made
    // the spec's `protection` the container's: pve-container checks every added, changed or
    // removed mount point against the config as it is (`check_protection`) and refuses the
    // whole update for one. A protected container keeps them as they are (said in its status).
    let protection = protection_of(spec, &cfg);
    let mut held = Vec::new();
    match mount_points(client, &ours, vm, spec, ct, &cfg, protection).await? {
        MountStep::Done(true) => changed.push("mountPoints"),
        MountStep::Done(false) => {}
        MountStep::Held(slots) => held = slots,
    }

    rec.applied_tags = spec.tags.clone();
    rec.applied_protection = spec.hardware.protection;
    if destroy_detached(ctx, client, &ours, vm, spec, rec, protection, &mut held).await? {
        changed.push("volumes destroyed");
    }
    if let Some(pool) = &spec.hardware.pool
        && !client.pool_vmids(pool).await?.contains(&vmid)
    {
        client.move_to_pool(pool, vmid).await?;
        changed.push("pool");
    }
    if let Some(o) = grow(ctx, client, vm, spec, ct, rec, &cfg).await? {
        return Ok(o);
    }
    // The HA resource before the power step: the HA manager then owns starts and stops.
    if super::ha::converge_ha(ctx, site, &ours, spec, rec).await? {
        changed.push("ha");
    }
    let held = match held.is_empty() {
        true => Ok(()),
        false => Err(blocked(Blocked::MountPointsHeld {
            vmid,
            managed: protection.managed == Some(true),
            held,
        })),
    };
    let tail = super::converge::Tail {
        waits: (HOSTNAME_PENDING, changed.contains(&"hostname")),
        changed,
        pending,
        just_created,
        held,
        make_template: false,
    };
    super::converge::finish(ctx, site, vm, spec, rec, tail).await
}

/// The `reboot_pending` key of a hostname a running container has only at its next start
/// (status: RebootPending): changed while it ran, by this converge or one before it, and not
/// started since. pve-container takes `hostname` into the config at once
/// (`src/PVE/LXC/Config.pm` `$LXC_FASTPLUG_OPTIONS`) and so lists nothing pending, but the
/// guest gets it only at its next start: the kernel's name from the generated `lxc.uts.name`
/// (`src/PVE/LXC.pm` `update_lxc_config`), `/etc/hostname` and `/etc/hosts` from the pre-start
/// hook (`src/lxc-pve-prestart-hook`, `PVE::LXC::Setup::Base` `pre_start_hook` ->
/// `set_hostname`). A start (a reboot by proxsync, or a converge's) clears it; a restart by
/// hand is not seen, and a reboot the policy allows then restarts it once more.
pub(super) const HOSTNAME_PENDING: &str = "hostname";

/// The root filesystem and the mount points grown to the spec's sizes (`PUT .../resize`, a
/// task; they only grow). `Some` when a resize outlived the wait. pve-container compares the
/// volume's real size, not the config's `size=`, and refuses a resize to it `disk is already
/// at specified size` (API2/LXC.pm resize_vm, before its task and again in it): that volume is
/// at the spec's size, done.
async fn grow(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec: &Spec,
    ct: &ContainerSpec,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
) -> Result<Option<Outcome>, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let mut resizes: Vec<(String, u64, u64)> =
        crate::render::container::mount_points_to_grow(ct, cfg)
            .into_iter()
            .filter_map(|(slot, now)| {
                let want = ct
                    .mount_points
                    .as_ref()?
                    .iter()
                    .find(|mp| mp.slot == slot)?
                    .size_bytes;
                Some((slot, now, want))
            })
            .collect();
    if let Some(now) = crate::render::container::rootfs_to_grow(ct, rec, cfg) {
        resizes.insert(0, ("rootfs".to_string(), now, ct.rootfs_bytes));
    }
    for (disk, from, to) in resizes {
        tracing::info!(spec = %spec.name, vmid, disk = %disk, from, to, "growing the container's volume");
        let resize = match client
            .resize_disk(node, kind, vmid, &disk, &pve_size(to), None)
            .await
        {
            Err(e) if e.meaning() == Some(Meaning::AlreadyAtSize) => None,
            other => other?,
        };
        let waited = match resize {
            Some(upid) => Some((wait(ctx, client, &upid, rec).await, upid)),
            None => None,
        };
        match waited {
            Some((Ok(TaskOutcome::StillRunning), upid)) => {
                ctx.store.put(&spec.name, rec)?;
                return Ok(Some(Outcome::StillRunning {
                    upid: upid.to_string(),
                }));
            }
            Some((Err(e), _))
                if !(e.task_failed
                    && texts::meaning(&e.error.message) == Some(Meaning::AlreadyAtSize)) =>
            {
                return Err(e.into());
            }
            _ => {}
        }
        if disk == "rootfs" {
            rec.applied_disk_bytes = Some(spec.root_disk_bytes());
        }
    }
    Ok(None)
}

/// The volume a container's mount point value names (`local-lvm:vm-101-disk-1,mp=/srv`), or
/// what it is when proxsync never destroys it (a bind mount of a host path, a device).
fn mount_volume(value: &str) -> SlotHolds<'_> {
    let volume = value.split(',').next().unwrap_or_default();
    if volume.starts_with('/') {
        SlotHolds::Kept("bind or device mount")
    } else if volume.contains(':') {
        SlotHolds::Disk(volume)
    } else {
        SlotHolds::Nothing
    }
}

/// The `unusedN` entry holding `volume`, if any.
fn unused_holding<'c>(cfg: &'c VmConfig, volume: &str) -> Option<&'c str> {
    cfg.values
        .iter()
        .find(|(k, v)| k.starts_with("unused") && v.split(',').next() == Some(volume))
        .map(|(k, _)| k.as_str())
}

/// `destroyVolumes`, first step: each listed slot's destroy bound to the volume it holds when
/// first applied (the gate's [`gate::destroy`]: a slot listed before the record followed the
/// container is bound to nothing and never destroyed), recorded before anything is detached.
/// A slot detached already holds its bound volume in an `unusedN` entry.
fn bind_volume_destroys(
    ctx: &ExecCtx<impl Pve>,
    vmid: u32,
    spec: &Spec,
    ct: &ContainerSpec,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
    pending: &[crate::pve::types::PendingEntry],
) -> Result<(), ActionError> {
    let slots = &ct.destroy_volumes;
    let followed = rec.destroy_disks_vmid == Some(vmid);
    if let Some(v) = rec.volumes.as_mut() {
        v.destroys.retain(|d| followed && slots.contains(&d.slot));
    }
    let now = ctx.clock.now_ms();
    let mut newly_bound = false;
    for slot in slots {
        let bound_volume = rec
            .disk_destroy(slot)
            .filter(|b| b.state == DestroyState::Bound)
            .and_then(|b| b.volume.clone());
        // A running container's detach waits for its next start, and `GET .../config` shows
        // the slot as it will be (gone): its pending entry still names the volume it holds.
        let pending_value = pending
            .iter()
            .find(|p| &p.key == slot && p.delete == Some(true))
            .and_then(|p| p.value.as_ref())
            .and_then(|v| v.as_str());
        let holds = match cfg.get(slot).or(pending_value) {
            Some(value) => mount_volume(value),
            None => match bound_volume.as_deref() {
                Some(v) if unused_holding(cfg, v).is_some() => SlotHolds::Disk(v),
                _ => SlotHolds::Nothing,
            },
        };
        let before = rec.disk_destroy(slot).cloned();
        let step = gate::destroy(
            spec.kind(),
            vmid,
            slot,
            holds,
            before.as_ref(),
            followed,
            now,
        )
        .map_err(|why| fail(Category::ConfigurationError, why.to_string()))?;
        if let Some(note) = &step.note {
            let note = note.to_string();
            tracing::warn!(spec = %spec.name, vmid, slot = %slot, "{note}");
            rec.note(now, "destroyVolumes", &note);
        }
        newly_bound |= step.binding.state == DestroyState::Bound
            && before
                .as_ref()
                .is_none_or(|b| b.state != DestroyState::Bound);
        let destroys = &mut rec.volumes_mut().destroys;
        destroys.retain(|d| &d.slot != slot);
        destroys.push(step.binding);
    }
    rec.destroy_disks_vmid = Some(vmid);
    rec.tidy_volumes();
    if newly_bound {
        // Durable before the detach that follows: a crash after it resolves by what the slot
        // (or its `unusedN` entry) holds then.
        ctx.store.put(&spec.name, rec)?;
    }
    Ok(())
}

/// `destroyVolumes`, second step: each bound volume found detached (in an `unusedN` entry of
/// a config read now) is freed, under the gate's permit bound to it, in one update sent with
/// that read's digest. A running container's detach waits for its next start; its volume is
/// freed by the converge after it. `true` when a volume was freed.
#[allow(clippy::too_many_arguments)]
async fn destroy_detached(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    ours: &crate::gate::identity::VerifiedMarker,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    protection: crate::gate::volume::Protection,
    held: &mut Vec<String>,
) -> Result<bool, ActionError> {
    let bound: Vec<(String, String)> = rec
        .volumes
        .iter()
        .flat_map(|v| v.destroys.iter())
        .filter(|d| d.state == DestroyState::Bound)
        .filter_map(|d| Some((d.slot.clone(), d.volume.clone()?)))
        .collect();
    if bound.is_empty() {
        return Ok(false);
    }
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let now_cfg = client.vm_config(node, kind, vmid).await?;
    let mut params = crate::pve::VmParams::default();
    let mut freed = Vec::new();
    for (slot, volume) in &bound {
        let Some(unused) = unused_holding(&now_cfg, volume) else {
            continue;
        };
        match gate::destroy_unused(
            ours,
            slot,
            unused,
            volume,
            rec.disk_destroy(slot),
            protection,
        ) {
            Ok(permit) => {
                params = params.destroy_unused(&permit)?;
                freed.push((slot.clone(), volume.clone()));
            }
            Err(_) if protection.on => held.push(slot.clone()),
            Err(why) => return Err(fail(Category::Conflict, why)),
        }
    }
    if freed.is_empty() {
        return Ok(false);
    }
    tracing::warn!(spec = %spec.name, vmid, volumes = ?freed, "destroying detached volumes (destroyVolumes)");
    client
        .set_config(node, kind, vmid, &params, now_cfg.digest())
        .await?;
    let now = ctx.clock.now_ms();
    for (slot, volume) in &freed {
        if let Some(d) = rec
            .volumes
            .as_mut()
            .and_then(|v| v.destroys.iter_mut().find(|d| &d.slot == slot))
        {
            d.state = DestroyState::Destroyed;
            d.at_ms = now;
        }
        rec.note(
            now,
            "volume destroyed",
            &Note::VolumeDestroyed {
                kind: GuestKind::Lxc,
                slot: slot.clone(),
                volume: volume.clone(),
            }
            .to_string(),
        );
    }
    Ok(true)
}

/// What the mount point step did.
enum MountStep {
    /// `true`: a mount point was added or detached.
    Done(bool),
    /// The container is protected: these slots are kept as they are.
    Held(Vec<String>),
}

/// The mount points `mountPoints` adds, and those it no longer lists detached (PVE keeps
/// their volumes as `unusedN`) under the gate's permit, in one update sent with a config read
/// now. Not on a protected container, whose mount points PVE refuses to touch.
async fn mount_points(
    client: &impl Pve,
    ours: &crate::gate::identity::VerifiedMarker,
    vm: VmRef<'_>,
    spec: &Spec,
    ct: &ContainerSpec,
    cfg: &VmConfig,
    protection: crate::gate::volume::Protection,
) -> Result<MountStep, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let added = crate::render::container::mount_point_additions(ct, cfg);
    let removed = crate::render::container::mount_points_removed(ct, cfg);
    if added.is_empty() && removed.is_empty() {
        return Ok(MountStep::Done(false));
    }
    if protection.on {
        let mut slots: Vec<String> = added.iter().map(|(slot, _)| slot.clone()).collect();
        slots.extend(removed);
        return Ok(MountStep::Held(slots));
    }
    let mut params = crate::pve::VmParams::default();
    for (_, mp) in &added {
        params = crate::render::container::mount_point(params, mp)?;
    }
    if !removed.is_empty() {
        let permit = crate::gate::volume::detach(ours, protection, &removed)
            .map_err(|why| fail(Category::Conflict, why))?;
        params = params.detach(&permit)?;
    }
    let now = client.vm_config(node, kind, vmid).await?;
    tracing::info!(spec = %spec.name, vmid, added = added.len(), detached = ?removed, "updating the container's mount points");
    client
        .set_config(node, kind, vmid, &params, now.digest())
        .await?;
    Ok(MountStep::Done(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules of a config allowing password files in `dir`.
    fn allowing(dir: &std::path::Path) -> crate::config::PasswordFiles {
        let text = format!(
            "container_password_dir = \"{}\"\nstate_dir = \"{}\"\n\n[source]\npath = \"/srv/git/vms.git\"\n\n[[site]]\nname = \"s\"\nendpoint = \"https://pve.example:8006\"\ntoken_id = \"u@pve!t\"\n",
            dir.display(),
            dir.join("state").display()
        );
        let config = crate::config::Config::parse(&dir.join("proxsync.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        config.password_files()
    }

    fn spec_reading(path: &std::path::Path) -> Spec {
        let yaml = format!(
            "apiVersion: proxsync.io/v1\nkind: ProxmoxLXC\nmetadata:\n  name: dns-01\nspec:\n  \
             forProvider:\n    site: s\n    node: pve1\n    template: \
             local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst\n    password: {{file: {}}}\n",
            path.display()
        );
        let (specs, diags) = crate::spec::parse_file("t.yaml", yaml.as_bytes());
        assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
        specs.into_iter().next().expect("one spec")
    }

    /// A root password PVE would refuse (its create's `password` has `minLength` 5) is refused
    /// before the create, saying its length and never its text.
    #[test]
    fn a_root_password_shorter_than_pve_takes_is_refused_before_the_create() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ct-root");
        std::fs::write(&path, "abcd\n").unwrap();
        let why = root_password(
            &allowing(dir.path()),
            &spec_reading(&path),
            spec_reading(&path).container().unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            why.contains("has 4 characters") && why.contains("at least 5"),
            "{why}"
        );
        assert!(!why.contains("abcd"), "{why}");
        std::fs::write(&path, "abcde\n").unwrap();
        let ok = root_password(
            &allowing(dir.path()),
            &spec_reading(&path),
            spec_reading(&path).container().unwrap(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.expose(), "abcde");
    }
}
