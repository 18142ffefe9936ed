//! Bringing an existing VM in line with its spec: config fields, cloud-init, disk size, power
//! state, and what waits for the next start.

use crate::gate::identity::VerifiedMarker;
use crate::model::Wait;
use crate::pve::types::{PendingEntry, VmConfig};
use crate::pve::values::pve_size;
use crate::pve::{Pve, TaskOutcome, VmParams};
use crate::spec::spec_hash;
use crate::spec::{Guest, PowerState, Spec, VmSpec};
use crate::store::{SpecRecord, VmState};

use super::cloud_init::{CloudInitStep, converge_cloud_init};
use super::identity::{checked_site, verified};
use super::reboot::{pending_keys, reboot_if_due};
use super::vm::{PowerStep, check_lock, converge_power, protection_of, read_own_config};
use super::{ActionError, CLOUDINIT_PENDING, ExecCtx, Outcome, SiteCtx, VmRef, site, wait};
use crate::render::current::boot_disk;

/// Brings an existing VM in line with its spec, after verifying it is the spec's.
pub(super) async fn converge(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    match &spec.guest {
        Guest::Vm(vm_spec) => converge_vm(ctx, vm, spec, vm_spec, rec, false).await,
        Guest::Container(ct) => super::container::converge(ctx, vm, spec, ct, rec, false).await,
    }
}

/// [`converge`] for a VM this action's own create or clone task has just made (and which PVE
/// leaves stopped, with nothing pending): its pending values and power state are not read.
pub(super) async fn converge_new(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    match &spec.guest {
        Guest::Vm(vm_spec) => converge_vm(ctx, vm, spec, vm_spec, rec, true).await,
        Guest::Container(ct) => super::container::converge(ctx, vm, spec, ct, rec, true).await,
    }
}

// Long because: the converge steps in their request order (config, cloud-init, disk, power,
// what waits for the next start), each of which may end the action early.
async fn converge_vm(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    vm_spec: &VmSpec,
    rec: &mut SpecRecord,
    just_created: bool,
) -> Result<Outcome, ActionError> {
    let VmRef {
        site: site_name,
        node,
        kind,
        vmid,
    } = vm;
    let site = site(ctx, site_name)?;
    let client = &site.client;
    let (cfg, ours) = read_own_config(ctx, client, vm, spec, rec).await?;
    if cfg.lock() == Some("suspended") && spec.power_state == PowerState::Running {
        // Hibernated: a start resumes it from its saved state; the config follows next cycle.
        tracing::info!(spec = %spec.name, vmid, "resuming the hibernated VM");
        let upid = client.start_vm(node, kind, vmid).await?;
        if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
            return Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            });
        }
        return Ok(Outcome::Waiting(Wait::Resumed { vmid }));
    }
    if let Some(waiting) = check_lock(ctx, site, node, kind, vmid, &cfg).await? {
        return Ok(waiting);
    }
    // A `ProxmoxTemplate`'s VM made a template (or being made one): nothing of it changes.
    if spec.template.is_some() && cfg.is_template() {
        return template_ended(ctx, site, spec, rec, vm).await;
    }
    // Declared fields only, compared with PVE's normalised values. A value waiting for a
    // reboot counts as set: it is not sent again every cycle.
    let pending = if just_created {
        Vec::new()
    } else {
        client.vm_pending(node, kind, vmid).await?
    };
    let (params, mut changed) = config_diff(ctx, spec, vm_spec, rec, &ours, &cfg, &pending)?;
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
        tracing::info!(spec = %spec.name, vmid, changed = %changed.join(","), "updating the VM config");
        if allocates_volume(&params) {
            // A new EFI or TPM volume: PVE allocates it while it answers, which on slow storage
            // outlasts pveproxy's 30 s forward (596, an unknown outcome); the asynchronous
            // `POST` does it in a task (tests/it/client/fake_fidelity.rs, "slow volume
            // allocation").
            if let Some(upid) = client.set_config_async(node, vmid, &params, digest).await?
                && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
            {
                ctx.store.put(&spec.name, rec)?;
                return Ok(Outcome::StillRunning {
                    upid: upid.to_string(),
                });
            }
        } else {
            client.set_config(node, kind, vmid, &params, digest).await?;
        }
    }
    rec.applied_tags = spec.tags.clone();
    rec.applied_protection = spec.hardware.protection;
    if let Some(pool) = &spec.hardware.pool
        && !client.pool_vmids(pool).await?.contains(&vmid)
    {
        tracing::info!(spec = %spec.name, vmid, pool = %pool, "moving the VM into its pool");
        client.move_to_pool(pool, vmid).await?;
        changed.push("pool");
    }

    // cloud-init: PVE's options, its drive or proxsync's seed image. Before the power step, so
    // a new VM boots with it.
    let cfg = if config_read_again(ctx, spec, vm_spec, &cfg, &changed) {
        client.vm_config(node, kind, vmid).await?
    } else {
        cfg
    };
    let cloudinit_changed =
        match converge_cloud_init(ctx, site, spec, vm_spec, rec, &ours, node, &cfg).await? {
            CloudInitStep::Done(c) => c,
            CloudInitStep::Running(upid) => {
                ctx.store.put(&spec.name, rec)?;
                return Ok(Outcome::StillRunning { upid });
            }
        };
    if cloudinit_changed {
        changed.push("cloudinit");
    }

    // The HA resource before the power step: the HA manager then owns starts and stops.
    if super::ha::converge_ha(ctx, site, &ours, spec, rec).await? {
        changed.push("ha");
    }

    let protection = protection_of(spec, &cfg);
    let mut held: Vec<String> = Vec::new();
    let mut destroy_held: Vec<String> = Vec::new();

    // `destroyDisks`: disks destroyed with their data, only as the spec says explicitly.
    match super::disks::destroy_disks(
        ctx,
        client,
        &ours,
        vm,
        spec,
        vm_spec,
        rec,
        &cfg,
        &pending,
        protection,
        &mut destroy_held,
    )
    .await?
    {
        super::disks::DiskStep::Done(true) => changed.push("disks destroyed"),
        super::disks::DiskStep::Done(false) => {}
        super::disks::DiskStep::Running(upid) => {
            ctx.store.put(&spec.name, rec)?;
            return Ok(Outcome::StillRunning { upid });
        }
    }

    // With `disks`: every disk added, its options, grown, or detached (`disks`).
    match super::disks::converge_disks(
        ctx, client, &ours, vm, spec, vm_spec, rec, &cfg, &pending, protection, &mut held,
    )
    .await?
    {
        super::disks::DiskStep::Done(true) => changed.push("disks"),
        super::disks::DiskStep::Done(false) => {}
        super::disks::DiskStep::Running(upid) => {
            ctx.store.put(&spec.name, rec)?;
            return Ok(Outcome::StillRunning { upid });
        }
    }

    // Disks only grow (the short form's boot disk; `disks` grows its own).
    if vm_spec.disks.is_none()
        && let Some(o) = grow_disk(ctx, client, vm, spec, vm_spec, rec, &cfg).await?
    {
        return Ok(o);
    }

    // Drives a protected VM keeps: everything else is applied, and the spec is not (the next
    // converge tries again; `Stalled` says what to do).
    let held = crate::gate::volume::drive_removal(kind, vmid, protection, &held, &destroy_held)
        .map_err(super::protected);
    let tail = Tail {
        changed,
        pending,
        just_created,
        waits: (CLOUDINIT_PENDING, cloudinit_changed),
        held,
        make_template: spec.template.is_some() && !cfg.is_template(),
    };
    finish(ctx, site, vm, spec, rec, tail).await
}

/// What the kind's own steps of a converge leave to [`finish`], the steps every guest shares.
pub(super) struct Tail {
    /// What the converge changed so far (`power` is added by [`finish`]).
    pub changed: Vec<&'static str>,
    /// The guest's pending values as read before this converge's changes.
    pub pending: Vec<PendingEntry>,
    /// The guest was made by this action's own task: stopped, nothing pending.
    pub just_created: bool,
    /// A `reboot_pending` key PVE does not list, which the running guest takes only at its
    /// next start (a VM's cloud-init, a container's hostname), and whether this converge
    /// changed it.
    pub waits: (&'static str, bool),
    /// What the guest's protection kept as it is: said after everything else is applied.
    pub held: Result<(), ActionError>,
    /// A `ProxmoxTemplate`'s VM, not a template yet: turned into one once it is stopped.
    pub make_template: bool,
}

/// The end of every converge, a VM's or a container's: the power state, what waits for the
/// next start, a reboot the policy allows, the guest's addresses, and the record of what was
/// applied.
pub(super) async fn finish(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    tail: Tail,
) -> Result<Outcome, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let client = &site.client;
    let Tail {
        mut changed,
        pending,
        just_created,
        waits: (waits_key, waits_changed),
        held,
        make_template,
    } = tail;
    // Power state last, read now: the cycle's listing may describe an earlier guest with this
    // VMID (deleted and reused within the cycle), or a state this action changed.
    let is_running = !just_created && client.vm_running(node, kind, vmid).await?;
    match converge_power(ctx, site, vm, spec, rec, is_running).await? {
        PowerStep::Changed => changed.push("power"),
        PowerStep::Unchanged => {}
        PowerStep::Ended(o) => return Ok(o),
    }
    // The last step of a `ProxmoxTemplate`'s VM, stopped now: PVE refuses a running one. Its
    // protection's hold is said first: nothing is made a template while its spec is not
    // applied.
    if make_template {
        held?;
        return make_template_now(ctx, site, spec, rec, vm).await;
    }

    // What waits for the guest's next start (PVE applies a running guest's CPU, memory and
    // NIC changes then, unless it can hot-plug them). proxsync reports it, and reboots only as
    // the spec's rebootPolicy allows (`reboot`).
    // PVE keeps a change pending only on a running guest; a stopped guest's changes (and what
    // was pending on it) are applied at once or by the start, so it has nothing pending to read.
    let pending = if changed.is_empty() {
        pending
    } else if is_running {
        client.vm_pending(node, kind, vmid).await?
    } else {
        Vec::new()
    };
    let was_running_before = is_running && !changed.contains(&"power");
    let still_waits =
        was_running_before && (waits_changed || rec.reboot_pending.iter().any(|k| k == waits_key));
    rec.reboot_pending = pending_keys(&pending);
    // Kept while the guest runs: a VM's cloud-init reads its inputs at boot (PVE regenerates
    // its drive then; a new seed image is read then), a container's guest takes its hostname
    // at its start.
    if still_waits && spec.power_state == PowerState::Running {
        rec.reboot_pending.push(waits_key.to_string());
    }
    if is_running && let Some(o) = reboot_if_due(ctx, site, vm, spec, rec).await? {
        ctx.store.put(&spec.name, rec)?;
        return Ok(o);
    }
    // The guest's addresses, from a VM's agent or a container's network namespace (best
    // effort: no answer is no error). Not asked right after this converge started the guest:
    // its agent cannot be up yet.
    rec.ip_addresses = if spec.power_state == PowerState::Running && !changed.contains(&"power") {
        client
            .guest_interfaces(node, kind, vmid)
            .await
            .map(|ifaces| guest_addresses(&ifaces))
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    held?;
    rec.applied_hash = Some(spec_hash(spec).into());
    rec.applied_content = Some(crate::spec::content_hash(spec).into());
    rec.provisioned = true;
    // The record maps the spec to the guest where it is now (moved by the HA manager or by
    // hand, or a delete that failed on a spec that came back); the outcome writes the rest.
    let here = VmState::Exists {
        vmid,
        node: node.into(),
    };
    if rec.vm != here {
        ctx.store.transition(&spec.name, rec, here)?;
    }
    Ok(Outcome::Done)
}

/// Turns a `ProxmoxTemplate`'s stopped VM into a template (`POST .../template`, a `qmtemplate`
/// task), and records it built once the task ended.
async fn make_template_now(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
    vm: VmRef<'_>,
) -> Result<Outcome, ActionError> {
    let client = &site.client;
    tracing::info!(spec = %spec.name, vmid = vm.vmid, "turning the VM into a template");
    let upid = match client.template_vm(vm.node, vm.vmid).await {
        Ok(upid) => upid,
        // Made one since the config was read (a task of an earlier cycle that ended).
        Err(e)
            if e.status() == Some(500)
                && e.meaning() == Some(crate::pve::texts::Meaning::AlreadyTemplate) =>
        {
            return finish_template(ctx, spec, rec, vm);
        }
        Err(e) => return Err(e.into()),
    };
    template_task_ended(ctx, site, spec, rec, vm, &upid).await
}

/// A `ProxmoxTemplate`'s VM whose config says `template: 1`: built once no `qmtemplate` task
/// of it runs on its node (qemu-server writes `template: 1` when the task starts, then converts
/// each disk to a base volume); a running one is waited for, as a converge's own task is.
async fn template_ended(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
    vm: VmRef<'_>,
) -> Result<Outcome, ActionError> {
    let client = &site.client;
    let id = vm.vmid.to_string();
    let running = (client.active_tasks(vm.node).await?).into_iter().find(|t| {
        t.is_running() && t.task_type().as_deref() == Some("qmtemplate") && t.task_id() == id
    });
    match running.and_then(|t| t.upid.parse::<crate::pve::Upid>().ok()) {
        Some(upid) => template_task_ended(ctx, site, spec, rec, vm, &upid).await,
        None => finish_template(ctx, spec, rec, vm),
    }
}

/// Waits for the `qmtemplate` task `upid`: the record is stored and the spec waits while it
/// runs (the next cycle waits again), and is recorded built once it ended.
async fn template_task_ended(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
    vm: VmRef<'_>,
    upid: &crate::pve::Upid,
) -> Result<Outcome, ActionError> {
    if let TaskOutcome::StillRunning = wait(ctx, &site.client, upid, rec).await? {
        ctx.store.put(&spec.name, rec)?;
        return Ok(Outcome::StillRunning {
            upid: upid.to_string(),
        });
    }
    finish_template(ctx, spec, rec, vm)
}

/// The record of a `ProxmoxTemplate`'s VM just turned into a template: applied, as
/// [`finish`] records a converge (a template has no pending values, addresses or reboots).
fn finish_template(
    ctx: &ExecCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
    vm: VmRef<'_>,
) -> Result<Outcome, ActionError> {
    rec.reboot_pending.clear();
    rec.ip_addresses.clear();
    rec.applied_hash = Some(spec_hash(spec).into());
    rec.applied_content = Some(crate::spec::content_hash(spec).into());
    rec.provisioned = true;
    let here = VmState::Exists {
        vmid: vm.vmid,
        node: vm.node.into(),
    };
    if rec.vm != here {
        ctx.store.transition(&spec.name, rec, here)?;
    }
    Ok(Outcome::Done)
}

/// Whether `params` make PVE allocate a volume: proxsync sends `efidisk0` and `tpmstate0` only
/// to make them (`S:1`, `hardware::firmware`).
fn allocates_volume(params: &crate::pve::VmParams) -> bool {
    ["efidisk0", "tpmstate0"]
        .iter()
        .any(|k| params.get(k).is_some())
}

/// Whether the config must be read again after this converge's change before the later steps:
/// cloud-init reads it (its drive, seed and options), and the disk step reads the boot disk.
/// A change of only these keys leaves both as the first read saw them.
fn config_read_again(
    ctx: &ExecCtx<impl Pve>,
    spec: &Spec,
    vm_spec: &VmSpec,
    cfg: &VmConfig,
    changed: &[&str],
) -> bool {
    const KEEPS_DISKS: [&str; 7] = [
        "marker",
        "description",
        "name",
        "memory",
        "tags",
        "cores",
        "pool",
    ];
    let cloud_init = vm_spec.cloud_init.is_some()
        || vm_spec.user_data.is_some()
        || !crate::render::cloud_init::seed_slots(cfg, &ctx.install_id, &spec.name).is_empty();
    !changed.is_empty() && (cloud_init || changed.iter().any(|c| !KEEPS_DISKS.contains(c)))
}

/// Whether converging the adopted VM `vm` would send nothing: judged from `cfg`, its config as
/// this cycle's observation read it (PVE's `GET .../config` shows values waiting for a reboot
/// as set), and from the listing. `rec` is the adoption's record, without `applied_*` yet.
/// Only specs whose every managed part is in the config or the listing qualify: no
/// cloud-init, HA or pool (each needs reads of its own). The marker must verify for this VMID
/// with this install's key (a marker from before signing is rewritten by a converge).
pub(super) fn adoption_is_current(
    ctx: &ExecCtx<impl Pve>,
    site_name: &str,
    spec: &Spec,
    rec: &SpecRecord,
    vm: &crate::observe::ObservedVm,
    cfg: &VmConfig,
) -> bool {
    let vmid = vm.vmid;
    // A container's converge compares its own options: it always runs.
    let Some(vm_spec) = spec.vm().filter(|v| {
        v.cloud_init.is_none()
            && v.user_data.is_none()
            && v.disks.is_none()
            && v.destroy_disks.is_empty()
    }) else {
        return false;
    };
    let simple = spec.ha.is_none()
        && spec.hardware.pool.is_none()
        && crate::render::cloud_init::seed_slots(cfg, &ctx.install_id, &spec.name).is_empty();
    if !simple || cfg.lock().is_some() {
        return false;
    }
    let Some(ours) = checked_site(ctx, site_name)
        .ok()
        .and_then(|site| verified(ctx, &site, cfg, spec.kind(), vmid, Some(&spec.name), None).ok())
    else {
        return false;
    };
    let power_matches = matches!(
        (spec.power_state, vm.power),
        (PowerState::Running, crate::observe::Power::Running)
            | (PowerState::Stopped, crate::observe::Power::Stopped)
    );
    let disk_grown = boot_disk(cfg).is_some_and(|(_, size)| size >= spec.root_disk_bytes());
    let config_matches = config_diff(ctx, spec, vm_spec, rec, &ours, cfg, &[])
        .is_ok_and(|(_, changed)| changed.is_empty());
    // The listing shows running values: cores or memory that differ from the config's wait
    // for a reboot, and the planner's drift sees them.
    let as_recorded = SpecRecord {
        applied_hash: Some(spec_hash(spec).into()),
        applied_tags: spec.tags.clone(),
        ..rec.clone()
    };
    let listing_matches = crate::plan::drift(spec, &as_recorded, vm, &ctx.install_id).is_empty();
    power_matches && disk_grown && config_matches && listing_matches
}

/// The update this converge sends ([`crate::render::config::config_changes`] with the cycle's
/// marker key and install id).
fn config_diff(
    ctx: &ExecCtx<impl Pve>,
    spec: &Spec,
    vm_spec: &VmSpec,
    rec: &SpecRecord,
    ours: &VerifiedMarker,
    cfg: &VmConfig,
    pending: &[PendingEntry],
) -> Result<(VmParams, Vec<&'static str>), ActionError> {
    crate::render::config::config_changes(
        &ctx.marker_key,
        &ctx.install_id,
        spec,
        vm_spec,
        rec,
        ours,
        cfg,
        pending,
    )
    .map_err(ActionError::from)
}

/// Grows the boot disk to the spec's size (disks only grow). `Some` when the resize task
/// outlived our wait.
async fn grow_disk(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec: &Spec,
    vm_spec: &VmSpec,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
) -> Result<Option<Outcome>, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    if let Some((disk, size)) = crate::render::config::disk_to_grow(vm_spec, rec, cfg) {
        tracing::info!(spec = %spec.name, vmid, disk = %disk, from = size, to = vm_spec.disk_bytes, "growing the disk");
        let resize = client
            .resize_disk(node, kind, vmid, &disk, &pve_size(vm_spec.disk_bytes), None)
            .await?;
        if let Some(upid) = resize
            && let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await?
        {
            ctx.store.put(&spec.name, rec)?;
            return Ok(Some(Outcome::StillRunning {
                upid: upid.to_string(),
            }));
        }
        rec.applied_disk_bytes = Some(vm_spec.disk_bytes);
    }
    Ok(None)
}

/// The addresses worth showing: not loopback, not IPv6 link-local. The guest (its agent, or a
/// container's own network namespace) says what they are, so whoever is root in it can say
/// anything: only text that parses as an IP address is kept, in its canonical form, and
/// nothing else of the answer (interface names, the agent's OS fields) goes anywhere.
pub(crate) fn guest_addresses(ifaces: &[crate::pve::types::AgentInterface]) -> Vec<String> {
    let mut out: Vec<String> = ifaces
        .iter()
        .filter(|i| i.name != "lo")
        .flat_map(|i| &i.ip_addresses)
        .filter_map(|a| a.ip_address.parse::<std::net::IpAddr>().ok())
        .filter(|ip| match ip {
            std::net::IpAddr::V4(v4) => !v4.is_loopback(),
            std::net::IpAddr::V6(v6) => !(v6.is_loopback() || v6.is_unicast_link_local()),
        })
        .map(|ip| ip.to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::guest_addresses;
    use crate::pve::types::AgentInterface;

    /// What root inside a guest can make its agent report: only addresses come out.
    #[test]
    fn a_guest_reports_addresses_and_nothing_else_is_kept() {
        let ifaces: Vec<AgentInterface> = serde_json::from_value(serde_json::json!([
            {"name": "lo", "ip-addresses": [{"ip-address": "127.0.0.1"}, {"ip-address": "::1"}]},
            {"name": "eth0", "ip-addresses": [
                {"ip-address": "192.0.2.10", "ip-address-type": "ipv4", "prefix": 24},
                {"ip-address": "{{ lookup('pipe','touch MARK2') }}"},
                {"ip-address": "<!channel>"},
                {"ip-address": "10.0.0.5\n# forged: line"},
                {"ip-address": "\u{1b}[2J10.0.0.6"},
                {"ip-address": " 10.0.0.7 "},
                {"ip-address": "fe80::1%eth0"},
                {"ip-address": "FE80::BE24:11FF:FE4C:1"},
                {"ip-address": "2001:DB8::0005"},
                {"ip-address": "127.0.0.2"},
                {"ip-address": ""},
            ]},
            {"name": "{{ lookup('pipe','touch MARK3') }}", "ip-addresses": [
                {"ip-address": "192.0.2.10"},
                {"ip-address": "198.51.100.7"},
            ]},
        ]))
        .unwrap();
        assert_eq!(
            guest_addresses(&ifaces),
            ["192.0.2.10", "198.51.100.7", "2001:db8::5"]
        );
    }
}
