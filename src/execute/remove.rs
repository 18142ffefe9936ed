//! Deleting or releasing a spec's VM, forgetting a spec, and deleting stopped orphans.

use crate::category::Category;
use crate::ownership::ownership_tag;
use crate::pve::types::VmConfig;
use crate::pve::{Client, TaskOutcome, Upid, VmParams};
use crate::state::{Phase, SpecRecord};

use super::cloud_init::{remove_old_seeds, seed_slots};
use super::converge::{check_lock, power_off};
use super::identity::is_ours;
use super::{ActionError, ExecCtx, Outcome, VmRef, fail, site, wait};

/// Deletes (or, with `release`, releases) a spec's VM after verifying it is the spec's, and
/// forgets the spec.
// Long because: the delete's steps in their request order (resume a recorded delete, fresh
// read, identity, lock, release or power off, identity again, delete, seed cleanup).
pub(super) async fn remove(
    ctx: &ExecCtx,
    vm: VmRef<'_>,
    spec_name: &str,
    rec: &mut SpecRecord,
    release: bool,
) -> Outcome {
    let VmRef {
        site: site_name,
        node,
        vmid,
    } = vm;
    let result: Result<Outcome, ActionError> = async {
        let site = site(ctx, site_name)?;
        let client = &site.client;
        if let Phase::Deleting { upid: Some(upid) } = &rec.phase
            && let Ok(upid) = upid.parse::<Upid>()
        {
            match wait(ctx, client, &upid, rec).await {
                Ok(TaskOutcome::StillRunning) => {
                    return Ok(Outcome::StillRunning {
                        upid: upid.to_string(),
                    });
                }
                Ok(_) => {
                    ctx.store.remove(spec_name)?;
                    return Ok(Outcome::Done);
                }
                Err(_) => {} // fall through: look again and retry the delete
            }
        }
        let cfg = match client.vm_config(node, vmid).await {
            Ok(c) => c,
            Err(e) if e.is_not_found() => return vm_gone(ctx, client, vm, spec_name, rec).await,
            Err(e) => return Err(e.into()),
        };
        if !is_ours(ctx, &cfg, Some(spec_name)) {
            tracing::warn!(
                spec = spec_name,
                vmid,
                "VM does not carry the spec's marker: forgetting it, not touching it"
            );
            ctx.store.remove(spec_name)?;
            return Ok(Outcome::Done);
        }
        if let Some(waiting) = check_lock(site, node, vmid, &cfg).await? {
            return Ok(waiting);
        }
        if release {
            // Drop ownership: the tag and the marker go; the VM stays as it is.
            let params = release_params(ctx, &cfg)?;
            client.set_config(node, vmid, &params, cfg.digest()).await?;
            tracing::info!(spec = spec_name, vmid, "released (deletionPolicy: Orphan)");
            ctx.store.remove(spec_name)?;
            return Ok(Outcome::Done);
        }
        let running = client.vm_running(node, vmid).await?;
        if running && let Some(o) = power_off(ctx, site, node, vmid, rec).await? {
            return Ok(o);
        }
        // Identity once more, just before the delete.
        let cfg = client.vm_config(node, vmid).await?;
        if !is_ours(ctx, &cfg, Some(spec_name)) {
            return Err(fail(
                Category::Conflict,
                format!("VM {vmid} changed identity during the delete; not deleting"),
            ));
        }
        let seeds: Vec<String> = seed_slots(&cfg, &ctx.install_id, spec_name)
            .into_iter()
            .filter_map(|(_, v)| v.split_once(':').map(|(s, _)| s.to_string()))
            .collect();
        let upid = client.delete_vm(node, vmid, true, true).await?;
        rec.phase = Phase::Deleting {
            upid: Some(upid.to_string()),
        };
        ctx.store.put(spec_name, rec)?;
        tracing::info!(spec = spec_name, vmid, upid = %upid, "deleting");
        match wait(ctx, client, &upid, rec).await? {
            TaskOutcome::StillRunning => Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            }),
            _ => {
                ctx.store.remove(spec_name)?;
                // The VM's seed images go with it (best effort).
                for storage in seeds {
                    remove_old_seeds(ctx, client, node, &storage, spec_name, &[]).await;
                }
                Ok(Outcome::Done)
            }
        }
    }
    .await;
    result.unwrap_or_else(Outcome::Failed)
}

/// The VM is not there: the spec is forgotten, unless the create it was waiting for still runs.
async fn vm_gone(
    ctx: &ExecCtx,
    client: &Client,
    vm: VmRef<'_>,
    spec_name: &str,
    rec: &SpecRecord,
) -> Result<Outcome, ActionError> {
    let VmRef {
        site: site_name,
        node,
        vmid,
    } = vm;
    if let Phase::Creating { .. } = rec.phase {
        // The spec went away while its create was in flight. A task still making
        // the VM is waited for (then the VM is deleted); no task: the request never
        // took effect, and the intent is dropped.
        if let Some(task) = client.active_vm_tasks(node, vmid).await?.first() {
            return Ok(Outcome::Waiting {
                reason: format!(
                    "the create of VM {vmid} is still running ({}); deleting it after",
                    task.upid
                ),
            });
        }
        ctx.store.release_vmid(site_name, vmid)?;
    }
    ctx.store.remove(spec_name)?;
    Ok(Outcome::Done)
}

/// The config update that drops ownership: the tag and the marker go; the rest stays.
fn release_params(ctx: &ExecCtx, cfg: &VmConfig) -> Result<VmParams, ActionError> {
    let tag = ownership_tag(&ctx.install_id);
    let tags: Vec<String> = cfg.tags().into_iter().filter(|t| *t != tag).collect();
    let description: String = cfg
        .description()
        .unwrap_or("")
        .lines()
        .filter(|l| !l.contains(crate::ownership::MARKER_PREFIX))
        .collect::<Vec<_>>()
        .join("\n");
    let mut params = VmParams::new().set(
        "description",
        format!("{description}\nReleased by proxsync."),
    );
    params = if tags.is_empty() {
        params.delete_keys(&["tags"])
    } else {
        params.tags(&tags)?
    };
    Ok(params)
}

pub(super) async fn forget(ctx: &ExecCtx, spec_name: &str, rec: &SpecRecord) -> Outcome {
    let result = (|| {
        if let Phase::Creating { vmid, .. } = rec.phase {
            ctx.store.release_vmid(&rec.site, vmid)?;
        }
        ctx.store.remove(spec_name)?;
        Ok::<_, ActionError>(Outcome::Done)
    })();
    result.unwrap_or_else(Outcome::Failed)
}

pub(super) async fn delete_orphan(ctx: &ExecCtx, vm: VmRef<'_>) -> Outcome {
    let VmRef {
        site: site_name,
        node,
        vmid,
    } = vm;
    let result: Result<Outcome, ActionError> = async {
        let site = site(ctx, site_name)?;
        let client = &site.client;
        let cfg = client.vm_config(node, vmid).await?;
        let tag = ownership_tag(&ctx.install_id);
        let ours = cfg.tags().contains(&tag) && is_ours(ctx, &cfg, None);
        if !ours {
            return Err(fail(
                Category::Conflict,
                format!("VM {vmid} is not ours any more; not deleting"),
            ));
        }
        if cfg.lock().is_some() {
            return Ok(Outcome::Waiting {
                reason: format!("orphan {vmid} is locked"),
            });
        }
        tracing::info!(
            vmid,
            node,
            "deleting a stopped orphan past its grace period"
        );
        let upid = client.delete_vm(node, vmid, true, true).await?;
        let mut scratch = SpecRecord::default();
        match wait(ctx, client, &upid, &mut scratch).await? {
            TaskOutcome::StillRunning => Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            }),
            _ => Ok(Outcome::Done),
        }
    }
    .await;
    result.unwrap_or_else(Outcome::Failed)
}
