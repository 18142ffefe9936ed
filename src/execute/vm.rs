//! The helpers every VM action shares: reading a VM's own config (verified to carry its
//! marker), its lock, boot disk, pending values and protection, powering it off, and letting
//! the HA stack settle.

use super::identity::{checked_site, verified};
use super::{ActionError, ExecCtx, Outcome, SiteCtx, VmRef, blocked, wait};
use crate::gate::identity::{NotOurs, Recorded, VerifiedMarker, verify_by_identity};
use crate::gate::volume::Protection;
use crate::guest::GuestKind;
use crate::model::{Blocked, Note, Shows, Stranger, Wait};
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
/// and runs on the source's node), or while a container's `fstrim` runs (a command, not a
/// task); a hibernated VM (`suspended`) is waiting for a start, never stale; a lock that no
/// running task can hold is reported with how to clear it ([`Blocked::StaleLock`]).
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
        return Ok(Some(Outcome::Waiting(Wait::Hibernated {
            vmid,
            lock: lock.to_string(),
        })));
    }
    if holder == LockHolder::Command {
        return Ok(Some(Outcome::Waiting(Wait::CommandLock {
            kind,
            vmid,
            node: node.to_string(),
            lock: lock.to_string(),
        })));
    }
    // The VM's node first; a clone's task runs on its source's node, which may be any other.
    let mut nodes = if holder == LockHolder::Person {
        Vec::new()
    } else {
        vec![node.to_string()]
    };
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
            return Ok(Some(Outcome::Waiting(Wait::TaskLock {
                kind,
                vmid,
                lock: lock.to_string(),
                task: t.upid.clone(),
            })));
        }
    }
    // The task may have ended between the config's read and the task listing's (a snapshot's,
    // a migration's): a lock gone or changed since is no stale one, and is looked at again.
    if site.client.vm_config(node, kind, vmid).await?.lock() != Some(lock) {
        return Ok(Some(Outcome::Waiting(Wait::ReadsDiffer { kind, vmid })));
    }
    // Only a human can tell whether the lock is really stale.
    Err(blocked(Blocked::StaleLock {
        kind,
        vmid,
        node: node.to_string(),
        lock: lock.to_string(),
    }))
}

/// The VM's `protection` as it is after this converge's config update (a declared one is
/// applied at once: qemu-server's fast-plug options), for the steps that remove drives (PVE
/// refuses removing any drive of a protected VM).
pub(crate) fn protection_of(spec: &Spec, cfg: &VmConfig) -> Protection {
    Protection {
        on: spec
            .hardware
            .protection
            .unwrap_or_else(|| cfg.get("protection").is_some_and(pve_bool)),
        managed: spec.hardware.protection,
    }
}

/// Whose guest a record names: the spec's name, and its guest's name when the spec is still in
/// the set (a removed spec's is not known).
#[derive(Debug, Clone, Copy)]
pub(super) struct Whose<'a> {
    pub spec: &'a str,
    pub vm_name: Option<&'a str>,
}

/// What a fresh read of the record's guest shows.
pub(super) enum Own {
    /// The spec's: its config and the gate's [`VerifiedMarker`], from which the permits of the
    /// guarded edits are made.
    Ours(VmConfig, VerifiedMarker),
    /// Another guest holds the VMID (read twice, see [`judge_unmarked`]): the spec's is gone.
    Stranger(Stranger),
}

/// A fresh read of the guest's config, verified to carry the spec's marker, for a converge:
/// [`own_config`], a stranger at the VMID releasing the record's VMID (the next cycle makes the
/// spec a new guest).
pub(super) async fn read_own_config(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<(VmConfig, VerifiedMarker), ActionError> {
    let whose = Whose {
        spec: &spec.name,
        vm_name: Some(spec.guest_name()),
    };
    match own_config(ctx, client, vm, whose, rec).await? {
        Own::Ours(cfg, ours) => Ok((cfg, ours)),
        Own::Stranger(why) => {
            ctx.store.transition(&spec.name, rec, VmState::Absent)?;
            Err(blocked(Blocked::Gone(why)))
        }
    }
}

/// A fresh read of the config of the guest the record names, judged before any change.
///
/// The guest stays the spec's until it is shown gone: no answer of this read changes the
/// record. Its marker verifies (its identity is then recorded, durably at once); or its notes
/// lost the marker line, it carries this install's tag and its own identity is the recorded one
/// on three reads that agree (`gate::identity::verify_by_identity`: the caller writes the line
/// back below the notes, so a garbled answer never stands for them); or, read again, another
/// guest holds the VMID or a person let it go ([`judge_unmarked`]); else the spec is
/// `Stalled` (`MarkerMissing`). A guest not on the listed node is an error: a create follows
/// only once PVE says its VMID is free (`create::confirm_gone`).
// Long because: the reads in their order, each judged by the marker, then the identity, with
// what a streak of agreeing reads must show; the loop ends in one of four answers.
pub(super) async fn own_config(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    whose: Whose<'_>,
    rec: &mut SpecRecord,
) -> Result<Own, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let checked = checked_site(ctx, vm.site)?;
    // The notes, tags and digest of the reads that showed the recorded identity, in a row.
    let mut streak: Vec<(Option<String>, Vec<String>, Option<String>)> = Vec::new();
    for read in 1..=IDENTITY_READS + 1 {
        let cfg = match client.vm_config(node, kind, vmid).await {
            Ok(c) => c,
            Err(e) if e.is_not_found() => {
                return Err(blocked(Blocked::NotOnNode {
                    kind,
                    vmid,
                    node: node.to_string(),
                }));
            }
            Err(e) => return Err(e.into()),
        };
        let why = match verified(
            ctx,
            &checked,
            &cfg,
            kind,
            vmid,
            Some(whose.spec),
            Some(&rec.uid),
        ) {
            Ok(ours) => {
                let id = cfg.guest_id(kind);
                if id.is_some() && rec.identity_at(vmid) != id.as_ref() {
                    rec.remember_identity(vmid, id);
                    // Durable at once, not with the action's outcome: a kill later in this
                    // action must not lose what shows the guest is the spec's when a person
                    // edits its notes.
                    ctx.store.put(whose.spec, rec)?;
                }
                return Ok(Own::Ours(cfg, ours));
            }
            Err(why) => why,
        };
        let recorded = Recorded {
            spec: whose.spec,
            uid: &rec.uid,
            identity: rec.identity_at(vmid),
        };
        let found = cfg.guest_id(kind);
        match verify_by_identity(
            &checked,
            &ctx.install_id,
            kind,
            vmid,
            (cfg.description(), &cfg.tags()),
            found.as_ref(),
            recorded,
        ) {
            Ok(ours) => {
                // The write that follows is guarded by the digest: a read without one is no
                // read to write the line back from.
                let seen = (
                    cfg.description().map(str::to_string),
                    cfg.tags(),
                    cfg.digest().map(str::to_string),
                );
                if streak.last() != Some(&seen) || seen.2.is_none() {
                    streak.clear();
                }
                if seen.2.is_none() {
                    continue;
                }
                streak.push(seen);
                if streak.len() < IDENTITY_READS {
                    continue;
                }
                tracing::info!(
                    spec = whose.spec,
                    vmid,
                    "the guest's notes lost the marker line; its identity is the recorded one: writing the line back"
                );
                rec.note(
                    ctx.clock.now_ms(),
                    "identity",
                    &Note::MarkerWrittenBack {
                        kind,
                        vmid,
                        identity: found,
                    }
                    .to_string(),
                );
                return Ok(Own::Ours(cfg, ours));
            }
            Err(not) => {
                streak.clear();
                // One answer (garbled on its way, or read mid-edit) never judges the guest.
                if read >= 2 {
                    return judge_unmarked(ctx, client, vm, whose, rec, &cfg, why, not).await;
                }
            }
        }
    }
    Err(blocked(Blocked::ReadsDisagree {
        kind,
        vmid,
        two: false,
    }))
}

/// How many reads in a row must show a guest without its marker line, with this install's tag
/// and its recorded identity, before the line is written back: the notes it is written below
/// must be the guest's, not a garbled answer's.
const IDENTITY_READS: usize = 3;

/// What the config of a guest without the spec's marker shows of whose it is.
enum Unmarked {
    /// Another guest holds the VMID, or a person let it go: what shows it.
    Stranger(Stranger),
    /// It may be the spec's guest: a person decides (what to tell them).
    Missing,
}

/// The guest the record names does not show it is the spec's (`why`: the marker check's
/// refusal; `not`: the identity check's). It is let go (`Own::Stranger`) when two reads agree
/// that:
/// - it carries another spec's or install's marker, signed for this VMID (re-labelled, handed
///   over, or the VMID reused by another of this install's guests), unless it still carries
///   this install's tag and the recorded identity (someone pasted an old marker: stall);
/// - or it carries neither this install's tag nor any marker of this install (a person let it
///   go, or a stranger at a reused VMID), unless nothing recorded tells it from the spec's
///   guest made moments ago (no identity recorded, and the spec's guest's name: stall).
///
/// Anything else is the spec's guest whose marker a person removed or changed: `Stalled`
/// (`MarkerMissing`), the record kept, nothing made or changed, until a person confirms it or
/// removes it.
// Many arguments because: the action's context, the guest and whose it is, the config read and
// the two refusals it was judged on.
#[allow(clippy::too_many_arguments)]
async fn judge_unmarked(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    whose: Whose<'_>,
    rec: &SpecRecord,
    cfg: &VmConfig,
    why: NotOurs,
    not: NotOurs,
) -> Result<Own, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let tag = ownership_tag(&ctx.install_id);
    let stranger = |shows| Unmarked::Stranger(Stranger { kind, vmid, shows });
    let judge = |cfg: &VmConfig| -> Unmarked {
        let marker = cfg.description().and_then(Marker::parse);
        let tagged = cfg.tags().contains(&tag);
        let found = cfg.guest_id(kind);
        let recorded = rec.identity_at(vmid);
        let same = recorded.is_some() && recorded == found.as_ref();
        if let Some(m) = marker.as_ref().filter(|m| {
            (m.install != ctx.install_id || m.spec != whose.spec)
                && m.verifies(&ctx.marker_key, vmid)
        }) {
            if tagged && same {
                return Unmarked::Missing;
            }
            return stranger(Shows::OtherMarker {
                spec: m.spec.to_string(),
                install: m.install.to_string(),
            });
        }
        if tagged || marker.is_some_and(|m| m.install == ctx.install_id) {
            return Unmarked::Missing;
        }
        let name_key = match kind {
            GuestKind::Qemu => "name",
            GuestKind::Lxc => "hostname",
        };
        // A guest made moments ago by this install (a clone is tagged by its first converge)
        // has the spec's guest's name and nothing recorded yet: never let go on that.
        let maybe_new = recorded.is_none()
            && whose
                .vm_name
                .is_some_and(|name| cfg.get(name_key) == Some(name));
        if maybe_new {
            return Unmarked::Missing;
        }
        let tag = tag.clone();
        stranger(match (same, recorded) {
            (true, _) => Shows::LetGo { tag },
            (false, Some(want)) => Shows::OtherIdentity {
                tag,
                recorded: want.clone(),
            },
            (false, None) => Shows::Untagged { tag },
        })
    };
    if let Unmarked::Stranger(_) = judge(cfg) {
        return match client.vm_config(node, kind, vmid).await {
            Ok(again) => match judge(&again) {
                Unmarked::Stranger(why) => Ok(Own::Stranger(why)),
                Unmarked::Missing => Err(blocked(Blocked::ReadsDisagree {
                    kind,
                    vmid,
                    two: true,
                })),
            },
            Err(e) => Err(e.into()),
        };
    }
    Err(blocked(Blocked::MarkerMissing {
        kind,
        vmid,
        spec: whose.spec.to_string(),
        why: why.to_string(),
        not: not.to_string(),
        tag,
        // A removed spec's guest's name is not known.
        removed: whose.vm_name.is_none(),
    }))
}

/// VM `vmid`'s node and config, for `proxsync adopt`: one listing, one config read. `None`
/// when the site has no VM or container with that VMID.
pub(crate) async fn find_vm(
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
    Ok(Some((node.to_string(), kind, cfg)))
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
            return Ok(Some(Outcome::Waiting(Wait::HaSettling {
                kind,
                vmid,
                start: want_running,
                task: upid.to_string(),
            })));
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
