//! Moving a VM to the node its spec names, within its cluster: PVE's own migration (live for a
//! running VM), never a recreate. The VM's identity and lock are checked first, then PVE's
//! pre-check says what would block it; a VM that cannot move is left where it is and reported
//! with PVE's reason.

use crate::guest::GuestKind;
use crate::model::{Blocked, Wait};
use crate::pve::{Pve, TaskOutcome, Upid};
use crate::spec::Spec;
use crate::store::{SpecRecord, VmState};

use super::converge::converge;
use super::vm::{check_lock, read_own_config};
use super::{ActionError, ExecCtx, Outcome, VmRef, blocked, site, wait};

pub(super) async fn migrate(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    target: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let site = site(ctx, vm.site)?;
    let client = &site.client;
    let (cfg, _) = read_own_config(ctx, client, vm, spec, rec).await?;
    // A migration already under way (ours from before a restart, or the HA manager's) holds
    // the `migrate` lock: wait for it rather than ask again.
    if let Some(waiting) = check_lock(ctx, site, node, kind, vmid, &cfg).await? {
        return Ok(waiting);
    }
    let upid = match kind {
        GuestKind::Qemu => start_vm_migration(client, vm, target, spec).await?,
        GuestKind::Lxc => {
            // A container cannot move live: PVE shuts it down within the spec's
            // shutdownTimeout (never hard: one still up fails the task, reported, and the move
            // is tried again), moves it with its local volumes and starts it on the target. An
            // HA-managed one's move is the HA manager's (`hamigrate`), which takes no timeout:
            // its relocation shuts the container down within HA's own 60 s, clean
            // (pve-ha-manager `PVECT.pm` `migrate` -> `shutdown` without one: `$timeout // 60`),
            // and one still up then stays where it is, running.
            tracing::info!(
                spec = %spec.name, vmid, from = node, to = target,
                "migrating the container to the node its spec names (a restart migration)"
            );
            client
                .migrate_ct(node, vmid, target, true, spec.reboot.shutdown_timeout_secs)
                .await?
        }
    };
    finish_migration(ctx, vm, target, spec, rec, upid).await
}

/// A VM's migration: PVE's pre-check says what would block it, then the migrate task (live
/// for a running VM).
async fn start_vm_migration(
    client: &impl Pve,
    vm: VmRef<'_>,
    target: &str,
    spec: &Spec,
) -> Result<Upid, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let pre = client
        .migrate_precondition(node, kind, vmid, target)
        .await?;
    if let Some(why) = pre.blocker(target) {
        // A configuration error: a human must act (the spec is `Stalled`).
        return Err(blocked(Blocked::Unmovable {
            kind,
            vmid,
            node: node.to_string(),
            target: target.to_string(),
            why,
        }));
    }
    // Always `online`: PVE refuses a running VM without it and migrates a stopped one offline
    // with it (qemu-server `PVE/API2/Qemu.pm` `migrate_vm`: `warn "VM isn't running. Doing
    // offline migration instead.\n" if $param->{online}`), so a VM started after the pre-check
    // still moves.
    let online = true;
    let with_local_disks = pre.needs_local_disks();
    tracing::info!(
        spec = %spec.name, vmid, from = node, to = target, online, with_local_disks,
        "migrating the VM to the node its spec names"
    );
    Ok(client
        .migrate_vm(node, vmid, target, online, with_local_disks)
        .await?)
}

/// After the migrate task was sent: recorded, waited for, and the guest recorded on its new
/// node (an HA-managed one when the HA manager has moved it).
async fn finish_migration(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    target: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    upid: Upid,
) -> Result<Outcome, ActionError> {
    let vmid = vm.vmid;
    let client = &site(ctx, vm.site)?.client;
    rec.set_task(super::task_record(ctx, &upid, "running"));
    ctx.store.put(&spec.name, rec)?;
    if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
        return Ok(Outcome::StillRunning {
            upid: upid.to_string(),
        });
    }
    if upid.kind == "hamigrate" {
        // The HA manager moves the guest after this task ends; the listing shows when.
        return Ok(Outcome::Waiting(Wait::HaMigrating {
            kind: vm.kind,
            vmid,
            target: target.to_string(),
        }));
    }
    ctx.store.transition(
        &spec.name,
        rec,
        VmState::Exists {
            vmid,
            node: target.into(),
        },
    )?;
    // The spec changed (its node at least): bring the VM in line where it is now.
    converge(ctx, vm.on(target), spec, rec).await
}
