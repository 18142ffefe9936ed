//! What makes a VM this spec's, as `execute` needs it: the signed marker it writes, the tags it
//! wants, and the gate's identity check (`gate::identity`) of a config it has just read, on a
//! site this cycle checked (`gate::site`). Every decision about a VM's identity is the gate's.

use crate::category::Category;
use crate::gate::identity::{NotOurs, VerifiedMarker, verify};
use crate::gate::site::{SiteChecked, checked};
use crate::guest::GuestKind;
use crate::model::Blocked;
use crate::ownership::{Marker, ownership_tag};
use crate::pve::Pve;
use crate::pve::types::VmConfig;
use crate::spec::Spec;
use crate::store::SpecRecord;

use super::{ActionError, ExecCtx, blocked, fail};

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

/// Site `name` as this cycle's observation checked it: it reaches its recorded cluster
/// (`gate::site::checked`). Nothing is done on a site that was not.
pub(super) fn checked_site(
    ctx: &ExecCtx<impl Pve>,
    name: &str,
) -> Result<SiteChecked, ActionError> {
    let view = ctx.views.get(name).ok_or_else(|| {
        blocked(Blocked::SiteNotObserved {
            site: name.to_string(),
        })
    })?;
    checked(view).map_err(|why| fail(Category::Conflict, why))
}

/// The gate's answer for the config of guest `vmid` (a `kind`) on `site`: this install's marker
/// (and, when `spec` is given, that spec's), its MAC verifying for this VMID or the state
/// database vouching for it (`vouched_uid`: the uid recorded for the spec whose record names
/// this VMID).
pub(super) fn verified(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteChecked,
    cfg: &VmConfig,
    kind: GuestKind,
    vmid: u32,
    spec: Option<&str>,
    vouched_uid: Option<&str>,
) -> Result<VerifiedMarker, NotOurs> {
    verify(
        site,
        &ctx.marker_key,
        &ctx.install_id,
        kind,
        vmid,
        cfg.description(),
        spec,
        vouched_uid,
    )
}
