//! What makes a VM this spec's: the description marker and the ownership tag.

use crate::ownership::{Marker, ownership_tag};
use crate::pve::types::VmConfig;
use crate::spec::Spec;
use crate::state::SpecRecord;

use super::ExecCtx;

/// The description marker of a spec's VM.
pub(super) fn marker(ctx: &ExecCtx, spec: &Spec, rec: &SpecRecord) -> Marker {
    Marker {
        install: ctx.install_id.clone(),
        spec: spec.name.clone(),
        uid: rec.uid.clone(),
    }
}

pub(super) fn desired_tags(ctx: &ExecCtx, spec: &Spec) -> Vec<String> {
    let mut tags = spec.tags.clone();
    tags.push(ownership_tag(&ctx.install_id));
    tags.sort();
    tags.dedup();
    tags
}

/// Whether `m` is this install's marker and, when `spec` is given, that spec's. The one marker
/// check: every decision about a VM's identity goes through it.
pub(super) fn is_our_marker(ctx: &ExecCtx, m: &Marker, spec: Option<&str>) -> bool {
    m.install == ctx.install_id && spec.is_none_or(|s| m.spec == s)
}

/// Whether the config's description carries this install's marker and, when `spec` is given,
/// that spec's.
pub(super) fn is_ours(ctx: &ExecCtx, cfg: &VmConfig, spec: Option<&str>) -> bool {
    cfg.description()
        .and_then(Marker::parse)
        .is_some_and(|m| is_our_marker(ctx, &m, spec))
}
