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

pub(super) fn is_ours(ctx: &ExecCtx, spec: &Spec, cfg: &VmConfig) -> bool {
    cfg.description()
        .and_then(Marker::parse)
        .is_some_and(|m| m.install == ctx.install_id && m.spec == spec.name)
}
