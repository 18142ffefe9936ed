//! Adoption by consent: a spec written by `proxsync import` (`proxsync.io/adopt` with the VM's
//! smbios1 uuid, or a container's first NIC's MAC) takes over the guest it names, which no
//! install made.
//!
//! The VM's config is read right before the one write, and the gate
//! (`gate::permit::adopt_by_consent`) checks it: the consented VMID, the recorded uuid and
//! name, no marker line and no `proxsync.*` tag. The signed marker and this install's tag are
//! then written in one config update guarded by the config's digest, and the record follows.
//! Interrupted between the two, the next cycle finds the VM carrying this install's verified
//! marker and adopts it as any VM with its marker. Then the VM is converged at once: a spec
//! that `import` wrote sends nothing more.

use crate::gate::permit::{self, Bare};
use crate::guest::GuestKind;
use crate::model::{Blocked, Note};
use crate::ownership::{Marker, new_uid};
use crate::pve::Pve;
use crate::pve::types::VmConfig;
use crate::spec::Spec;
use crate::store::{SpecRecord, VmState};

use super::converge::converge;
use super::identity::checked_site;
use super::vm::check_lock;
use super::{ActionError, ExecCtx, Outcome, VmRef, blocked, site};

pub(super) async fn adopt_by_consent(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<Outcome, ActionError> {
    let site_ctx = site(ctx, vm.site)?;
    let checked = checked_site(ctx, vm.site)?;
    let Some(consent) = spec.adopt.as_ref() else {
        return Err(blocked(Blocked::NoConsent {
            spec: spec.name.to_string(),
        }));
    };
    let cfg = match read_consented(ctx, vm, spec).await? {
        Ok(cfg) => cfg,
        Err(waiting) => return Ok(waiting),
    };
    let uid = new_uid();
    let tags = cfg.tags();
    let hwaddr = cfg.first_hwaddr();
    let bare = match vm.kind {
        GuestKind::Qemu => Bare {
            vmid: vm.vmid,
            name: cfg.get("name"),
            smbios1: cfg.get("smbios1"),
            hwaddr: None,
            description: cfg.description(),
            tags: &tags,
        },
        GuestKind::Lxc => Bare {
            vmid: vm.vmid,
            name: cfg.get("hostname"),
            smbios1: None,
            hwaddr: hwaddr.as_deref(),
            description: cfg.description(),
            tags: &tags,
        },
    };
    let permit = permit::adopt_by_consent(
        &checked,
        consent,
        bare,
        &ctx.install_id,
        &spec.name,
        spec.guest_name(),
        &uid,
    )
    .map_err(|why| {
        blocked(Blocked::NotAdopted {
            why: why.to_string(),
        })
    })?;
    let signed = Marker::signed(&ctx.marker_key, &ctx.install_id, &spec.name, &uid, vm.vmid);
    super::handover::sign_over(
        &site_ctx.client,
        vm.node,
        vm.kind,
        vm.vmid,
        &cfg,
        &signed,
        &permit,
    )
    .await?;
    tracing::info!(spec = %spec.name, vmid = vm.vmid, "adopted by the spec's consent");
    rec.uid = uid.into();
    rec.site = vm.site.into();
    rec.adopted = true;
    rec.provisioned = true;
    rec.follow(spec);
    rec.kind = vm.kind;
    rec.remember_identity(vm.vmid, cfg.guest_id(vm.kind));
    let note = Note::TakenByConsent {
        kind: vm.kind,
        vmid: vm.vmid,
    };
    rec.note(ctx.clock.now_ms(), "adopt", &note.to_string());
    let adopted = VmState::Exists {
        vmid: vm.vmid,
        node: vm.node.into(),
    };
    ctx.store.transition(&spec.name, rec, adopted)?;
    converge(ctx, vm, spec, rec).await
}

/// The consented guest's config, read right before the write: `Err(Waiting)` while a task
/// holds its lock; an error when it is gone, or when the spec's `unprivileged` is not the
/// container's (PVE keeps it, and the converge after the adoption would ask for what PVE
/// refuses an API token: a privileged container's features).
async fn read_consented(
    ctx: &ExecCtx<impl Pve>,
    vm: VmRef<'_>,
    spec: &Spec,
) -> Result<Result<VmConfig, Outcome>, ActionError> {
    let site_ctx = site(ctx, vm.site)?;
    let cfg = match site_ctx.client.vm_config(vm.node, vm.kind, vm.vmid).await {
        Ok(cfg) => cfg,
        Err(e) if e.is_not_found() => {
            return Err(blocked(Blocked::ConsentedGone {
                kind: vm.kind,
                vmid: vm.vmid,
                node: vm.node.to_string(),
            }));
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(waiting) = check_lock(ctx, site_ctx, vm.node, vm.kind, vm.vmid, &cfg).await? {
        return Ok(Err(waiting));
    }
    if let Some(why) = crate::render::container::privilege_mismatch(spec, &cfg) {
        return Err(blocked(Blocked::ConsentUnfit {
            why: why.to_string(),
        }));
    }
    Ok(Ok(cfg))
}
