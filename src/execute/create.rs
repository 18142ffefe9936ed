//! Creating a spec's VM: VMID allocation, the durable intent, the create or clone request and
//! its task, resuming an interrupted create, and adopting a VM that carries the spec's marker.

use std::time::Duration;

use crate::category::Category;
use crate::gate::rename::{self, Evidence, Recorded, Relabeled, may_relabel};
use crate::guest::GuestKind;
use crate::model::{Blocked, Interrupted, Note, Unfit, Wait};
use crate::ownership::{Marker, new_uid};
use crate::pve::texts;
use crate::pve::{CloneRequest, Error as PveError, LockHolder, Pve, TaskOutcome, Upid, VmParams};
use crate::render::vm::Boot;
use crate::spec::{Guest, Spec};
use crate::store::{CloneSource, SpecRecord, VmState};

use super::converge::{adoption_is_current, converge, converge_new};
use super::identity::{checked_site, desired_tags, marker, verified};
use super::intent::{Found, Known, inspect, inspect_known, record_created};
use super::preflight::{Source, preflight};
use super::vmid::SiteAllocator;
use super::{
    ActionError, ExecCtx, Outcome, SiteCtx, VmRef, blocked, fail, site, task_record, wait,
};

/// Preflight (and an OCI image's pull), then the allocation loop (intent, request, answer),
/// whose every arm keeps the invariant in place: the intent is durable before the request.
// Long because: the create's steps in their order (the old guest shown gone, pre-flight, the
// pull, then intent before request in each arm of the loop), one invariant across them.
pub(super) async fn create(
    ctx: &ExecCtx<impl Pve>,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let site = site(ctx, site_name)?;
    confirm_gone(ctx, site, spec, rec).await?;
    let source = preflight(&ctx.reads(), site, spec).await?;
    // An OCI image not on the node yet is pulled before any VMID is reserved.
    let source = match super::oci::pulled(ctx, site, &spec.node, source).await? {
        super::oci::Pulled::Ready(source) => source,
        super::oci::Pulled::Running(wait) => return Ok(Outcome::Waiting(wait)),
    };
    if rec.uid.is_empty() {
        rec.uid = new_uid().into();
    }
    rec.site = site_name.into();
    rec.follow(spec);
    let clone_of = match &source {
        Source::Clone {
            template,
            template_node,
        } => Some(CloneSource {
            node: template_node.clone(),
            vmid: *template,
        }),
        _ => None,
    };

    let sent = {
        let mut allocator = site.allocator.lock().await;
        let mut skip: Vec<u32> = ctx.store.allocations(site_name)?.into_keys().collect();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let vmid = match spec.hardware.vm_id {
                Some(pinned) => pinned_vmid(&site.client, &skip, pinned).await?,
                None => free_vmid(ctx, site, &mut allocator, &skip).await?,
            };
            // The intent is durable, its VMID reserved in the same transaction, before the
            // request leaves.
            let intent = VmState::Creating {
                vmid,
                node: spec.node.clone(),
                task: None,
                started_ms: ctx.clock.now_ms(),
                clone_of: clone_of.clone(),
            };
            // The new VM's `destroyDisks` are followed from its start: each is bound to what
            // its slot holds when first applied (a template's disk, for a clone).
            rec.destroy_disks_vmid = Some(vmid);
            // What the intent makes: a later change of the spec's kind is held, not answered.
            rec.kind = spec.kind();
            // What it is made from: a later version of its image is another file.
            rec.made_from = made_from(ctx, spec);
            // A `ProxmoxTemplate`'s VM: turned into a template, it stays the spec's.
            rec.built_template = spec.template.is_some();
            if let Some(v) = rec.volumes.as_mut() {
                v.destroys.clear();
            }
            ctx.store.transition(&spec.name, rec, intent)?;
            tracing::info!(spec = %spec.name, vmid, node = %spec.node, "creating");
            match send_create(ctx, site, spec, rec, vmid, &source).await {
                Ok(upid) => {
                    rec.set_task(task_record(ctx, &upid, "running"));
                    record_task(ctx, &spec.name, rec, &upid)?;
                    tracing::info!(spec = %spec.name, vmid, upid = %upid, "create task started");
                    break Ok((vmid, upid));
                }
                Err(e) if e.is_already_exists() && attempt < 5 && spec.hardware.vm_id.is_none() => {
                    // Someone took the id after the listing (or nextid) showed it free, or the
                    // listing could not show it: take the next one, never the VM at this id
                    // (this one's reservation goes with the intent).
                    ctx.store.transition(&spec.name, rec, VmState::Absent)?;
                    skip.push(vmid);
                }
                Err(e) if e.surely_not_executed() => {
                    // PVE refused it before doing anything: nothing was created.
                    abandon(ctx, spec, rec)?;
                    break Err(e);
                }
                Err(e) => {
                    // Anything else (a 5xx, a lost or unreadable answer) may have started the
                    // create: the intent stays, and the next cycle reads what became of it.
                    tracing::warn!(spec = %spec.name, vmid, error = %e, "create request ended without an answer; keeping the intent");
                    return Err(e.into());
                }
            }
        }
    };
    // The site's allocation is free again: a refused clone may wait for its template here.
    let (vmid, upid) = match sent {
        Ok(sent) => sent,
        Err(e) => return refused(ctx, site, spec, clone_of.as_ref(), e).await,
    };
    finish_create(
        ctx,
        site,
        spec,
        rec,
        VmRef::new(site_name, &spec.node, spec.kind(), vmid),
        &upid,
        JustSent::Yes,
    )
    .await
}

/// A create or clone PVE refused before doing anything (its intent released). A clone refused
/// because its template is locked waits for the task that holds the lock, up to the task wait,
/// and is then tried again in this cycle ([`super::ActionError::again`]): pve-container's
/// clone locks its source `disk` for the whole copy (`set_lock($vmid, 'disk')` in clone_vm),
/// so a second clone of one CT template is refused `CT is locked (disk)` while the first
/// copies; a backup's `lock: backup` refuses a VM template's (qemu-server clone_vm's
/// check_lock). While the task still runs the spec waits; a template locked with no task that
/// can hold the lock is a stale lock only a person can clear (`pct unlock`, `qm unlock`).
async fn refused(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    clone_of: Option<&CloneSource>,
    e: PveError,
) -> Result<Outcome, ActionError> {
    let (Some(template), Some(lock)) = (clone_of, texts::held_lock(e.pve_message())) else {
        return Err(e.into());
    };
    let (kind, id, node) = (spec.kind(), template.vmid, &template.node);
    let holder = LockHolder::of(lock);
    if holder == LockHolder::Command {
        // Tried again at the next cycle: no task to wait for.
        return Ok(Outcome::Waiting(Wait::TemplateCommandLock {
            kind,
            vmid: id,
            node: node.clone(),
            lock: lock.to_string(),
        }));
    }
    let tasks = site.client.active_tasks(node).await?;
    let Some(upid) = tasks
        .iter()
        .filter(|t| holder.may_be(&t.task_type().unwrap_or_default(), &t.task_id(), id))
        .find_map(|t| t.upid.parse::<Upid>().ok())
    else {
        return Err(blocked(Blocked::StaleTemplateLock {
            kind,
            vmid: id,
            node: node.clone(),
            lock: lock.to_string(),
        }));
    };
    tracing::info!(spec = %spec.name, template = id, lock, upid = %upid, "the template is locked by a running task; waiting for it before cloning");
    match super::wait_until_stop(ctx, &site.client, &upid).await {
        Ok(TaskOutcome::StillRunning) => Ok(Outcome::Waiting(Wait::TemplateLocked {
            kind,
            vmid: id,
            lock: lock.to_string(),
            task: upid.to_string(),
        })),
        Ok(_) | Err(PveError::TaskFailed { .. }) => Err(ActionError {
            again: true,
            ..e.into()
        }),
        Err(other) => Err(other.into()),
    }
}

/// The plan creates a guest for a spec whose record still names one (this cycle's listing did
/// not show it): it is gone only when PVE says so, its VMID free over the whole cluster (`GET
/// /cluster/nextid?vmid=N`, one request; a config read asks only one node). A listing that
/// lost the guest (an answer garbled on its way, a token that cannot see it) makes no second
/// guest: the record stays, and nothing is created.
async fn confirm_gone(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<(), ActionError> {
    let Some(vmid) = rec.vm.made_vmid().filter(|_| rec.site == site.name) else {
        return Ok(());
    };
    if !site.client.vmid_is_free(vmid).await? {
        return Err(blocked(Blocked::HiddenFromListing {
            kind: rec.kind,
            vmid,
            site: site.name.clone(),
        }));
    }
    tracing::info!(spec = %spec.name, vmid, "the spec's guest is gone: PVE says its VMID is free");
    let note = Note::MadeAnew {
        kind: rec.kind,
        vmid,
    };
    rec.note(ctx.clock.now_ms(), "create", &note.to_string());
    ctx.store.transition(&spec.name, rec, VmState::Absent)?;
    Ok(())
}

/// The version a spec's guest is made from, if the repository versions it: its
/// `ProxmoxImage`'s file, or its `ProxmoxTemplate`'s VM ([`Spec::made_from_now`]).
fn made_from(ctx: &ExecCtx<impl Pve>, spec: &Spec) -> Option<Box<crate::store::MadeFrom>> {
    let file = spec.made_from_now(&ctx.images)?.to_string();
    Some(Box::new(crate::store::MadeFrom { file }))
}

/// Records the task of the create in flight (its answer, or the task found after a restart).
fn record_task(
    ctx: &ExecCtx<impl Pve>,
    spec_name: &str,
    rec: &mut SpecRecord,
    upid: &Upid,
) -> Result<(), ActionError> {
    if let VmState::Creating {
        vmid,
        node,
        started_ms,
        clone_of,
        ..
    } = rec.vm.clone()
    {
        let with_task = VmState::Creating {
            vmid,
            node,
            task: Some(Box::new(upid.clone())),
            started_ms,
            clone_of,
        };
        ctx.store.transition(spec_name, rec, with_task)?;
    }
    Ok(())
}

/// The spec's pinned `vmId`, when PVE calls it free and no other intent of ours holds it.
async fn pinned_vmid(client: &impl Pve, skip: &[u32], vmid: u32) -> Result<u32, ActionError> {
    if skip.contains(&vmid) || !client.vmid_is_free(vmid).await? {
        return Err(blocked(Blocked::PinnedVmidHeld { vmid }));
    }
    Ok(vmid)
}

/// The VMID of a new VM (see `vmid` for what PVE's `nextid` does and why this is the same
/// id without its request): the lowest id of the site's `next-id` range that this cycle's
/// listing (QEMU and LXC), our intents in flight (`skip`) and this cycle's earlier allocations
/// leave free; `/cluster/nextid` only when the range has no such gap, or the range or the
/// listing is unknown. The caller holds the site's allocation lock.
async fn free_vmid(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    allocator: &mut SiteAllocator,
    skip: &[u32],
) -> Result<u32, ActionError> {
    if let Some(view) = ctx.views.get(&site.name).filter(|v| v.reachable())
        && let Some(range) = allocator.range(&site.client).await
    {
        let taken = |id: u32| {
            view.vms.contains_key(&id) || view.other_vmids.contains(&id) || skip.contains(&id)
        };
        if let Some(id) = ctx.vmid_cursors.take(&site.name, range, taken) {
            return Ok(id);
        }
        tracing::info!(site = %site.name, lower = range.lower, upper = range.upper, "no free VMID left in the listing's range; asking /cluster/nextid");
    }
    next_free_vmid(&site.client, skip).await
}

/// The lowest id PVE calls free that we have not reserved ourselves.
async fn next_free_vmid(client: &impl Pve, skip: &[u32]) -> Result<u32, ActionError> {
    let first = client.next_id().await?;
    // PVE just called it free; only ids past our own reservations need asking again.
    if !skip.contains(&first) {
        return Ok(first);
    }
    let mut id = first;
    for _ in 0..1000 {
        id = id.saturating_add(1);
        if !skip.contains(&id) && client.vmid_is_free(id).await? {
            return Ok(id);
        }
    }
    Err(fail(
        Category::QuotaExceeded,
        "no free VMID found near /cluster/nextid",
    ))
}

async fn send_create(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    rec: &SpecRecord,
    vmid: u32,
    source: &Source,
) -> Result<Upid, PveError> {
    let vm = match &spec.guest {
        Guest::Vm(vm) => vm,
        Guest::Container(ct) => {
            return super::container::send_create(ctx, site, spec, ct, rec, vmid, source).await;
        }
    };
    // Identity travels in the creating call (name and marker; tags where PVE takes them), so
    // a finished create or clone is recognisable without a second request.
    let signed = marker(ctx, spec, rec, vmid);
    let boot = match source {
        Source::Clone {
            template,
            template_node,
        } => {
            let req = clone_request(spec, vmid, signed.description(), template_node);
            return site.client.clone_vm(template_node, *template, &req).await;
        }
        Source::OsTemplate { .. } | Source::OciPull { .. } => {
            return Err(PveError::Setup(
                Unfit::WrongSource {
                    spec: spec.name.to_string(),
                    kind: GuestKind::Qemu,
                }
                .to_string(),
            ));
        }
        Source::Import { volume } => Boot::Import(volume),
        Source::Iso { volume } => Boot::Installer(volume),
    };
    let description = match &spec.hardware.description {
        Some(text) => signed.replace_in(text),
        None => signed.description(),
    };
    let tags = desired_tags(ctx, spec);
    let params = crate::render::vm::create_params(spec, vm, description, &tags, boot)?;
    site.client.create_vm(&spec.node, vmid, &params).await
}

/// The clone of a template for spec's new guest `vmid` (a VM's or a container's): a full copy
/// on the spec's storage, to the spec's node when the template is elsewhere, in its pool,
/// its name and marker (`description`) in the request.
pub(super) fn clone_request(
    spec: &Spec,
    vmid: u32,
    description: String,
    template_node: &str,
) -> CloneRequest {
    CloneRequest {
        newid: vmid,
        name: spec.guest_name().to_string(),
        description,
        full: true,
        storage: Some(spec.root_storage().to_string()),
        target: (template_node != spec.node).then(|| spec.node.to_string()),
        pool: spec.hardware.pool.clone(),
    }
}

/// Whether this action sent the create (its task's VM is as PVE made it: stopped, nothing
/// pending) or resumes one sent before (anything may have happened to the VM since).
#[derive(Clone, Copy, PartialEq, Eq)]
enum JustSent {
    Yes,
    No,
}

/// After the create task: wait, record the VM, configure it. Only a task that ended (with
/// the VMID then verifiably free) releases the intent; a failed poll keeps it.
async fn finish_create(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec: &Spec,
    rec: &mut SpecRecord,
    vm: VmRef<'_>,
    upid: &Upid,
    sent: JustSent,
) -> Result<Outcome, ActionError> {
    match wait(ctx, &site.client, upid, rec).await {
        Ok(TaskOutcome::StillRunning) => Ok(Outcome::StillRunning {
            upid: upid.to_string(),
        }),
        Ok(_) => {
            // The task ended well; converge re-reads the config and verifies the marker first.
            record_created(ctx, &spec.name, rec, vm.vmid, vm.node)?;
            if sent == JustSent::Yes {
                converge_new(ctx, vm, spec, rec).await
            } else {
                converge(ctx, vm, spec, rec).await
            }
        }
        Err(e) if e.task_failed => {
            // The task ended badly. What it left decides: our VM (kept, converged next time),
            // nothing (the intent is released), or something still busy (kept).
            let known = match sent {
                JustSent::Yes => Known::OwnTaskEnded,
                JustSent::No => Known::TaskEnded,
            };
            match inspect_known(ctx, site, &spec.name, rec, vm.kind, vm.vmid, known).await? {
                Found::Ours(node) => record_created(ctx, &spec.name, rec, vm.vmid, &node)?,
                Found::Free | Found::Foreign => abandon(ctx, spec, rec)?,
                Found::Busy { .. } | Found::Stale { .. } => {}
            }
            Err(e.error)
        }
        Err(e) => {
            // We could not see how it ended (a failed poll): the task may still be making the
            // VM. The intent and its UPID stay; the next cycle waits again.
            Err(e.error)
        }
    }
}

pub(super) async fn resume_create(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    upid: Option<Upid>,
) -> Result<Outcome, ActionError> {
    let site = site(ctx, vm.site)?;
    // The intent makes the other kind of guest than the spec now asks for (the planner holds
    // such a spec; this is the last line): neither finished as the new kind nor made again.
    if vm.kind != spec.kind() {
        return Err(blocked(Blocked::KindChanged {
            kind: vm.kind,
            vmid: vm.vmid,
            now: spec.kind(),
        }));
    }
    if let Some(upid) = upid {
        tracing::info!(spec = %spec.name, vmid = vm.vmid, upid = %upid, "resuming the wait for a create task");
        return finish_create(ctx, site, spec, rec, vm, &upid, JustSent::No).await;
    }
    // The intent was recorded but not the answer: the request may or may not have reached
    // PVE. Look (and wait while something may still become ours) before anything else.
    let deadline = tokio::time::Instant::now() + ctx.task_wait;
    let mut pause = Duration::from_millis(500);
    loop {
        match inspect(ctx, site, &spec.name, rec, vm.kind, vm.vmid, false).await? {
            Found::Ours(node) => {
                tracing::info!(spec = %spec.name, vmid = vm.vmid, "found the VM of an interrupted create");
                record_created(ctx, &spec.name, rec, vm.vmid, &node)?;
                return converge(ctx, VmRef::new(vm.site, &node, vm.kind, vm.vmid), spec, rec)
                    .await;
            }
            Found::Busy {
                upid: Some(upid), ..
            } => {
                tracing::info!(spec = %spec.name, vmid = vm.vmid, upid = %upid, "found the running task of an interrupted create");
                record_task(ctx, &spec.name, rec, &upid)?;
                return finish_create(ctx, site, spec, rec, vm, &upid, JustSent::No).await;
            }
            Found::Busy { wait, upid: None } => {
                if tokio::time::Instant::now() + pause > deadline || *ctx.shutdown.borrow() {
                    return Ok(Outcome::Waiting(wait));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Found::Stale { lock, node } => {
                return Err(blocked(Blocked::InterruptedCreate {
                    kind: vm.kind,
                    vmid: vm.vmid,
                    node,
                    lock,
                    of: Interrupted::Resumed,
                }));
            }
            found @ (Found::Foreign | Found::Free) => {
                let found = if matches!(found, Found::Foreign) {
                    "someone else's VM"
                } else {
                    "nothing"
                };
                tracing::info!(spec = %spec.name, vmid = vm.vmid, found, "the interrupted create never made a VM; creating anew");
                abandon(ctx, spec, rec)?;
                return create(ctx, vm.site, spec, rec).await;
            }
        }
    }
}

/// Drops a create intent that made nothing, with its VMID reservation.
fn abandon(ctx: &ExecCtx<impl Pve>, spec: &Spec, rec: &mut SpecRecord) -> Result<(), ActionError> {
    ctx.store.transition(&spec.name, rec, VmState::Absent)?;
    Ok(())
}

/// `unwritten`: set to the state the store still holds when the adoption is done with its
/// state changed in `rec` only (a guest already as its spec says): the outcome writes it.
pub(super) async fn adopt(
    ctx: &ExecCtx<impl Pve>,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
    unwritten: &mut Option<VmState>,
) -> Result<Outcome, ActionError> {
    site(ctx, site_name)?;
    // The marker was read from the VM's config this cycle (that is why the plan adopts);
    // converge reads the config again and re-verifies it before changing anything.
    let vm = ctx.views.get(site_name).and_then(|v| v.vms.get(&vmid));
    let node = vm
        .map(|vm| vm.node.clone())
        .unwrap_or_else(|| spec.node.clone());
    let Some(m) = vm
        .filter(|vm| vm.marker_verified)
        .and_then(|vm| vm.marker.clone())
        .filter(|m| m.spec == spec.name)
    else {
        let kind = vm.map_or(spec.kind(), |vm| vm.kind);
        return Err(blocked(Blocked::NoMarkerOfSpec {
            kind,
            vmid,
            spec: spec.name.to_string(),
        }));
    };
    let uid = if m.install == ctx.install_id {
        m.uid.clone()
    } else {
        // Handed over by another install: it becomes this install's first.
        let site = site(ctx, site_name)?;
        match super::handover::take_over(ctx, site, &node, spec.kind(), spec, vmid).await? {
            super::handover::TakeOver::Taken(uid) => uid.into(),
            super::handover::TakeOver::Not(outcome) => return Ok(outcome),
        }
    };
    tracing::info!(spec = %spec.name, vmid, "adopting the VM carrying this spec's marker");
    rec.uid = uid;
    rec.site = site_name.into();
    // `Provisioned` says Adopted for a VM this record did not see made (a lost database, a
    // hand-over); a record that already had it keeps what it said.
    rec.adopted = rec.adopted || !rec.provisioned;
    rec.provisioned = true;
    rec.follow(spec);
    rec.kind = vm.map_or(spec.kind(), |vm| vm.kind);
    // The marker names a `ProxmoxTemplate`'s version: the VM (a template or not yet) was
    // made for it.
    rec.built_template = spec.template.is_some();
    let adopted = VmState::Exists {
        vmid,
        node: node.clone(),
    };
    // Written without waiting for the disk (the cycle's end makes it durable): a lost adoption
    // is found again by the marker, as with a lost database, and 50,000 fsyncs were most of an
    // empty-database start. Judged on the adopted record; written before a converge, else
    // once with the outcome (`Store::put_adopted_lazily`): two writes were most of the CPU
    // of 50,000 adoptions.
    let found = std::mem::replace(&mut rec.vm, adopted.clone());
    // A VM that already matches its spec is recorded as it is, from the config this cycle's
    // observation read (its marker verified for this VMID) and the listing: nothing is sent,
    // so no request re-verifies the identity. That is safe because recording changes nothing
    // on the VM, and every later change, shutdown or delete reads the config again and checks
    // the marker first (`read_own_config`). The guest's addresses are not read here; the next
    // converge reads them.
    let fresh = ctx.fresh_configs.get(&(site_name.to_string(), vmid));
    if let Some(cfg) = fresh {
        // Its marker verified in this cycle's read of this config.
        rec.remember_identity(vmid, cfg.guest_id(rec.kind));
    }
    if let (Some(vm), Some(cfg)) = (vm, fresh)
        && adoption_is_current(ctx, site_name, spec, rec, vm, cfg)
    {
        rec.applied_tags = spec.tags.clone();
        rec.applied_hash = Some(crate::spec::spec_hash(spec).into());
        rec.applied_content = Some(crate::spec::content_hash(spec).into());
        rec.applied_protection = spec.hardware.protection;
        // No `destroyDisks` (`adoption_is_current`): one listed later is first applied then.
        rec.destroy_disks_vmid = Some(vmid);
        if let Some(v) = rec.volumes.as_mut() {
            v.destroys.clear();
        }
        rec.tidy_volumes();
        rec.reboot_pending.clear();
        rec.ip_addresses.clear();
        *unwritten = Some(found);
        return Ok(Outcome::Done);
    }
    rec.vm = found;
    ctx.store.transition_lazily(&spec.name, rec, adopted)?;
    converge(
        ctx,
        VmRef::new(site_name, &node, spec.kind(), vmid),
        spec,
        rec,
    )
    .await
}

/// A confirmed rename of `metadata.name`: the VM of spec `from` becomes `spec`'s. The gate
/// (`gate::rename`) is asked again with the config read here, right before anything is written:
/// the VM's marker must name `from` with the old spec's uid (its record's; without one, after a
/// lost database, the marker's own, its MAC verifying), or already name `spec` with it. The
/// marker is re-signed for the new name first, then the record moves in one transaction (`old`,
/// the old spec's record; without one, the new spec's record is written as an adoption's).
/// Interrupted between the two (a crash, a lost answer), the next attempt finds the marker
/// already naming the new spec with the recorded uid and only moves the record.
// Long because: the marker re-signed, then the record moved in one transaction, each step
// checked against the evidence in its order; interrupted, the next attempt resumes between them.
pub(super) async fn relabel(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    from: &str,
    old: Option<SpecRecord>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let site = site(ctx, vm.site)?;
    if let Some(r) = &old
        && matches!(r.vm, VmState::Creating { .. } | VmState::Deleting { .. })
    {
        return Err(blocked(Blocked::RelabelInFlight {
            from: from.to_string(),
            kind: r.kind,
            vmid: r.vmid().unwrap_or_default(),
            guest: vm.kind,
            guest_vmid: vm.vmid,
        }));
    }
    // Only a record with a VM is evidence, and moves; an empty one is dropped after.
    let (moved, empty) = match old {
        Some(r) if r.vm.made_vmid().is_some() => (Some(r), false),
        Some(_) => (None, true),
        None => (None, false),
    };
    let checked = checked_site(ctx, vm.site)?;
    let cfg = site.client.vm_config(vm.node, vm.kind, vm.vmid).await?;
    let found = cfg.description().and_then(Marker::parse);
    let record = moved.as_ref().and_then(|r| {
        Some(Recorded {
            site: &r.site,
            vmid: r.vm.made_vmid()?,
            uid: &r.uid,
        })
    });
    let refused = |why: String| {
        blocked(Blocked::NotRelabelled {
            kind: vm.kind,
            vmid: vm.vmid,
            from: from.to_string(),
            to: spec.name.to_string(),
            why,
        })
    };
    // What the config shows, as the planner judged it: the refusal says why in its words.
    let evidence = Evidence {
        kind: vm.kind,
        vmid: vm.vmid,
        site: vm.site,
        marker: found.as_ref(),
        mac_verifies: found
            .as_ref()
            .is_some_and(|m| m.verifies(&ctx.marker_key, vm.vmid)),
        record,
    };
    may_relabel(&ctx.install_id, from, &spec.name, &spec.site, &evidence)
        .map_err(|why| refused(why.to_string()))?;
    // The gate's permit, from the marker verified for this VMID on this checked site.
    let ours = verified(
        ctx,
        &checked,
        &cfg,
        vm.kind,
        vm.vmid,
        None,
        record.map(|r| r.uid),
    )
    .map_err(|why| refused(why.to_string()))?;
    let permit = rename::relabel(&ours, from, &spec.name, &spec.site, record)
        .map_err(|why| refused(why.to_string()))?;
    let was_moved = moved.is_some();
    if let Some(r) = moved {
        *rec = r;
    }
    rec.uid = permit.uid().into();
    match permit {
        Relabeled::Resign(permit) => {
            if let Some(waiting) =
                super::vm::check_lock(ctx, site, vm.node, vm.kind, vm.vmid, &cfg).await?
            {
                return Ok(waiting);
            }
            let signed = marker(ctx, spec, rec, vm.vmid);
            let params = VmParams::new()
                .marker(&permit, signed.replace_in(cfg.description().unwrap_or("")))?;
            site.client
                .set_config(vm.node, vm.kind, vm.vmid, &params, cfg.digest())
                .await?;
            tracing::info!(from, spec = %spec.name, vmid = vm.vmid, "renamed: the VM is re-labelled");
        }
        Relabeled::Done { .. } => {
            tracing::info!(from, spec = %spec.name, vmid = vm.vmid, "renamed: the VM's marker already names the new spec; its record moves");
        }
    }
    rec.site = vm.site.into();
    rec.follow(spec);
    rec.kind = vm.kind;
    // Converge (which also records the VM's node, should it have moved) brings the rest (the
    // VM's name) in line next.
    rec.applied_hash = None;
    if was_moved {
        ctx.store.rename(from, &spec.name, rec)?;
    } else {
        // No record of the old spec (a lost database): the VM is taken as an adoption would.
        rec.adopted = rec.adopted || !rec.provisioned;
        rec.provisioned = true;
        let exists = VmState::Exists {
            vmid: vm.vmid,
            node: vm.node.into(),
        };
        ctx.store.transition(&spec.name, rec, exists)?;
        if empty {
            ctx.store.remove(from)?;
        }
    }
    converge(ctx, vm, spec, rec).await
}
