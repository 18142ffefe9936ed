//! Deleting or releasing a spec's VM, forgetting a spec, and deleting stopped orphans.

use crate::category::Category;
use crate::gate::identity::{Trust, VerifiedMarker};
use crate::gate::permit::{self, Permit};
use crate::gate::volume::{DeleteProtection, Protection, vm_delete};
use crate::model::{After, Blocked, Interrupted, Note, Wait};
use crate::ownership::{Marker, ownership_tag};
use crate::pve::types::VmConfig;
use crate::pve::values::pve_bool;
use crate::pve::{Pve, TaskOutcome, VmParams};
use crate::spec::Spec;
use crate::store::{SpecRecord, VmState};

use super::identity::{checked_site, verified};
use super::intent::{Found, inspect, record_created};
use super::seeds::{after_delete, seed_storages};
use super::vm::{Own, Whose, check_lock, own_config, power_off};
use super::{ActionError, ExecCtx, Outcome, VmRef, blocked, fail, protected, site, wait};

/// What follows the delete of a spec's guest.
#[derive(Clone, Copy)]
enum Then<'a> {
    /// The spec is gone: its record is forgotten.
    Forget,
    /// The spec is gone under `deletionPolicy: Orphan`: the guest is released, not deleted,
    /// and the record forgotten.
    Release,
    /// The spec asks for its guest anew (`imagePolicy: Recreate`): the record stays, its delete
    /// recorded, until `create` finds the VMID free and makes the guest again.
    Recreate(&'a Spec),
}

impl Then<'_> {
    /// The guest is gone: the record is forgotten, or kept for the create that follows.
    fn gone(self, ctx: &ExecCtx<impl Pve>, spec_name: &str) -> Result<Outcome, ActionError> {
        if !matches!(self, Then::Recreate(_)) {
            ctx.store.remove(spec_name)?;
        }
        Ok(Outcome::Done)
    }
}

/// Deletes (or, with `release`, releases) a spec's VM after verifying it is the spec's, and
/// forgets the spec.
pub(super) async fn remove(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec_name: &str,
    rec: &mut SpecRecord,
    release: bool,
) -> Outcome {
    let then = if release { Then::Release } else { Then::Forget };
    delete(ctx, vm, spec_name, rec, then)
        .await
        .unwrap_or_else(Outcome::Failed)
}

/// Makes spec `spec`'s VM anew from the version of its image the spec set names now: deleted
/// as a removed spec's is (the same checks, the record kept and its delete recorded), then
/// created as a new spec's is (`create` confirms the VMID is free first). Interrupted, the next
/// cycle plans it again from the record (`plan::images::resume_recreate`), or, once the delete
/// has ended, creates the guest as one that is gone.
pub(super) async fn recreate(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    // A create in flight is resumed first (the plan's order); none is started beside it.
    if matches!(rec.vm, VmState::Creating { .. }) {
        return Err(fail(
            Category::Conflict,
            "a create of this spec is in flight: it is finished before the guest is rebuilt",
        ));
    }
    if rec.vm.made_vmid().is_some() {
        // What the create will need is checked before the guest goes (storage, bridge, the
        // image on its node, ...): a refusal leaves the guest as it is. A delete already recorded
        // goes on whatever it says.
        if !matches!(rec.vm, VmState::Deleting { .. }) {
            let site = super::site(ctx, vm.site)?;
            super::preflight::preflight(&ctx.reads(), site, spec).await?;
        }
        match delete(ctx, vm, &spec.name, rec, Then::Recreate(spec)).await? {
            Outcome::Done => {}
            other => return Ok(other),
        }
    }
    tracing::info!(spec = %spec.name, vmid = vm.vmid, "deleted for a new image version; creating it again");
    super::create::create(ctx, vm.site, spec, rec).await
}

/// Deletes (or releases) a spec's guest after verifying it is the spec's; `then` says what
/// becomes of the record.
// Long because: the delete's steps in their request order (resume a recorded delete, fresh
// read, identity, lock, release or power off, identity again, delete, seed cleanup).
async fn delete(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec_name: &str,
    rec: &mut SpecRecord,
    then: Then<'_>,
) -> Result<Outcome, ActionError> {
    let VmRef {
        site: site_name,
        node,
        kind,
        vmid,
    } = vm;
    {
        let site = site(ctx, site_name)?;
        checked_site(ctx, site_name)?;
        let client = &site.client;
        // A failed delete task falls through: look again and retry the delete.
        match delete_in_flight(ctx, client, spec_name, rec).await? {
            Some(Outcome::Done) => return then.gone(ctx, spec_name),
            Some(settled) => return Ok(settled),
            None => {}
        }
        // A create in flight for a spec that is gone: what became of it decides, exactly as
        // for a resumed create (a VM that may still become ours is never forgotten).
        let mut node = node.to_string();
        if let VmState::Creating { .. } = rec.vm {
            match inspect(ctx, site, spec_name, rec, kind, vmid, false).await? {
                Found::Ours(at) => {
                    record_created(ctx, spec_name, rec, vmid, &at)?;
                    node = at;
                }
                Found::Busy { wait, .. } => {
                    return Ok(Outcome::Waiting(wait.then(After::Delete)));
                }
                Found::Stale { lock, node } => {
                    return Err(blocked(Blocked::InterruptedCreate {
                        kind,
                        vmid,
                        node,
                        lock,
                        of: Interrupted::Removed {
                            spec: spec_name.to_string(),
                        },
                    }));
                }
                Found::Foreign | Found::Free => {
                    // Forgetting the record releases the VMID its intent reserved.
                    return then.gone(ctx, spec_name);
                }
            }
        }
        let node = node.as_str();
        let vm = VmRef::new(site_name, node, kind, vmid);
        // A removed spec's name is known; its guest's name is not.
        let whose = Whose {
            spec: spec_name,
            vm_name: None,
        };
        let (cfg, ours) = match own_config(ctx, client, vm, whose, rec).await {
            Ok(Own::Ours(cfg, ours)) => (cfg, ours),
            // Not on its node: gone only when PVE says its VMID is free (it may have moved
            // since the listing).
            Err(e) if e.category == Category::NotFound => {
                if !client.vmid_is_free(vmid).await? {
                    return Err(e);
                }
                return then.gone(ctx, spec_name);
            }
            Err(e) => return Err(e),
            // The record's guest is no longer the spec's: nothing is deleted, nor made beside it.
            Ok(Own::Stranger(why)) if matches!(then, Then::Recreate(_)) => {
                return Err(blocked(Blocked::ChangedIdentity(why)));
            }
            Ok(Own::Stranger(why)) => {
                tracing::warn!(spec = spec_name, vmid, %why, "forgetting the removed spec's record, not touching the guest");
                ctx.store.remove(spec_name)?;
                return Ok(Outcome::Done);
            }
        };
        if let Some(waiting) = check_lock(ctx, site, node, kind, vmid, &cfg).await? {
            return Ok(waiting);
        }
        if ours.trust() == Trust::Identity {
            return mark_again(ctx, client, vm, spec_name, rec, &cfg, &ours).await;
        }
        if let Then::Release = then {
            // Drop ownership: the tag and the marker go; the VM stays as it is.
            let permit = permit::remove(&ours, spec_name, true).map_err(|r| conflict(r.into()))?;
            let params = release_params(ctx, &cfg, &permit)?;
            client
                .set_config(node, kind, vmid, &params, cfg.digest())
                .await?;
            tracing::info!(spec = spec_name, vmid, "released (deletionPolicy: Orphan)");
            ctx.store.remove(spec_name)?;
            return Ok(Outcome::Done);
        }
        // PVE refuses to delete a protected VM: judged before the VM is powered off.
        unprotect(
            ctx,
            client,
            VmRef::new(site_name, node, kind, vmid),
            spec_name,
            rec,
            &cfg,
        )
        .await?;
        let running = client.vm_running(node, kind, vmid).await?;
        if running && let Some(o) = power_off(ctx, site, node, kind, vmid, rec).await? {
            return Ok(o);
        }
        // Identity once more, just before the delete.
        let (cfg, ours) = match own_config(ctx, client, vm, whose, rec).await? {
            Own::Ours(cfg, ours) => (cfg, ours),
            Own::Stranger(why) => return Err(blocked(Blocked::ChangedIdentity(why))),
        };
        // Protected during the shutdown: the VM stays stopped, as its spec's removal asks.
        unprotect(
            ctx,
            client,
            VmRef::new(site_name, node, kind, vmid),
            spec_name,
            rec,
            &cfg,
        )
        .await?;
        // A template (a `ProxmoxTemplate`'s old version) stays while linked clones use it.
        if let Some(clones) = linked_clones(client, node, vmid, &cfg).await? {
            return Err(blocked(Blocked::LinkedClones {
                vmid,
                node: node.to_string(),
                clones,
            }));
        }
        // Where its seed images are: they hold its user data, and go with it.
        let seeds = seed_storages(Some(&cfg), &ctx.install_id, spec_name, Some(rec));
        let permit = match then {
            Then::Recreate(spec) => permit::recreate(&ours, spec),
            Then::Forget | Then::Release => permit::remove(&ours, spec_name, false),
        }
        .map_err(|r| conflict(r.into()))?;
        let upid = client
            .delete_vm(node, kind, vmid, true, true, &permit)
            .await?;
        ctx.store.transition(
            spec_name,
            rec,
            VmState::Deleting {
                vmid,
                node: node.into(),
                task: Some(Box::new(upid.clone())),
            },
        )?;
        tracing::info!(spec = spec_name, vmid, upid = %upid, "deleting");
        match wait(ctx, client, &upid, rec).await? {
            TaskOutcome::StillRunning => Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            }),
            _ => {
                // The VM's seed images go with it (best effort; before the record, so that a
                // kill in between finds them again from the record).
                after_delete(ctx, site_name, node, spec_name, vmid, &seeds).await;
                then.gone(ctx, spec_name)
            }
        }
    }
}

/// The linked clones of template `cfg` (VMID `vmid`), when it is one and has any: the volumes
/// its storages list as made from one of its base volumes. A linked clone's volume ID is its
/// base's and more (`local-zfs:base-9000-disk-0/vm-101-disk-0`, pve-storage
/// `ZFSPoolPlugin::clone_image`; `local:9000/base-9000-disk-0.qcow2/101/vm-101-disk-0.qcow2`,
/// `Plugin::clone_image`): what PVE's own `volume_is_base_and_used` looks for before it
/// refuses the template's destroy. LVM-thin keeps no such link, and its base may go without
/// harm to the clones (`LvmThinPlugin.pm`). One listing per storage the template's base
/// volumes are on; none for a VM that is not a template.
async fn linked_clones(
    client: &impl Pve,
    node: &str,
    vmid: u32,
    cfg: &crate::pve::types::VmConfig,
) -> Result<Option<Vec<String>>, ActionError> {
    if !cfg.is_template() {
        return Ok(None);
    }
    // A base volume's name is `base-VMID-...`; a clone's volume ID is its base's, `/`, more.
    let base = ["base-", &vmid.to_string(), "-"].concat();
    let bases: Vec<String> = (cfg.values.iter())
        .filter(|(k, _)| super::preflight::is_volume_key(k))
        .filter_map(|(_, v)| v.split(',').next())
        .filter(|volid| volid.contains(&base))
        .map(|volid| [volid, "/"].concat())
        .collect();
    let storages: std::collections::BTreeSet<&str> = (bases.iter())
        .filter_map(|b| b.split_once(':').map(|(s, _)| s))
        .collect();
    let mut clones = Vec::new();
    for storage in storages {
        let listed = client
            .storage_content(node, storage, Some("images"))
            .await?;
        clones.extend(
            (listed.into_iter())
                .map(|v| v.volid)
                .filter(|volid| bases.iter().any(|b| volid.starts_with(b.as_str()))),
        );
    }
    Ok((!clones.is_empty()).then_some(clones))
}

/// Clears the VM's `protection` flag for its delete when the removed spec managed it (an
/// update of its own: PVE's `destroy_vm` checks the flag as it is); a flag the spec did not
/// manage stops the delete (`gate::volume::vm_delete`).
async fn unprotect(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec_name: &str,
    rec: &mut SpecRecord,
    cfg: &VmConfig,
) -> Result<(), ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let protection = Protection {
        on: cfg.get("protection").is_some_and(pve_bool),
        managed: rec.applied_protection,
    };
    match vm_delete(kind, vmid, protection).map_err(protected)? {
        DeleteProtection::Unprotected => Ok(()),
        DeleteProtection::Clear => {
            tracing::info!(
                spec = spec_name,
                vmid,
                "clearing the protection its removed spec set, to delete the VM"
            );
            let params = VmParams::new().set("protection", "0");
            client
                .set_config(node, kind, vmid, &params, cfg.digest())
                .await?;
            rec.note(
                ctx.clock.now_ms(),
                "protection cleared",
                &Note::ProtectionCleared { kind, vmid }.to_string(),
            );
            Ok(())
        }
    }
}

/// A refusal of the gate: the VM is not shown to be what the action needs.
pub(super) fn conflict(why: String) -> super::ActionError {
    fail(Category::Conflict, why)
}

/// The config update that drops ownership (`permit`: the gate's release): the tag and the
/// marker go; the rest stays.
fn release_params(
    ctx: &ExecCtx<impl Pve>,
    cfg: &VmConfig,
    permit: &Permit,
) -> Result<VmParams, ActionError> {
    let tag = ownership_tag(&ctx.install_id);
    let tags: Vec<String> = cfg.tags().into_iter().filter(|t| *t != tag).collect();
    let description: String = cfg
        .description()
        .unwrap_or("")
        .lines()
        .filter(|l| !l.contains(crate::ownership::MARKER_PREFIX))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(VmParams::new()
        .drop_marker(permit, format!("{description}\nReleased by proxsync."))?
        .drop_ownership(permit, &tags)?)
}

/// A removed spec's guest shown the spec's by its identity, its notes without the marker line:
/// the line is written back below the notes (the config's digest guarding the write), and the
/// guest is removed at the next cycle on the marker itself (`gate::permit::remove`).
async fn mark_again(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    vm: VmRef<'_>,
    spec_name: &str,
    rec: &SpecRecord,
    cfg: &VmConfig,
    ours: &VerifiedMarker,
) -> Result<Outcome, ActionError> {
    let VmRef {
        node, kind, vmid, ..
    } = vm;
    let Some(digest) = cfg.digest() else {
        return Err(blocked(Blocked::NoDigest { kind, vmid }));
    };
    let permit = permit::sign(ours).map_err(|r| conflict(r.into()))?;
    let signed = Marker::signed(&ctx.marker_key, &ctx.install_id, spec_name, &rec.uid, vmid);
    let params =
        VmParams::new().marker(&permit, signed.replace_in(cfg.description().unwrap_or("")))?;
    client
        .set_config(node, kind, vmid, &params, Some(digest))
        .await?;
    Ok(Outcome::Waiting(Wait::MarkerWrittenBack { kind, vmid }))
}

/// A delete whose task was recorded: waited for. `Some`: it is still running, or it ended
/// (`Done`: the caller forgets the record, or keeps it for a rebuild); `None`: no delete in
/// flight, or its task failed (the VM is still there).
pub(super) async fn delete_in_flight(
    ctx: &ExecCtx<impl Pve>,
    client: &impl Pve,
    spec_name: &str,
    rec: &mut SpecRecord,
) -> Result<Option<Outcome>, ActionError> {
    let VmState::Deleting {
        vmid,
        node,
        task: Some(upid),
    } = &rec.vm
    else {
        return Ok(None);
    };
    let (vmid, node, upid) = (*vmid, node.clone(), upid.clone());
    match wait(ctx, client, &upid, rec).await {
        Ok(TaskOutcome::StillRunning) => Ok(Some(Outcome::StillRunning {
            upid: upid.to_string(),
        })),
        Ok(_) => {
            // A delete resumed after a restart: its seed images, as the record knows them,
            // go with the VM.
            let seeds = seed_storages(None, &ctx.install_id, spec_name, Some(rec));
            let site = rec.site.clone();
            after_delete(ctx, &site, &node, spec_name, vmid, &seeds).await;
            Ok(Some(Outcome::Done))
        }
        Err(_) => Ok(None),
    }
}

/// Forgets a spec's record: its spec removed and its guest gone, or moved to another site (its
/// guest gone there, or kept under `allowRecreateOnSiteChange`). A record whose made guest
/// this cycle's listing did not show is forgotten only when PVE says its VMID is free (`GET
/// /cluster/nextid?vmid=N`): a listing that lost the guest never makes it unmanaged (nor, for a
/// moved spec, a second guest on the new site).
pub(super) async fn forget(ctx: &ExecCtx<impl Pve>, spec_name: &str, rec: &SpecRecord) -> Outcome {
    let listed =
        |vmid: u32| (ctx.views.get(rec.site.as_str())).is_some_and(|v| v.vms.contains_key(&vmid));
    // A site that left the config: nothing there can be asked, or done (as before the check).
    let site = ctx.sites.get(rec.site.as_str());
    if let (Some(vmid), Some(site)) = (rec.vm.made_vmid().filter(|id| !listed(*id)), site) {
        let taken = site.client.vmid_is_free(vmid).await.map(|free| !free);
        match taken {
            Ok(false) => {
                // Gone (deleted by hand, say): its seed images, as the record knows them, go.
                if let Some(node) = rec.vm.node() {
                    let seeds = seed_storages(None, &ctx.install_id, spec_name, Some(rec));
                    after_delete(ctx, &rec.site, node, spec_name, vmid, &seeds).await;
                }
            }
            Ok(true) => {
                return Outcome::Failed(blocked(Blocked::StillTaken {
                    kind: rec.kind,
                    vmid,
                    site: rec.site.to_string(),
                    spec: spec_name.to_string(),
                }));
            }
            Err(e) => return Outcome::Failed(e.into()),
        }
    }
    // Also releases the VMID of a create intent.
    match ctx.store.remove(spec_name) {
        Ok(()) => Outcome::Done,
        Err(e) => Outcome::Failed(e.into()),
    }
}

pub(super) async fn delete_orphan(ctx: &ExecCtx<impl Pve>, vm: VmRef<'_>) -> Outcome {
    let VmRef {
        site: site_name,
        node,
        kind,
        vmid,
    } = vm;
    let result: Result<Outcome, ActionError> = async {
        let site = site(ctx, site_name)?;
        let checked = checked_site(ctx, site_name)?;
        let client = &site.client;
        let cfg = client.vm_config(node, kind, vmid).await?;
        // This install's tag and a marker whose MAC verifies for this VMID (no record vouches
        // for an orphan): the gate's permit, or nothing is deleted.
        let mut spec = String::new();
        let permit = verified(ctx, &checked, &cfg, kind, vmid, None, None)
            .map_err(|why| why.to_string())
            .and_then(|ours| {
                spec = ours.spec().to_string();
                permit::delete_orphan(&ours, &cfg.tags()).map_err(String::from)
            })
            .map_err(|why| blocked(Blocked::OrphanNotOurs { kind, vmid, why }))?;
        if cfg.lock().is_some() {
            return Ok(Outcome::Waiting(Wait::OrphanLocked { vmid }));
        }
        // No spec manages an orphan's protection: PVE would refuse the delete.
        let protection = Protection {
            on: cfg.get("protection").is_some_and(pve_bool),
            managed: None,
        };
        vm_delete(kind, vmid, protection).map_err(protected)?;
        tracing::info!(
            vmid,
            node,
            "deleting a stopped orphan past its grace period"
        );
        // Its seed images (of the spec its marker names) go with it.
        let seeds = seed_storages(Some(&cfg), &ctx.install_id, &spec, None);
        let upid = client
            .delete_vm(node, kind, vmid, true, true, &permit)
            .await?;
        let mut scratch = SpecRecord::default();
        match wait(ctx, client, &upid, &mut scratch).await? {
            TaskOutcome::StillRunning => Ok(Outcome::StillRunning {
                upid: upid.to_string(),
            }),
            _ => {
                after_delete(ctx, site_name, node, &spec, vmid, &seeds).await;
                Ok(Outcome::Done)
            }
        }
    }
    .await;
    result.unwrap_or_else(Outcome::Failed)
}
