//! Creating a spec's VM: VMID allocation, the durable intent, the create or clone request and
//! its task, resuming an interrupted create, and adopting a VM that carries the spec's marker.

use crate::category::Category;
use crate::ownership::new_uid;
use crate::pve::{Client, CloneRequest, Error as PveError, TaskOutcome, Upid, VmParams};
use crate::spec::Spec;
use crate::state::{Phase, SpecRecord};

use super::converge::converge;
use super::identity::{desired_tags, is_our_marker, is_ours, marker};
use super::preflight::{Source, preflight};
use super::{ActionError, ExecCtx, Outcome, SiteCtx, VmRef, fail, site, task_record, wait};

pub(super) async fn create(
    ctx: &ExecCtx,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let site = site(ctx, site_name)?;
    let source = preflight(ctx, site, spec).await?;
    if rec.uid.is_empty() {
        rec.uid = new_uid();
    }
    rec.site = site_name.to_string();
    rec.node = spec.node.clone();
    rec.orphan_on_delete = spec.deletion_policy == crate::spec::DeletionPolicy::Orphan;

    let upid = {
        let _allocating = site.allocator.lock().await;
        let mut skip: Vec<u32> = ctx.store.allocations(site_name)?.into_keys().collect();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let vmid = next_free_vmid(&site.client, &skip).await?;
            // The intent is durable before the request leaves.
            rec.phase = Phase::Creating {
                vmid,
                node: spec.node.clone(),
                upid: None,
            };
            rec.vmid = None;
            ctx.store.begin_create(&spec.name, rec, site_name, vmid)?;
            tracing::info!(spec = %spec.name, vmid, node = %spec.node, "creating");
            match send_create(ctx, site, spec, rec, vmid, &source).await {
                Ok(upid) => {
                    rec.phase = Phase::Creating {
                        vmid,
                        node: spec.node.clone(),
                        upid: Some(upid.to_string()),
                    };
                    rec.last_task = Some(task_record(&upid, "running"));
                    ctx.store.put(&spec.name, rec)?;
                    tracing::info!(spec = %spec.name, vmid, upid = %upid, "create task started");
                    break upid;
                }
                Err(e) if e.is_already_exists() && attempt < 5 => {
                    // Someone took the id between nextid and our request: take the next one.
                    ctx.store.release_vmid(site_name, vmid)?;
                    skip.push(vmid);
                }
                Err(e) if e.outcome_unknown() => {
                    // The request may have reached PVE: keep the intent; the next cycle looks
                    // for the VM before doing anything else.
                    return Err(e.into());
                }
                Err(e) => {
                    // PVE refused it: nothing was created.
                    ctx.store.release_vmid(site_name, vmid)?;
                    rec.phase = Phase::Pending;
                    ctx.store.put(&spec.name, rec)?;
                    return Err(e.into());
                }
            }
        }
    };
    let vmid = upid_vmid(&rec.phase);
    finish_create(ctx, site, spec, rec, vmid, &upid).await
}

fn upid_vmid(phase: &Phase) -> u32 {
    match phase {
        Phase::Creating { vmid, .. } => *vmid,
        _ => 0,
    }
}

/// The lowest id PVE calls free that we have not reserved ourselves.
async fn next_free_vmid(client: &Client, skip: &[u32]) -> Result<u32, ActionError> {
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
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &SpecRecord,
    vmid: u32,
    source: &Source,
) -> Result<Upid, PveError> {
    let description = marker(ctx, spec, rec).description();
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
                pool: None,
            };
            site.client.clone_vm(template_node, *template, &req).await
        }
        Source::Import { volume } | Source::Iso { volume } => {
            let mut params = VmParams::new()
                .set("name", &spec.vm_name)
                .set("description", description)
                .tags(&desired_tags(ctx, spec))?
                .set("cores", spec.cpu)
                .set("memory", spec.memory_mib)
                .set("scsihw", "virtio-scsi-single")
                .set("ostype", "l26")
                .set("agent", "1")
                .nic("net0", &spec.network)?;
            params = match source {
                Source::Iso { .. } => params
                    .new_disk("scsi0", &spec.storage, spec.disk_bytes.div_ceil(1 << 30))?
                    .cdrom("ide2", volume)?
                    .set("boot", "order=scsi0;ide2"),
                _ => params
                    .import_disk("scsi0", &spec.storage, volume)?
                    .set("boot", "order=scsi0")
                    .set("serial0", "socket"),
            };
            site.client.create_vm(&spec.node, vmid, &params).await
        }
    }
}

/// After the create task: wait, record the VM, configure it.
async fn finish_create(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
    upid: &Upid,
) -> Result<Outcome, ActionError> {
    match wait(ctx, &site.client, upid, rec).await {
        Ok(TaskOutcome::StillRunning) => Ok(Outcome::StillRunning {
            upid: upid.to_string(),
        }),
        Ok(_) => {
            created(ctx, site, spec, rec, vmid)?;
            converge(ctx, VmRef::new(&site.name, &spec.node, vmid), spec, rec).await
        }
        Err(e) => {
            // Did the failed task leave a VM behind? If so it is ours (our marker): keep it and
            // converge it next time; otherwise go back to Pending.
            match site.client.vm_config(&spec.node, vmid).await {
                Ok(cfg) if is_ours(ctx, &cfg, Some(&spec.name)) => {
                    created(ctx, site, spec, rec, vmid)?
                }
                _ => {
                    ctx.store.release_vmid(&site.name, vmid)?;
                    rec.phase = Phase::Pending;
                    ctx.store.put(&spec.name, rec)?;
                }
            }
            Err(e)
        }
    }
}

fn created(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
) -> Result<(), ActionError> {
    rec.vmid = Some(vmid);
    rec.phase = Phase::Exists;
    rec.provisioned = true;
    ctx.store.put(&spec.name, rec)?;
    ctx.store.release_vmid(&site.name, vmid)?;
    Ok(())
}

pub(super) async fn resume_create(
    ctx: &ExecCtx,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
    upid: Option<String>,
) -> Result<Outcome, ActionError> {
    let VmRef {
        site: site_name,
        node,
        vmid,
    } = vm;
    let site = site(ctx, site_name)?;
    if let Some(upid) = upid {
        let upid: Upid = upid.parse().map_err(|e: String| {
            fail(
                Category::ProxmoxError,
                format!("recorded task id unreadable: {e}"),
            )
        })?;
        tracing::info!(spec = %spec.name, vmid, upid = %upid, "resuming the wait for a create task");
        return finish_create(ctx, site, spec, rec, vmid, &upid).await;
    }
    // The intent was recorded but not the answer: the request may or may not have reached
    // PVE. Look before doing anything.
    match site.client.vm_config(node, vmid).await {
        Ok(cfg) if is_ours(ctx, &cfg, Some(&spec.name)) => {
            tracing::info!(spec = %spec.name, vmid, "found the VM of an interrupted create");
            if cfg.lock().is_some()
                && let Some(outcome) =
                    wait_for_running_create(ctx, site, spec, rec, node, vmid).await?
            {
                // The create task still runs (it holds the lock): waited for.
                return Ok(outcome);
            }
            created(ctx, site, spec, rec, vmid)?;
            converge(ctx, vm, spec, rec).await
        }
        Ok(_) => {
            // Another VM holds that id: ours was never created.
            tracing::info!(spec = %spec.name, vmid, "VMID taken by another VM; creating anew");
            abandon(ctx, site_name, spec, rec, vmid)?;
            create(ctx, site_name, spec, rec).await
        }
        Err(e) if e.is_not_found() => {
            // Not there. A create whose worker has not written the config yet would show as
            // an active task for the id: wait for it rather than create a second VM.
            if let Some(outcome) = wait_for_running_create(ctx, site, spec, rec, node, vmid).await?
            {
                return Ok(outcome);
            }
            abandon(ctx, site_name, spec, rec, vmid)?;
            create(ctx, site_name, spec, rec).await
        }
        Err(e) => Err(e.into()),
    }
}

/// If a task runs for `vmid` on the node (the create whose answer was lost), records its
/// UPID and finishes the create with it; `None` when no task runs.
async fn wait_for_running_create(
    ctx: &ExecCtx,
    site: &SiteCtx,
    spec: &Spec,
    rec: &mut SpecRecord,
    node: &str,
    vmid: u32,
) -> Result<Option<Outcome>, ActionError> {
    let active = site.client.active_vm_tasks(node, vmid).await?;
    let Some(upid) = active.into_iter().find_map(|t| t.upid.parse::<Upid>().ok()) else {
        return Ok(None);
    };
    rec.phase = Phase::Creating {
        vmid,
        node: node.to_string(),
        upid: Some(upid.to_string()),
    };
    ctx.store.put(&spec.name, rec)?;
    finish_create(ctx, site, spec, rec, vmid, &upid)
        .await
        .map(Some)
}

fn abandon(
    ctx: &ExecCtx,
    site: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
) -> Result<(), ActionError> {
    ctx.store.release_vmid(site, vmid)?;
    rec.phase = Phase::Pending;
    rec.vmid = None;
    ctx.store.put(&spec.name, rec)?;
    Ok(())
}

pub(super) async fn adopt(
    ctx: &ExecCtx,
    site_name: &str,
    spec: &Spec,
    rec: &mut SpecRecord,
    vmid: u32,
) -> Result<Outcome, ActionError> {
    site(ctx, site_name)?;
    // The marker was read from the VM's config this cycle (that is why the plan adopts);
    // converge reads the config again and re-verifies it before changing anything.
    let vm = ctx.views.get(site_name).and_then(|v| v.vms.get(&vmid));
    let node = vm
        .map(|vm| vm.node.clone())
        .unwrap_or_else(|| spec.node.clone());
    let Some(m) = vm
        .and_then(|vm| vm.marker.clone())
        .filter(|m| is_our_marker(ctx, m, Some(&spec.name)))
    else {
        return Err(fail(
            Category::Conflict,
            format!("VM {vmid} does not carry the marker of spec {}", spec.name),
        ));
    };
    tracing::info!(spec = %spec.name, vmid, "adopting the VM carrying this spec's marker");
    rec.uid = m.uid;
    rec.site = site_name.to_string();
    rec.node = node.clone();
    rec.vmid = Some(vmid);
    rec.phase = Phase::Exists;
    rec.provisioned = true;
    rec.orphan_on_delete = spec.deletion_policy == crate::spec::DeletionPolicy::Orphan;
    ctx.store.put(&spec.name, rec)?;
    converge(ctx, VmRef::new(site_name, &node, vmid), spec, rec).await
}
