//! Handing a VM over between installs that split one repository by `[source] selector`.
//!
//! The old owner (the spec left its selector) removes its ownership tag and keeps the signed
//! marker, then forgets the spec: never a delete. The new owner (the spec entered its
//! selector) adopts the VM only once no install's tag is left on it, after verifying the
//! marker with the key the installs share, and re-signs the marker for itself. Between the
//! two, the VM carries the old owner's tag and the new owner waits (`HeldByInstall`), so at no
//! moment do two installs act on the VM, and no second VM is made.

use crate::category::Category;
use crate::gate::identity::{VerifiedMarker, verify_handed};
use crate::gate::permit::{self, Permit};
use crate::guest::GuestKind;
use crate::model::{After, Blocked, Interrupted, Wait};
use crate::ownership::{Marker, ownership_tag};
use crate::plan::merge_tags;
use crate::pve::types::VmConfig;
use crate::pve::{Pve, VmParams};
use crate::spec::Spec;
use crate::store::{SpecRecord, VmState};

use super::identity::{checked_site, verified};
use super::intent::{Found, inspect, record_created};
use super::vm::check_lock;
use super::{ActionError, ExecCtx, Outcome, SiteCtx, VmRef, blocked, fail, site};

/// The old owner's side: drops this install's tag from the spec's VM (re-verified first, as
/// a release is) and forgets the spec. The marker stays, signed for this VMID, so the next
/// owner can verify it.
pub(super) async fn hand_over(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec_name: &str,
    rec: &mut SpecRecord,
) -> Outcome {
    let result: Result<Outcome, ActionError> = async {
        let site = site(ctx, vm.site)?;
        let checked = checked_site(ctx, vm.site)?;
        let client = &site.client;
        // A delete already running (the spec was removed, then came back in another shard)
        // cannot be taken back: it ends, and the spec is forgotten.
        // (A failed delete leaves the VM there: it is handed over.)
        match super::remove::delete_in_flight(ctx, client, spec_name, rec).await? {
            Some(Outcome::Done) => {
                ctx.store.remove(spec_name)?;
                return Ok(Outcome::Done);
            }
            Some(settled) => return Ok(settled),
            None => {}
        }
        let mut node = vm.node.to_string();
        if let VmState::Creating { .. } = rec.vm {
            match settle_create(ctx, site, spec_name, rec, vm.kind, vm.vmid).await? {
                Ok(at) => node = at,
                Err(outcome) => return Ok(outcome),
            }
        }
        let cfg = match client.vm_config(&node, vm.kind, vm.vmid).await {
            Ok(c) => c,
            Err(e) if e.is_not_found() => {
                ctx.store.remove(spec_name)?;
                return Ok(Outcome::Done);
            }
            Err(e) => return Err(e.into()),
        };
        let ours = match verified(
            ctx,
            &checked,
            &cfg,
            vm.kind,
            vm.vmid,
            Some(spec_name),
            Some(&rec.uid),
        ) {
            Ok(ours) => ours,
            Err(why) => {
                // Already adopted by the next owner (its marker), or not ours at all.
                tracing::info!(
                    spec = spec_name,
                    vmid = vm.vmid,
                    %why,
                    "VM no longer carries this install's marker: forgetting it, not touching it"
                );
                ctx.store.remove(spec_name)?;
                return Ok(Outcome::Done);
            }
        };
        if let Some(waiting) = check_lock(ctx, site, &node, vm.kind, vm.vmid, &cfg).await? {
            return Ok(waiting);
        }
        let permit =
            permit::hand_over(&ours, spec_name).map_err(|why| fail(Category::Conflict, why))?;
        let params = hand_over_params(ctx, &cfg, rec, spec_name, &ours, &permit)?;
        client
            .set_config(&node, vm.kind, vm.vmid, &params, cfg.digest())
            .await?;
        tracing::info!(
            spec = spec_name,
            vmid = vm.vmid,
            "handed over: the spec is outside this install's selector (tag removed, marker kept)"
        );
        ctx.store.remove(spec_name)?;
        Ok(Outcome::Done)
    }
    .await;
    result.unwrap_or_else(Outcome::Failed)
}

/// A create in flight for a spec leaving this install: what became of it decides, as for a
/// removed spec. `Ok(node)`: the VM is ours and complete on that node; `Err`: the outcome now
/// (waiting for the create, or nothing was made and the spec is forgotten).
async fn settle_create(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    spec_name: &str,
    rec: &mut SpecRecord,
    kind: GuestKind,
    vmid: u32,
) -> Result<Result<String, Outcome>, ActionError> {
    match inspect(ctx, site, spec_name, rec, kind, vmid, false).await? {
        Found::Ours(at) => {
            record_created(ctx, spec_name, rec, vmid, &at)?;
            Ok(Ok(at))
        }
        Found::Busy { wait, .. } => Ok(Err(Outcome::Waiting(wait.then(After::HandOver)))),
        Found::Stale { lock, node } => Err(blocked(Blocked::InterruptedCreate {
            kind,
            vmid,
            node,
            lock,
            of: Interrupted::LeftSelector {
                spec: spec_name.to_string(),
            },
        })),
        Found::Foreign | Found::Free => {
            // Forgetting the record releases the VMID its intent reserved.
            ctx.store.remove(spec_name)?;
            Ok(Err(Outcome::Done))
        }
    }
}

/// The config update of a hand-over: this install's tag goes, and the tags this install
/// applied are brought in line with the spec as it now reads (a changed tenant label leaves no
/// stale `tenant_*` tag that the next owner would take for a hand-added one); the marker
/// stays, written signed for this VMID if it was not (a marker from before signing, vouched for
/// by the record), so the next owner can verify it.
fn hand_over_params(
    ctx: &ExecCtx<impl Pve>,
    cfg: &VmConfig,
    rec: &SpecRecord,
    spec_name: &str,
    ours: &VerifiedMarker,
    permit: &Permit,
) -> Result<VmParams, ActionError> {
    let tag = ownership_tag(&ctx.install_id);
    let tags = match ctx.specs.get(spec_name) {
        Some(spec) => merge_tags(&cfg.tags(), &rec.applied_tags, &spec.tags, &tag),
        None => cfg.tags(),
    };
    let tags: Vec<String> = tags.into_iter().filter(|t| *t != tag).collect();
    let mut params = VmParams::new().drop_ownership(permit, &tags)?;
    if !ours.signed() {
        let vmid = ours.vmid();
        let signed = Marker::signed(
            &ctx.marker_key,
            &ctx.install_id,
            spec_name,
            ours.uid(),
            vmid,
        );
        let description = signed.replace_in(cfg.description().unwrap_or(""));
        params = params.marker(permit, description)?;
    }
    Ok(params)
}

/// How taking over a handed-over VM went.
pub(super) enum TakeOver {
    /// The VM is this install's now (its marker re-signed, this install's tag added): the
    /// marker's uid, for the record.
    Taken(String),
    /// Not now: the outcome says why (another install's tag came back, a lock).
    Not(Outcome),
}

/// The new owner's side, before adopting: from a fresh read, the VM's marker must name `spec`
/// for another install and verify with the shared key, and the VM must carry no install's
/// ownership tag (released). Then its marker is re-signed for this install (same uid) and
/// this install's tag added, in one config write guarded by the config's digest.
pub(super) async fn take_over(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    node: &str,
    kind: GuestKind,
    spec: &Spec,
    vmid: u32,
) -> Result<TakeOver, ActionError> {
    let checked = checked_site(ctx, &site.name)?;
    let cfg = site.client.vm_config(node, kind, vmid).await?;
    let theirs = verify_handed(
        &checked,
        &ctx.marker_key,
        &ctx.install_id,
        kind,
        vmid,
        cfg.description(),
        &spec.name,
    )
    .map_err(|why| {
        blocked(Blocked::NotHandedOver {
            kind,
            vmid,
            spec: spec.name.to_string(),
            why: why.to_string(),
        })
    })?;
    if let Some(held) = cfg.tags().iter().find(|t| t.starts_with("proxsync.")) {
        return Ok(TakeOver::Not(Outcome::Waiting(Wait::NotReleased {
            kind,
            vmid,
            tag: held.clone(),
        })));
    }
    if let Some(waiting) = check_lock(ctx, site, node, kind, vmid, &cfg).await? {
        return Ok(TakeOver::Not(waiting));
    }
    let permit = permit::take_over(&theirs, &ctx.install_id, &spec.name, &cfg.tags())
        .map_err(|why| fail(Category::Conflict, why))?;
    let signed = Marker::signed(
        &ctx.marker_key,
        &ctx.install_id,
        &spec.name,
        theirs.uid(),
        vmid,
    );
    sign_over(&site.client, node, kind, vmid, &cfg, &signed, &permit).await?;
    tracing::info!(
        spec = %spec.name,
        vmid,
        from = %theirs.install(),
        "taken over: the VM was handed over by another install"
    );
    Ok(TakeOver::Taken(theirs.uid().to_string()))
}

/// The one config write that makes a released VM this install's: `signed` (this install's
/// marker for the VM) replaces the marker line, keeping every other line, and `signed`'s
/// install tag joins the VM's tags. Guarded by the config's digest: a concurrent change makes
/// PVE refuse it rather than overwrite it. Also used by `proxsync adopt` for a VM handed over
/// without a shared key. `permit`: the gate's take-over (`gate::permit::take_over`,
/// `adopt_by_hand`), which allows writing `signed` and nothing else.
pub(crate) async fn sign_over(
    client: &impl Pve,
    node: &str,
    kind: GuestKind,
    vmid: u32,
    cfg: &VmConfig,
    signed: &Marker,
    permit: &Permit,
) -> Result<(), crate::pve::Error> {
    let mut tags = cfg.tags();
    tags.push(ownership_tag(&signed.install));
    tags.sort();
    tags.dedup();
    let params = VmParams::new()
        .marker(permit, signed.replace_in(cfg.description().unwrap_or("")))?
        .tags(&tags)?;
    client
        .set_config(node, kind, vmid, &params, cfg.digest())
        .await
}
