//! `changePolicy` in action: the snapshot taken before a guarded change, the rollback of a
//! guest that was unhealthy after it, and the end of a change that passed (proxsync's older
//! snapshots beyond `keep` deleted). Each step is written to the record before its request
//! (`model::ChangeStep`), so a kill at any instant leaves a record the next cycle finishes
//! from: a snapshot asked for is looked for in the guest's listing, a rollback asked for is
//! taken as done when the guest's config is its snapshot's, and asked again otherwise (to the
//! same snapshot, it leaves the same guest). Only snapshots the record
//! names as proxsync's own are rolled back to or deleted, each with the gate's permit.

use crate::model::{Blocked, ChangeStep, GuardedChange, RolledBack};
use crate::pve::texts::{self, Meaning};
use crate::pve::{Pve, TaskOutcome};
use crate::spec::Spec;
use crate::spec::health::{ChangePolicy, SnapshotWhen};
use crate::store::SpecRecord;

use super::vm::{check_lock, read_own_config};
use super::{ActionError, ExecCtx, Outcome, SiteCtx, VmRef, blocked, wait};

/// A converge of a guarded change's guest: what the planner asked first (`plan::change`): its
/// rollback, or its end; else the converge itself.
pub(super) async fn guarded_or_converge(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    why: &[String],
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    use crate::plan::change::{END, ROLLBACK};
    // A spec other than the one rolled back is converged (changed, or reverted): the hold is
    // over. Kept, it would hold that same content committed again later, a new attempt.
    let hash = crate::spec::spec_hash(spec);
    if let Some(changes) = rec.changes.as_deref_mut().filter(|c| c.vmid == vm.vmid)
        && changes
            .rolled_back
            .as_ref()
            .is_some_and(|rb| rb.hash != hash)
    {
        changes.rolled_back = None;
        ctx.store.put(&spec.name, rec)?;
    }
    match why {
        [w] if w == ROLLBACK => roll_back(ctx, super::site(ctx, vm.site)?, vm, spec, rec).await,
        [w] if w == END => end_change(ctx, super::site(ctx, vm.site)?, vm, spec, rec).await,
        _ => super::converge::converge(ctx, vm, spec, rec).await,
    }
}

/// Before a converge sends `params` to a guest it did not just make: the snapshot its spec's
/// `changePolicy` asks for. The marker and tags alone are no change of the guest. What it did
/// says how the converge goes on ([`Guarded`]).
pub(super) async fn guard(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    params: &crate::pve::VmParams,
    just_created: bool,
) -> Result<Guarded, ActionError> {
    if spec.change_policy.is_none() || just_created {
        return Ok(Guarded::Unchanged);
    }
    let mut keys: Vec<&str> = Vec::new();
    for (key, value) in params.entries() {
        match key {
            "description" | "tags" | "digest" => {}
            "delete" => keys.extend(value.split(',')),
            _ => keys.push(key),
        }
    }
    if keys.is_empty() {
        return Ok(Guarded::Unchanged);
    }
    let client = &site.client;
    let running = client.vm_running(vm.node, vm.kind, vm.vmid).await?;
    let before = rec.changes_of(vm.vmid).and_then(|c| c.guard.clone());
    if let Some(o) = snapshot_before(ctx, site, vm, spec, rec, &keys, running).await? {
        return Ok(Guarded::Ended(o));
    }
    let after = rec.changes_of(vm.vmid).and_then(|c| c.guard.clone());
    if after == before {
        return Ok(Guarded::Unchanged);
    }
    // A snapshot writes the config (its `parent`, a new digest): the update goes with the
    // digest of the config as the snapshot left it.
    Ok(Guarded::Snapshotted(
        client.vm_config(vm.node, vm.kind, vm.vmid).await?,
    ))
}

/// What [`guard`] did before a converge's update.
pub(super) enum Guarded {
    /// Nothing: the update goes as read.
    Unchanged,
    /// A snapshot was taken: the update goes with this config's digest.
    Snapshotted(crate::pve::types::VmConfig),
    /// The converge ends here (the snapshot's task still runs).
    Ended(Outcome),
}

/// Before a converge sends `changed` to a guest (`running`: it runs, so PVE keeps a change it
/// cannot apply live pending until its next start): the snapshot the spec's `changePolicy`
/// asks for, taken and recorded. `Some` when the converge ends here (the snapshot's task still
/// runs).
async fn snapshot_before(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    changed: &[&str],
    running: bool,
) -> Result<Option<Outcome>, ActionError> {
    let Some(policy) = spec.change_policy.as_deref() else {
        return Ok(None);
    };
    if changed.is_empty() {
        return Ok(None);
    }
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let client = &site.client;
    let guard = rec.changes_of(vmid).and_then(|c| c.guard.clone());
    let name = match guard {
        // Guarded already: this change, or one before it not ended yet, whose snapshot is the
        // guest as it was last known good.
        Some(g) if g.step != ChangeStep::Snapshotting => return Ok(None),
        // Asked for before a kill (or its task outlived the wait): taken if listed.
        Some(g) => {
            let listed = client.snapshots(node, kind, vmid).await?;
            match listed.iter().find(|s| s.name == g.snapshot) {
                Some(s) if whole(s) => {
                    applied(ctx, spec, rec, vmid, &g.snapshot)?;
                    return Ok(None);
                }
                // Left half-taken by a task that died (the lock it left cleared since): no
                // guard for the change. Asked again under its name it fails (`already used`),
                // and one under another name would be a second snapshot for the same change:
                // held until it is deleted.
                Some(s) => {
                    return Err(blocked(Blocked::SnapshotIncomplete {
                        kind,
                        vmid,
                        snapshot: g.snapshot.clone(),
                        snapstate: s.snapstate.clone().unwrap_or_default(),
                    }));
                }
                None => g.snapshot,
            }
        }
        None => {
            let waits = running && changed.iter().any(|k| waits_for_restart(k));
            if !policy.snapshots(waits) {
                return Ok(None);
            }
            GuardedChange::snapshot_name(ctx.clock.now_ms())
        }
    };
    take(ctx, site, vm, spec, rec, policy, &name).await
}

/// Snapshot `s` is whole: taken, not being taken or deleted (PVE's `snapstate`), so a
/// rollback to it can be asked for.
fn whole(s: &crate::pve::types::Snapshot) -> bool {
    s.snapstate.as_deref().is_none_or(str::is_empty)
}

/// Whether a change of config key `key` on a running guest waits for its next start, as
/// proxsync counts it (`RebootPending`): a change PVE may still hot-plug counts, so the
/// snapshot errs on the side of being taken.
fn waits_for_restart(key: &str) -> bool {
    crate::render::current::reported_pending(key)
}

/// Takes snapshot `name` of the guest, its step written first.
async fn take(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    policy: &ChangePolicy,
    name: &str,
) -> Result<Option<Outcome>, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let client = &site.client;
    rec.changes_mut(vmid).guard = Some(GuardedChange {
        snapshot: name.to_string(),
        step: ChangeStep::Snapshotting,
        since_ms: ctx.clock.now_ms(),
    });
    ctx.store.put(&spec.name, rec)?;
    tracing::info!(spec = %spec.name, vmid, snapshot = name, "taking a snapshot before the change (changePolicy)");
    let description = proxsync_core::words::health::snapshot_description(&spec.name);
    let upid = client
        .snapshot(node, kind, vmid, name, &description)
        .await?;
    match wait(ctx, client, &upid, rec).await {
        Ok(TaskOutcome::StillRunning) => {
            ctx.store.put(&spec.name, rec)?;
            return Ok(Some(Outcome::StillRunning {
                upid: upid.to_string(),
            }));
        }
        Ok(_) => {}
        Err(e) if e.task_failed => {
            let why = e.error.message.clone();
            let unsupported = (rec.last_task.as_ref())
                .and_then(|t| texts::meaning(&t.status))
                .is_some_and(|m| m == Meaning::SnapshotUnsupported);
            rec.changes_mut(vmid).guard = None;
            ctx.store.put(&spec.name, rec)?;
            if unsupported && policy.snapshot == SnapshotWhen::IfPossible {
                tracing::warn!(
                    spec = %spec.name, vmid,
                    "the guest's storage cannot snapshot; applying the change unprotected (changePolicy.snapshot: IfPossible)"
                );
                return Ok(None);
            }
            return Err(blocked(Blocked::SnapshotFailed {
                kind,
                vmid,
                unsupported,
                why,
            }));
        }
        Err(e) => return Err(e.into()),
    }
    applied(ctx, spec, rec, vmid, name)?;
    Ok(None)
}

/// Records snapshot `name` taken: the change goes ahead, guarded by it.
fn applied(
    ctx: &ExecCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
    name: &str,
) -> Result<(), ActionError> {
    let now = ctx.clock.now_ms();
    let changes = rec.changes_mut(vmid);
    if !changes.snapshots.iter().any(|s| s == name) {
        changes.snapshots.push(name.to_string());
    }
    changes.guard = Some(GuardedChange {
        snapshot: name.to_string(),
        step: ChangeStep::Applied,
        since_ms: now,
    });
    ctx.store.put(&spec.name, rec)?;
    Ok(())
}

/// Rolls the guest back to the snapshot taken before its change, which it did not pass, and
/// starts it (one task: PVE's rollback with `start`). The change is recorded rolled back: not
/// tried again while the spec's hash is the same.
async fn roll_back(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let client = &site.client;
    let (cfg, ours) = read_own_config(ctx, client, vm, spec, rec).await?;
    if let Some(waiting) = check_lock(ctx, site, node, kind, vmid, &cfg).await? {
        return Ok(waiting);
    }
    let Some(guard) = rec.changes_of(vmid).and_then(|c| c.guard.clone()) else {
        return Ok(Outcome::Done);
    };
    // A snapshot a person deleted (or is deleting, or one left incomplete) is no rollback's:
    // PVE's task would fail each time asked. The change stays as it is, unguarded, said so.
    let listed = client.snapshots(node, kind, vmid).await?;
    let found = listed.iter().find(|s| s.name == guard.snapshot);
    if !found.is_some_and(whole) {
        let changes = rec.changes_mut(vmid);
        changes.guard = None;
        if found.is_none() {
            changes.snapshots.retain(|s| *s != guard.snapshot);
        }
        ctx.store.put(&spec.name, rec)?;
        let snapstate = found.map(|s| s.snapstate.clone().unwrap_or_default());
        tracing::warn!(spec = %spec.name, vmid, snapshot = %guard.snapshot, ?snapstate, "the guest is unhealthy after its change, but the snapshot taken before it is gone or incomplete: not rolled back");
        return Err(blocked(Blocked::RollbackImpossible {
            kind,
            vmid,
            snapshot: guard.snapshot,
            snapstate,
            why: proxsync_core::words::health::rolled_back_why(spec.health.as_deref()),
        }));
    }
    // Asked before (a kill, an answer lost): a rollback that ran leaves the guest's config
    // the snapshot's, and is not asked twice (each stops and starts the guest).
    if guard.step == ChangeStep::RollingBack
        && is_as_snapshot(
            &cfg,
            &client
                .snapshot_config(node, kind, vmid, &guard.snapshot)
                .await?,
        )
    {
        tracing::info!(spec = %spec.name, vmid, snapshot = %guard.snapshot, "the guest is as its snapshot: the rollback asked before ran");
        if !client.vm_running(node, kind, vmid).await? {
            let upid = client.start_vm(node, kind, vmid).await?;
            if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
                ctx.store.put(&spec.name, rec)?;
                return Ok(Outcome::StillRunning {
                    upid: upid.to_string(),
                });
            }
        }
        rolled_back(ctx, spec, rec, vmid, guard.snapshot);
        return Ok(Outcome::Done);
    }
    let permit = crate::gate::permit::rollback(&ours, &spec.name, rec, &guard.snapshot)
        .map_err(|r| super::remove::conflict(r.into()))?;
    rec.changes_mut(vmid).guard = Some(GuardedChange {
        step: ChangeStep::RollingBack,
        since_ms: ctx.clock.now_ms(),
        ..guard.clone()
    });
    ctx.store.put(&spec.name, rec)?;
    tracing::warn!(
        spec = %spec.name, vmid, snapshot = %guard.snapshot,
        "the guest is unhealthy after its change: rolling it back (changePolicy.rollback: OnUnhealthy)"
    );
    let upid = client
        .rollback(node, kind, vmid, &guard.snapshot, &permit)
        .await?;
    if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
        ctx.store.put(&spec.name, rec)?;
        return Ok(Outcome::StillRunning {
            upid: upid.to_string(),
        });
    }
    rolled_back(ctx, spec, rec, vmid, guard.snapshot);
    Ok(Outcome::Done)
}

/// Records the change rolled back to `snapshot`: held while the spec is the same.
fn rolled_back(
    ctx: &ExecCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
    snapshot: String,
) {
    let why = proxsync_core::words::health::rolled_back_why(spec.health.as_deref());
    let changes = rec.changes_mut(vmid);
    changes.guard = None;
    changes.rolled_back = Some(RolledBack {
        hash: crate::spec::spec_hash(spec),
        snapshot,
        at_ms: ctx.clock.now_ms(),
        why,
    });
    // The guest is the snapshot's again: the spec is not applied (a new commit converges it).
    rec.applied_hash = None;
    rec.reboot_pending.clear();
}

/// Whether the guest's config `now` is the one `snapshot` holds: each key but those PVE keeps
/// or sets apart from a rollback (the notes, unused volumes, the snapshot's own fields, the
/// lock and digest, a regenerated `vmgenid`, the running machine of a live snapshot).
fn is_as_snapshot(
    now: &crate::pve::types::VmConfig,
    snapshot: &crate::pve::types::VmConfig,
) -> bool {
    let kept = |k: &str| {
        matches!(
            k,
            "description"
                | "digest"
                | "lock"
                | "parent"
                | "snaptime"
                | "snapstate"
                | "vmstate"
                | "vmgenid"
                | "runningmachine"
                | "runningcpu"
        ) || k.starts_with("unused")
    };
    let of = |c: &crate::pve::types::VmConfig| -> Vec<(String, String)> {
        (c.values.iter())
            .filter(|(k, _)| !kept(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    of(now) == of(snapshot)
}

/// Ends a change that passed (or a snapshot asked for whose change is no longer needed): its
/// snapshot is kept as proxsync's own, and the oldest of them beyond `keep` are deleted.
async fn end_change(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let client = &site.client;
    let (cfg, ours) = read_own_config(ctx, client, vm, spec, rec).await?;
    if let Some(waiting) = check_lock(ctx, site, node, kind, vmid, &cfg).await? {
        return Ok(waiting);
    }
    let listed = client.snapshots(node, kind, vmid).await?;
    let changes = rec.changes_mut(vmid);
    if let Some(g) = changes.guard.take()
        && listed.iter().any(|s| s.name == g.snapshot)
        && !changes.snapshots.contains(&g.snapshot)
    {
        // Taken before a kill that came before its record said so.
        changes.snapshots.push(g.snapshot);
    }
    // A snapshot a person deleted is no longer proxsync's to delete.
    rec.changes_mut(vmid)
        .snapshots
        .retain(|s| listed.iter().any(|l| l.name == *s));
    ctx.store.put(&spec.name, rec)?;
    let keep = spec.change_policy.as_deref().map_or(0, |c| c.keep) as usize;
    loop {
        let own = &rec.changes_mut(vmid).snapshots;
        if own.len() <= keep {
            break;
        }
        let oldest = own[0].clone();
        let permit = crate::gate::permit::delete_snapshot(&ours, &spec.name, rec, &oldest)
            .map_err(|r| super::remove::conflict(r.into()))?;
        tracing::info!(spec = %spec.name, vmid, snapshot = %oldest, keep, "deleting proxsync's older snapshot (changePolicy.keep)");
        let upid = client
            .delete_snapshot(node, kind, vmid, &oldest, &permit)
            .await?;
        if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
            ctx.store.put(&spec.name, rec)?;
            return Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            });
        }
        rec.changes_mut(vmid).snapshots.remove(0);
        ctx.store.put(&spec.name, rec)?;
    }
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::whole;
    use crate::pve::types::Snapshot;

    /// A snapshot listed `prepare` (being taken, or left so by a task that died) or `delete`
    /// is not taken: no change is guarded by it, no rollback goes to it.
    #[test]
    fn a_snapshot_being_taken_or_deleted_is_not_whole() {
        let snap = |state: Option<&str>| Snapshot {
            name: "proxsync-1".into(),
            snaptime: Some(1),
            description: String::new(),
            snapstate: state.map(str::to_string),
        };
        assert!(whole(&snap(None)));
        assert!(!whole(&snap(Some("prepare"))));
        assert!(!whole(&snap(Some("delete"))));
    }
}
