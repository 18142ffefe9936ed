//! What makes a VM this spec's: the description marker and the ownership tag.

use crate::ownership::{Marker, ownership_tag};
use crate::pve::Pve;
use crate::pve::types::VmConfig;
use crate::spec::Spec;
use crate::state::SpecRecord;

use super::ExecCtx;

/// The description marker of a spec's VM at `vmid`, signed.
pub(super) fn marker(ctx: &ExecCtx<impl Pve>, spec: &Spec, rec: &SpecRecord, vmid: u32) -> Marker {
    Marker::signed(&ctx.marker_key, &ctx.install_id, &spec.name, &rec.uid, vmid)
}

pub(super) fn desired_tags(ctx: &ExecCtx<impl Pve>, spec: &Spec) -> Vec<String> {
    let mut tags = spec.tags.clone();
    tags.push(ownership_tag(&ctx.install_id));
    tags.sort();
    tags.dedup();
    tags
}

/// Whether `m` is this install's marker and, when `spec` is given, that spec's. The one marker
/// check: every decision about a VM's identity goes through it.
pub(super) fn is_our_marker(ctx: &ExecCtx<impl Pve>, m: &Marker, spec: Option<&str>) -> bool {
    m.install == ctx.install_id && spec.is_none_or(|s| m.spec == s)
}

/// Whether the config of VM `vmid` carries this install's marker (and, when `spec` is given,
/// that spec's) and the marker is to be trusted: its MAC verifies for this VMID, or the state
/// database vouches for this VM (`vouched_uid`: the uid recorded for the spec whose record
/// names this VMID; it covers markers written before signing, and a lost key). A marker typed
/// by hand or copied from another VM is never trusted.
pub(super) fn is_ours(
    ctx: &ExecCtx<impl Pve>,
    cfg: &VmConfig,
    vmid: u32,
    spec: Option<&str>,
    vouched_uid: Option<&str>,
) -> bool {
    cfg.description().and_then(Marker::parse).is_some_and(|m| {
        is_our_marker(ctx, &m, spec)
            && (m.verifies(&ctx.marker_key, vmid)
                || vouched_uid.is_some_and(|uid| !uid.is_empty() && uid == m.uid))
    })
}

/// Whether the config's marker is exactly the signed one this VM should carry (else converge
/// rewrites it: a marker from before signing, or signed with a lost key).
pub(super) fn marker_is_current(
    key: &crate::ownership::MarkerKey,
    cfg: &VmConfig,
    vmid: u32,
) -> bool {
    cfg.description()
        .and_then(Marker::parse)
        .is_some_and(|m| m.verifies(key, vmid))
}
