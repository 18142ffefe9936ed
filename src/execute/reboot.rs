//! Rebooting a running VM to apply what PVE keeps pending until its next start, when the
//! spec's `rebootPolicy` allows it now: a clean shutdown (hard only after `forceStopAfter`),
//! then a start. At most `max_parallel_reboots` per site and cycle, and at most one per VM per
//! [`crate::plan::MIN_REBOOT_INTERVAL`]. A crash between the two leaves a stopped VM whose spec says
//! running: the next cycle starts it, which applies the pending changes too.
//!
//! Each kind's own rule: an HA-managed VM without `forceStopAfter` gets PVE's reboot, which is
//! clean in qemu-server ([`ha_reboot`]). A container never does: pve-container's reboot kills
//! it once the timeout passes (`src/PVE/LXC.pm` `vm_reboot`: `vm_stop($vmid, 0, $timeout, 1);
//! # kill if timeout exceeds`), so a container is always shut down (with `shutdownTimeout`, or
//! `forceStopAfter` and hard after it) and started. An HA-managed one's shutdown is the HA
//! manager's, which is clean for a container (pve-ha-manager `PVECT.pm` `shutdown` passes no
//! `forceStop`): one that does not stop in time is left running, its service in `error`.

use crate::guest::GuestKind;
use crate::model::Blocked;
use crate::plan::reboot_due;
use crate::pve::types::PendingEntry;
use crate::pve::{Pve, TaskOutcome};
use crate::spec::Spec;
use crate::store::SpecRecord;

use super::vm::settle_ha;
use super::{ActionError, ExecCtx, Outcome, SiteCtx, VmRef, blocked, wait};

/// The keys proxsync manages that wait for the VM's next start (what `RebootPending` shows).
pub(super) fn pending_keys(pending: &[PendingEntry]) -> Vec<String> {
    pending
        .iter()
        .filter(|p| p.is_pending() && crate::render::current::reported_pending(&p.key))
        .map(|p| p.key.clone())
        .collect()
}

/// Reboots the VM if its policy wants it now and a reboot slot of its site is free. `None`
/// when nothing was done (nothing pending, not allowed now, no slot); `Some` with the outcome
/// when the reboot could not finish in this action.
pub(super) async fn reboot_if_due(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Option<Outcome>, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    if !reboot_due(spec, rec, ctx.clock.now_ms()) {
        return Ok(None);
    }
    let Some(_slot) = ctx
        .reboot_slots
        .try_take(&site.name, ctx.max_parallel_reboots)
    else {
        tracing::info!(spec = %spec.name, vmid, "reboot due; waiting for a reboot slot of the site");
        return Ok(None);
    };
    let client = &site.client;
    let policy = &spec.reboot;
    let (timeout, force) = match policy.force_stop_after_secs {
        Some(secs) => (secs, true),
        None => (policy.shutdown_timeout_secs, false),
    };
    // Never a container's: pve-container's reboot stops hard after the timeout.
    if !force && kind == GuestKind::Qemu && ha_managed(ctx, site, vmid, spec) {
        return ha_reboot(ctx, site, vm, spec, rec, timeout).await;
    }
    tracing::info!(
        spec = %spec.name, vmid, pending = ?rec.reboot_pending, timeout, force,
        "rebooting the VM to apply its pending changes (rebootPolicy)"
    );
    let upid = client.shutdown_vm(node, kind, vmid, timeout, force).await?;
    match wait(ctx, client, &upid, rec).await {
        Ok(TaskOutcome::StillRunning) => {
            return Ok(Some(Outcome::StillRunning {
                upid: upid.to_string(),
            }));
        }
        Ok(_) => {
            if let Some(o) = settle_ha(ctx, client, node, kind, vmid, &upid, false).await? {
                return Ok(Some(o));
            }
        }
        Err(e) if e.task_failed && !force => return Err(given_up(kind, vmid, timeout, e)),
        Err(e) => return Err(e.into()),
    }
    // Stopped: this counts as a reboot (a guest that refused to shut down did not, and is
    // retried with the usual backoff, or at once when the spec changes).
    rec.last_reboot_ms = Some(ctx.clock.now_ms());
    ctx.store.put(&spec.name, rec)?;
    let upid = client.start_vm(node, kind, vmid).await?;
    if let TaskOutcome::StillRunning = wait(ctx, client, &upid, rec).await? {
        return Ok(Some(Outcome::StillRunning {
            upid: upid.to_string(),
        }));
    }
    if let Some(o) = settle_ha(ctx, client, node, kind, vmid, &upid, true).await? {
        return Ok(Some(o));
    }
    rec.reboot_pending = pending_keys(&client.vm_pending(node, kind, vmid).await?);
    Ok(None)
}

/// The guest did not power off within `timeout`: it keeps running, its changes pending. A
/// VM's shutdown is the guest's ACPI (or agent) shutdown; a container's is its init's.
fn given_up(kind: GuestKind, vmid: u32, timeout: u32, e: super::WaitError) -> ActionError {
    let why = ActionError::from(e).message;
    blocked(Blocked::RebootGivenUp {
        kind,
        vmid,
        timeout,
        why,
    })
}

/// Whether the VM is HA-managed: the spec puts it under the HA manager, or the listing shows
/// a state of the HA manager (a resource a person added).
fn ha_managed(ctx: &ExecCtx<impl Pve>, site: &SiteCtx<impl Pve>, vmid: u32, spec: &Spec) -> bool {
    spec.ha
        .as_ref()
        .is_some_and(|ha| ha.state != crate::spec::HaState::Ignored)
        || ctx
            .views
            .get(&site.name)
            .and_then(|v| v.vms.get(&vmid))
            .is_some_and(|vm| vm.ha_state.is_some())
}

/// An HA-managed VM without `forceStopAfter`: its shutdown would be the HA manager's, which
/// stops the guest hard once the timeout passes (pve-ha-manager `PVE/HA/Resources/PVEVM.pm`
/// `shutdown`: `forceStop => 1`), so it is rebooted with PVE's own reboot instead, which is
/// no HA request: a clean shutdown within `timeout`, failing rather than stopping hard, after
/// which PVE starts the VM again with its pending changes (qemu-server `vm_reboot`). Only a
/// VM's: a container's reboot kills it after the timeout (see the module's doc).
async fn ha_reboot(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    timeout: u32,
) -> Result<Option<Outcome>, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let client = &site.client;
    tracing::info!(
        spec = %spec.name, vmid, pending = ?rec.reboot_pending, timeout,
        "rebooting the HA-managed VM with PVE's reboot (clean only) to apply its pending changes (rebootPolicy)"
    );
    let upid = client.reboot_vm(node, kind, vmid, timeout).await?;
    match wait(ctx, client, &upid, rec).await {
        Ok(TaskOutcome::StillRunning) => {
            return Ok(Some(Outcome::StillRunning {
                upid: upid.to_string(),
            }));
        }
        Ok(_) => {}
        Err(e) if e.task_failed => return Err(given_up(kind, vmid, timeout, e)),
        Err(e) => return Err(e.into()),
    }
    rec.last_reboot_ms = Some(ctx.clock.now_ms());
    ctx.store.put(&spec.name, rec)?;
    rec.reboot_pending = pending_keys(&client.vm_pending(node, kind, vmid).await?);
    Ok(None)
}

/// Reboots started per site this cycle.
#[derive(Default)]
pub(crate) struct RebootSlots(std::sync::Mutex<std::collections::HashMap<String, u32>>);

impl RebootSlots {
    /// A slot of `site` if fewer than `max` reboots were started there this cycle.
    fn try_take(&self, site: &str, max: u32) -> Option<()> {
        let mut started = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = started.entry(site.to_string()).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::category::Category;
    use crate::execute::fail;

    fn failed() -> super::super::WaitError {
        super::super::WaitError {
            task_failed: true,
            error: fail(Category::TaskFailed, "shutdown timed out"),
        }
    }

    /// A container's given-up reboot names it a container and gives a container's advice; a
    /// VM's keeps its ACPI advice.
    #[test]
    fn a_given_up_reboot_names_the_guest_and_advises_for_its_kind() {
        let ct = given_up(GuestKind::Lxc, 101, 60, failed()).message;
        assert!(
            ct.starts_with("the reboot of container 101 was given up: the container did not"),
            "{ct}"
        );
        assert!(ct.contains("set forceStopAfter"), "{ct}");
        assert!(
            !ct.contains("ACPI") && !ct.contains("qemu-guest-agent"),
            "{ct}"
        );
        let vm = given_up(GuestKind::Qemu, 100, 60, failed()).message;
        assert!(vm.starts_with("the reboot of VM 100 was given up"), "{vm}");
        assert!(vm.contains("qemu-guest-agent or acpid"), "{vm}");
    }
}
