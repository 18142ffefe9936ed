//! The helpers every VM action shares: reading a VM's own config (verified to carry its
//! marker), its lock, boot disk, pending values and protection, powering it off, and letting
//! the HA stack settle.

use super::identity::{checked_site, verified};
use super::{
    ActionError, ExecCtx, Outcome, SiteCtx, VmRef, fail, marker_missing, stale_lock, wait,
};
use crate::category::Category;
use crate::gate::identity::{NotOurs, Recorded, VerifiedMarker, verify_by_identity};
use crate::gate::volume::Protection;
use crate::guest::GuestKind;
use crate::ownership::{Marker, ownership_tag};
use crate::pve::texts::Meaning;
use crate::pve::types::VmConfig;
use crate::pve::values::pve_bool;
use crate::pve::{LockHolder, Pve, TaskOutcome};
use crate::spec::{PowerState, Spec};
use crate::store::{SpecRecord, VmState};

/// How long the guest gets to power off before PVE's shutdown task stops it.
const SHUTDOWN_TIMEOUT_SECS: u32 = 120;

/// Who holds a VM's lock, as PVE sets it: `Ok(None)` when unlocked; `Waiting` while a task
/// that can hold this kind of lock runs (a backup job names no VM, a clone names its source
/// and runs on the source's node); a hibernated VM (`suspended`) is waiting for a start, never
/// stale; only a lock that no running task can hold is reported with `qm unlock`.
pub(super) async fn check_lock(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    node: &str,
    kind: GuestKind,
    vmid: u32,
    cfg: &VmConfig,
) -> Result<Option<Outcome>, ActionError> {
    let Some(lock) = cfg.lock() else {
        return Ok(None);
    };
    let holder = LockHolder::of(lock);
    if holder == LockHolder::NoTask {
        return Ok(Some(Outcome::Waiting {
            reason: format!(
                "VM {vmid} is hibernated (lock: {lock}); proxsync changes nothing on it until it is \
                 resumed (qm start {vmid}, or powerState: running in the spec)"
            ),
        }));
    }
    // The VM's node first; a clone's task runs on its source's node, which may be any other.
    let mut nodes = vec![node.to_string()];
    if lock == "clone" {
        let view = ctx.views.get(&site.name);
        nodes.extend(
            view.into_iter()
                .flat_map(|v| v.health.nodes.iter())
                .filter(|(n, online)| **online && n.as_str() != node)
                .map(|(n, _)| n.clone()),
        );
    }
    for n in &nodes {
        let tasks = site.client.active_tasks(n).await?;
        if let Some(t) = tasks
            .iter()
            .find(|t| holder.may_be(&t.task_type().unwrap_or_default(), &t.task_id(), vmid))
        {
            return Ok(Some(Outcome::Waiting {
                reason: format!(
                    "{} is locked ({lock}) by task {}; waiting for it",
                    kind.named(vmid),
                    t.upid
                ),
            }));
        }
    }
    // Only a human can tell whether the lock is really stale.
    let (noun, cli) = (kind.noun(), kind.cli());
    Err(stale_lock(format!(
        "{noun} {vmid} on node {node} is locked ({lock}) but no task holds the lock (a crashed \
         or interrupted operation). After checking that nothing is running on it, clear it on \
         the node with: {cli} unlock {vmid}"
    )))
}

/// The VM's `protection` as it is after this converge's config update (a declared one is
/// applied at once: qemu-server's fast-plug options), for the steps that remove drives (PVE
/// refuses removing any drive of a protected VM).
pub(super) fn protection_of(spec: &Spec, cfg: &VmConfig) -> Protection {
    Protection {
        on: spec
            .hardware
            .protection
            .unwrap_or_else(|| cfg.get("protection").is_some_and(pve_bool)),
        managed: spec.hardware.protection,
    }
}

/// A fresh read of the guest's config, verified to carry the spec's marker (the gate's
/// [`VerifiedMarker`], from which the permits of converge's guarded edits are made).
///
/// The guest the record names stays the spec's until it is shown gone: no answer of this read
/// changes the record's VMID, but for a guest shown to be another one (see [`not_the_specs`]).
/// A guest whose notes lost the marker line is the spec's when its own identity is the
/// recorded one (`gate::identity::verify_by_identity`): converge writes the line back. A
/// config whose marker verifies has its identity recorded.
pub(super) async fn read_own_config(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<(VmConfig, VerifiedMarker), ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let checked = checked_site(ctx, vm.site)?;
    // A guest that does not show it is the spec's is read once more before it is judged: one
    // answer (garbled on its way, or read mid-edit) never stalls the spec.
    let mut reads = 0;
    loop {
        reads += 1;
        let cfg = match client.vm_config(node, kind, vmid).await {
            Ok(c) => c,
            // Gone from the node the listing showed: removed, or moved by a person since. The
            // record keeps it; a create is sent only once PVE says the VMID is free
            // (`create::confirm_gone`).
            Err(e) if e.is_not_found() => {
                return Err(fail(
                    Category::NotFound,
                    format!(
                        "{} is not on node {node} any more; it is looked for again at the next \
                         cycle, and made again only once PVE says VMID {vmid} is free",
                        kind.named(vmid)
                    ),
                ));
            }
            Err(e) => return Err(e.into()),
        };
        // Identity, from a fresh read, before any change.
        let why = match verified(
            ctx,
            &checked,
            &cfg,
            kind,
            vmid,
            Some(&spec.name),
            Some(&rec.uid),
        ) {
            Ok(ours) => {
                rec.remember_identity(vmid, cfg.guest_id(kind));
                return Ok((cfg, ours));
            }
            Err(why) => why,
        };
        let recorded = Recorded {
            spec: &spec.name,
            uid: &rec.uid,
            identity: rec.identity_at(vmid),
        };
        let found = cfg.guest_id(kind);
        match verify_by_identity(
            &checked,
            &ctx.install_id,
            kind,
            vmid,
            cfg.description(),
            found.as_ref(),
            recorded,
        ) {
            Ok(ours) => {
                tracing::info!(spec = %spec.name, vmid, "the guest's notes lost the marker line; its identity is the recorded one: writing the line back");
                rec.note(
                    ctx.clock.now_ms(),
                    "converge",
                    &format!(
                        "{} carries no marker line (its notes were edited); its {} is the \
                         recorded one: the marker line is written back below the notes",
                        kind.named(vmid),
                        found.map(|f| f.to_string()).unwrap_or_default()
                    ),
                );
                return Ok((cfg, ours));
            }
            Err(_) if reads < 2 => {}
            Err(not) => {
                return Err(not_the_specs(ctx, client, vm, spec, rec, &cfg, why, not).await);
            }
        }
    }
}

/// The guest the record names does not show it is the spec's (`why`: the marker check's
/// refusal; `not`: the identity check's). It is another guest only when it carries neither
/// this install's tag nor any marker line of this install, and its identity is not the
/// recorded one (a well-formed other one shows, or none was recorded and it is named otherwise
/// than the spec's guest): a VMID someone freed and reused. That is read twice (one answer, garbled or not, never changes the record), then the
/// VMID is released, and the next cycle makes the spec a new guest. Anything else is the
/// spec's guest whose marker a person removed or changed: `Stalled` (`MarkerMissing`), the
/// record kept, nothing created, until a person confirms it or removes it.
// Many arguments because: the action's context, the guest and spec, the config read and the
// two refusals it was judged on.
#[allow(clippy::too_many_arguments)]
async fn not_the_specs(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
    why: NotOurs,
    not: NotOurs,
) -> ActionError {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let tag = ownership_tag(&ctx.install_id);
    let another = |cfg: &VmConfig| {
        let ours_marked = cfg
            .description()
            .and_then(Marker::parse)
            .is_some_and(|m| m.install == ctx.install_id);
        let recorded = rec.identity_at(vmid);
        let found = cfg.guest_id(kind);
        let name_key = match kind {
            GuestKind::Qemu => "name",
            GuestKind::Lxc => "hostname",
        };
        let other_identity = match (recorded, found.as_ref()) {
            (Some(want), Some(found)) => want != found,
            // Nothing recorded to compare (a record of an earlier release, a guest just made):
            // its name is the spec's guest's if it is that guest (PVE names a guest in the
            // request that makes it).
            (None, _) => cfg.get(name_key) != Some(spec.vm_name.as_str()),
            (Some(_), None) => false,
        };
        !cfg.tags().contains(&tag) && !ours_marked && other_identity
    };
    if another(cfg) {
        match client.vm_config(node, kind, vmid).await {
            Ok(again) if another(&again) => {
                return match ctx.store.transition(&spec.name, rec, VmState::Absent) {
                    Ok(()) => fail(
                        Category::Conflict,
                        format!(
                            "{} is another guest now (no tag {tag}, no marker of this install, \
                             and not the recorded identity, read twice): the spec's {} is \
                             gone; a new one is made at the next cycle",
                            kind.named(vmid),
                            kind.noun()
                        ),
                    ),
                    Err(e) => e.into(),
                };
            }
            Ok(_) => {
                return fail(
                    Category::Conflict,
                    format!(
                        "{} answered two reads of its config differently; nothing is judged \
                         on it this cycle",
                        kind.named(vmid)
                    ),
                );
            }
            Err(e) => return e.into(),
        }
    }
    let (named, noun) = (kind.named(vmid), kind.noun());
    marker_missing(format!(
        "{named} does not carry the marker of spec {name} ({why}; {not}). It is still the {noun} \
         the spec's record names, so nothing is created for the spec while it exists. If it is \
         the spec's {noun}: proxsync adopt {name} --vmid {vmid} (the marker line is written back \
         below its notes); if it is not: remove the tag {tag} from it, and the next cycle makes \
         the spec a new {noun}",
        name = spec.name
    ))
}

/// VM `vmid`'s node and config, for `proxsync adopt`: one listing, one config read. `None`
/// when the site has no VM or container with that VMID.
pub async fn find_vm(
    client: &impl Pve,
    vmid: u32,
) -> Result<Option<(String, GuestKind, VmConfig)>, crate::pve::Error> {
    let listed = client.vm_resources().await?;
    if let Some(entry) = listed.unreadable.iter().find(|e| e.vmid == Some(vmid)) {
        return Err(crate::pve::Error::Decode {
            method: "GET".into(),
            path: "/cluster/resources".into(),
            message: entry.to_string(),
        });
    }
    let Some((node, kind)) = listed
        .guests
        .iter()
        .filter(|r| r.vmid == vmid)
        .find_map(|r| Some((r.node.clone(), r.guest_kind()?)))
    else {
        return Ok(None);
    };
    let cfg = client.vm_config(&node, kind, vmid).await?;
    Ok(Some((node, kind, cfg)))
}

/// Graceful shutdown that ends in a hard stop: one `qmshutdown` task with `forceStop=1`, which
/// stops the VM when the guest has not powered off after the timeout. It is also the only
/// shutdown a paused VM takes: qemu-server `PVE/API2/Qemu.pm` `vm_shutdown` checks
/// `vm_is_paused` before forking and, without `forceStop`, dies `VM is paused - cannot
/// shutdown` (with it: `VM is paused - stop instead of shutdown`). A paused VM lists as
/// `running` (`qmpstatus: paused`). If the shutdown is refused that way anyway, or its task
/// fails, a `stop` with `overrule-shutdown=1` follows, so it aborts a shutdown still running
/// instead of queueing behind its config lock. An HA-managed VM's `hastop` task only hands the
/// request to the HA manager: the VM's state is waited for, not the task.
pub(super) async fn power_off(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    node: &str,
    kind: GuestKind,
    vmid: u32,
    rec: &mut SpecRecord,
) -> Result<Option<Outcome>, ActionError> {
    let client = &site.client;
    // A shutdown or stop still running from an earlier cycle (one interrupted, or one that
    // outlived the wait) is waited for, not answered with a second one queued behind it.
    let running = client.active_vm_tasks(node, vmid).await?;
    if let Some(upid) = running
        .iter()
        .filter(|t| {
            matches!(
                t.task_type().as_deref(),
                Some("qmshutdown" | "qmstop" | "vzshutdown" | "vzstop" | "hastop")
            )
        })
        .find_map(|t| t.upid.parse::<crate::pve::Upid>().ok())
    {
        tracing::info!(vmid, upid = %upid, "waiting for the power-off task already running");
        match wait(ctx, client, &upid, rec).await {
            Ok(TaskOutcome::StillRunning) => {
                return Ok(Some(Outcome::StillRunning {
                    upid: upid.to_string(),
                }));
            }
            Ok(_) if !client.vm_running(node, kind, vmid).await? => {
                return settle_ha(ctx, client, node, kind, vmid, &upid, false).await;
            }
            // It failed, or the VM still runs: go on with our own shutdown and stop.
            _ => {}
        }
    }
    let shutdown = match client
        .shutdown_vm(node, kind, vmid, SHUTDOWN_TIMEOUT_SECS, true)
        .await
    {
        Ok(upid) => Some(upid),
        Err(e) if e.meaning() == Some(Meaning::VmPaused) => {
            tracing::info!(vmid, "the VM is paused and refuses a shutdown: stopping it");
            None
        }
        // Off already (the HA manager acting on a resource state just set, or a person):
        // pve-container refuses before any task, `CT N not running`.
        Err(e) if refused_as_already(&e, vmid, Meaning::NotRunning) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if let Some(upid) = shutdown {
        match wait(ctx, client, &upid, rec).await {
            Ok(TaskOutcome::StillRunning) => {
                return Ok(Some(Outcome::StillRunning {
                    upid: upid.to_string(),
                }));
            }
            Ok(_) => return settle_ha(ctx, client, node, kind, vmid, &upid, false).await,
            // The shutdown task failed: stop the VM.
            Err(_) => {}
        }
    }
    let upid = match client.stop_vm(node, kind, vmid, true).await {
        // An HA-managed VM: PVE refuses `overrule-shutdown` ("Not applicable for HA
        // resources."); a 400 executed nothing, so the plain stop is safe to send.
        Err(e) if e.rejects_parameter("overrule-shutdown") => {
            client.stop_vm(node, kind, vmid, false).await?
        }
        other => other?,
    };
    match wait(ctx, client, &upid, rec).await? {
        TaskOutcome::StillRunning => Ok(Some(Outcome::StillRunning {
            upid: upid.to_string(),
        })),
        _ => settle_ha(ctx, client, node, kind, vmid, &upid, false).await,
    }
}

/// What a converge's power step did.
pub(super) enum PowerStep {
    Unchanged,
    /// Started or shut down.
    Changed,
    /// The action ends here (a task outlived the wait, the HA manager has the request).
    Ended(Outcome),
}

/// A converge's power step, last, from `is_running` read just before: the guest started or
/// shut down as the spec's `powerState` says (its record kept when the action ends here).
pub(super) async fn converge_power(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    is_running: bool,
) -> Result<PowerStep, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let client = &site.client;
    match spec.power_state {
        PowerState::Running if !is_running => {
            let upid = match client.start_vm(node, kind, vmid).await {
                Ok(upid) => upid,
                // Started meanwhile (the HA manager acting on the resource the HA step just
                // made, or a person): pve-container refuses before any task, `CT N already
                // running`.
                Err(e) if refused_as_already(&e, vmid, Meaning::AlreadyRunning) => {
                    return Ok(PowerStep::Changed);
                }
                Err(e) => return Err(e.into()),
            };
            if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(PowerStep::Ended(Outcome::StillRunning {
                    upid: upid.to_string(),
                }));
            }
            if let Some(o) = settle_ha(ctx, client, node, kind, vmid, &upid, true).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(PowerStep::Ended(o));
            }
            Ok(PowerStep::Changed)
        }
        PowerState::Stopped if is_running => {
            if let Some(o) = power_off(ctx, site, node, kind, vmid, rec).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(PowerStep::Ended(o));
            }
            Ok(PowerStep::Changed)
        }
        _ => Ok(PowerStep::Unchanged),
    }
}

/// Whether PVE refused a power request because guest `vmid` is in that state already (`CT 101
/// already running`, `CT 101 not running`: `pve::texts`): an answer before any task, so
/// nothing ran.
fn refused_as_already(e: &crate::pve::Error, vmid: u32, state: Meaning) -> bool {
    e.status() == Some(500)
        && e.meaning() == Some(state)
        && crate::pve::texts::names_vmid(e.pve_message(), vmid)
}

/// After a power task ended: for an HA-managed VM (`hastart`/`hastop`, which end as soon as
/// the HA manager has the request: pve-manager/qemu-server `fork_worker('hastop', ...)` runs
/// `ha-manager crm-command stop`), waits up to the task wait for the VM to reach the state;
/// `Some(Waiting)` when it has not yet. Any other task changed the state itself: `None`.
pub(super) async fn settle_ha(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    node: &str,
    kind: GuestKind,
    vmid: u32,
    upid: &crate::pve::Upid,
    want_running: bool,
) -> Result<Option<Outcome>, ActionError> {
    if !matches!(upid.kind.as_str(), "hastart" | "hastop") {
        return Ok(None);
    }
    let deadline = tokio::time::Instant::now() + ctx.task_wait;
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        if client.vm_running(node, kind, vmid).await? == want_running {
            return Ok(None);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline || *ctx.shutdown.borrow() {
            let what = if want_running { "start" } else { "stop" };
            return Ok(Some(Outcome::Waiting {
                reason: format!(
                    "{} is HA-managed: the HA manager has the request to {what} it (task \
                     {upid}) but has not done it yet; checking again",
                    kind.named(vmid)
                ),
            }));
        }
        tokio::time::sleep(delay.min(deadline - now)).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::refused_as_already;
    use crate::pve::Error;
    use crate::pve::texts::Meaning;

    fn api(status: u16, message: &str) -> Error {
        Error::Api {
            method: "POST".into(),
            path: "/nodes/pve1/lxc/101/status/start".into(),
            status,
            message: message.into(),
            errors: Default::default(),
        }
    }

    /// Only pve-container's refusal of this guest in that state counts as done: another
    /// guest's, another state's, or a failed task's words do not.
    #[test]
    fn a_refusal_as_already_in_the_state_is_recognised_only_as_pve_words_it() {
        assert!(refused_as_already(
            &api(500, "CT 101 already running\n"),
            101,
            Meaning::AlreadyRunning
        ));
        assert!(refused_as_already(
            &api(500, "CT 101 not running"),
            101,
            Meaning::NotRunning
        ));
        assert!(!refused_as_already(
            &api(500, "CT 1101 not running"),
            101,
            Meaning::NotRunning
        ));
        assert!(!refused_as_already(
            &api(500, "CT 101 not running"),
            101,
            Meaning::AlreadyRunning
        ));
        assert!(!refused_as_already(
            &api(403, "CT 101 not running"),
            101,
            Meaning::NotRunning
        ));
        let task = Error::TaskFailed {
            upid: "UPID:pve1:1:2:3:vzstart:101:x@pve:".into(),
            exitstatus: "CT 101 already running".into(),
            log_tail: Vec::new(),
        };
        assert!(!refused_as_already(&task, 101, Meaning::AlreadyRunning));
    }
}
