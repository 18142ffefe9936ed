//! Keeping a guest's HA resource (`vm:N`, a container's `ct:N`) as its spec's `ha` says: added when missing, changed when it
//! differs, removed when the spec drops `ha` and proxsync had added it (one a person added is
//! left alone). `ha.nodes` becomes a group of the guest's own on PVE 8 and a node-affinity rule on
//! PVE 9, made, changed and removed by proxsync only as `gate::ha` allows; removing the
//! resource on PVE 9 never takes a person's rule with it (`purge=0`).

use crate::category::Category;
use crate::gate::ha::{affinity_id, affinity_mark, may_change, may_remove, may_remove_resource};
use crate::gate::identity::VerifiedMarker;
use crate::guest::GuestKind;
use crate::model::Blocked;
use crate::pve::Pve;
use crate::pve::ha::{AffinityKind, AffinityParams, HaParams};
use crate::spec::{Ha, Spec};
use crate::store::SpecRecord;

use super::{ActionError, ExecCtx, SiteCtx, fail};

/// Returns whether anything changed.
// Long because: the resource and its group or rule in the order PVE needs them (a PVE 8 group
// before the resource names it, a PVE 9 rule after the resource it names exists), each with
// its own reads.
pub(super) async fn converge_ha(
    ctx: &ExecCtx<impl Pve>,
    site: &SiteCtx<impl Pve>,
    ours: &VerifiedMarker,
    spec: &Spec,
    rec: &mut SpecRecord,
) -> Result<bool, ActionError> {
    let client = &site.client;
    let vmid = ours.vmid();
    let guest = spec.kind();
    let mark = affinity_mark(&ctx.install_id, &spec.name);
    let now_ms = ctx.clock.now_ms();
    let Some(ha) = &spec.ha else {
        if !rec.ha_applied {
            return Ok(false);
        }
        let kind = AffinityKind::for_major(site.version().await?.triple().0);
        // A rule names the resource: it goes first. A group is named by the resource: after.
        if kind == AffinityKind::Rule {
            drop_affinity(client, kind, ours, &spec.name, &mark, now_ms, rec).await?;
        }
        if client.ha_resource(guest, vmid).await?.is_some() {
            let permit = may_remove_resource(ours, guest, rec.ha_applied)
                .map_err(|why| fail(Category::Conflict, why))?;
            tracing::info!(spec = %spec.name, vmid, "removing the HA resource (ha removed from the spec)");
            client
                .remove_ha_resource(guest, vmid, kind == AffinityKind::Rule, &permit)
                .await?;
        }
        if kind == AffinityKind::Group {
            drop_affinity(client, kind, ours, &spec.name, &mark, now_ms, rec).await?;
        }
        rec.ha_applied = false;
        return Ok(true);
    };
    let version = site.version().await?;
    let kind = AffinityKind::for_major(version.triple().0);
    if let Some(why) = ha.refusal_on(&site.name, &version.version, version.triple().0) {
        return Err(fail(Category::ConfigurationError, why));
    }
    let listed = ctx
        .views
        .get(&site.name)
        .and_then(|v| v.vms.get(&vmid))
        .and_then(|vm| vm.ha_state.as_deref());
    if let Some(why) = error_state(listed, guest, vmid, ha) {
        return Err(fail(Category::ConfigurationError, why));
    }
    let affinity = (!ha.nodes.is_empty()).then(|| AffinityParams {
        nodes: ha
            .nodes
            .iter()
            .map(|n| (n.node.clone(), n.priority))
            .collect(),
        strict: ha.strict,
        sid: guest.ha_sid(vmid),
        comment: mark.clone(),
    });
    let id = affinity_id(vmid);
    let mut changed = false;
    // PVE 8: the group exists before the resource names it.
    let group = match (&affinity, kind) {
        (Some(params), AffinityKind::Group) => {
            changed |= ensure_affinity(client, kind, &id, params, rec).await?;
            Some(id.clone())
        }
        _ => ha.group.clone(),
    };
    let want = HaParams {
        state: ha.state.as_str().to_string(),
        group,
        max_restart: ha.max_restart,
        max_relocate: ha.max_relocate,
        comment: resource_comment(&ctx.install_id, &spec.name),
    };
    changed |= match client.ha_resource(guest, vmid).await? {
        None => {
            tracing::info!(spec = %spec.name, vmid, state = %want.state, "adding the {} to the HA manager", guest.noun());
            client
                .add_ha_resource(guest, vmid, &want)
                .await
                .map_err(|e| refused_in_error_state(e, guest, vmid, ha))?;
            true
        }
        Some(current) if want.differs_from(&current) => {
            tracing::info!(spec = %spec.name, vmid, "updating the {}'s HA resource", guest.noun());
            client
                .update_ha_resource(guest, vmid, &want, current.digest.as_deref())
                .await
                .map_err(|e| refused_in_error_state(e, guest, vmid, ha))?;
            true
        }
        Some(_) => false,
    };
    rec.ha_applied = true;
    match (&affinity, kind) {
        // PVE 9: the rule names the resource, which exists now.
        (Some(params), AffinityKind::Rule) => {
            changed |= ensure_affinity(client, kind, &id, params, rec).await?;
        }
        // `nodes` dropped: the group (no longer named by the resource) or rule proxsync made.
        (None, _) => {
            changed |= drop_affinity(client, kind, ours, &spec.name, &mark, now_ms, rec).await?
        }
        _ => {}
    }
    Ok(changed)
}

/// The VM's group or rule as `params` say: made when missing, changed when it differs and
/// carries proxsync's mark. Returns whether anything changed.
async fn ensure_affinity(
    client: &impl Pve,
    kind: AffinityKind,
    id: &str,
    params: &AffinityParams,
    rec: &mut SpecRecord,
) -> Result<bool, ActionError> {
    let changed = match client.ha_affinity(kind, id).await? {
        None => {
            tracing::info!(id, kind = kind.word(), nodes = %params.nodes_text(), "making the HA node affinity");
            client.add_ha_affinity(kind, id, params).await?;
            true
        }
        Some(current) => {
            may_change(kind, id, current.comment.as_deref(), &params.comment)
                .map_err(|why| fail(Category::ConfigurationError, why))?;
            if params.differs_from(kind, &current) {
                tracing::info!(id, kind = kind.word(), nodes = %params.nodes_text(), "changing the HA node affinity");
                client
                    .update_ha_affinity(kind, id, params, current.digest.as_deref())
                    .await?;
                true
            } else {
                false
            }
        }
    };
    rec.ha_rule = Some(id.to_string());
    Ok(changed)
}

/// Removes the group or rule the record says proxsync made, when `gate::ha` allows it; one a
/// person changed is left, and the history says so. Returns whether anything changed.
async fn drop_affinity(
    client: &impl Pve,
    kind: AffinityKind,
    ours: &VerifiedMarker,
    spec: &str,
    mark: &str,
    now_ms: u64,
    rec: &mut SpecRecord,
) -> Result<bool, ActionError> {
    let Some(id) = rec.ha_rule.clone() else {
        return Ok(false);
    };
    if let Some(current) = client.ha_affinity(kind, &id).await? {
        match may_remove(ours, kind, &id, Some(&id), current.comment.as_deref(), mark) {
            Ok(permit) => {
                tracing::info!(
                    spec,
                    id,
                    kind = kind.word(),
                    "removing the HA node affinity proxsync made (ha.nodes dropped)"
                );
                client.remove_ha_affinity(kind, &id, &permit).await?;
            }
            Err(why) => {
                tracing::warn!(spec, id, "{why}");
                rec.note(now_ms, "HA node affinity kept", &why.to_string());
            }
        }
    }
    rec.ha_rule = None;
    Ok(true)
}

/// The comment proxsync writes on a guest's HA resource: whose it is.
fn resource_comment(install: &str, spec: &str) -> String {
    format!("proxsync {install}: spec {spec}")
}

/// The HA manager puts a service it gave up on in `error` (the listing's `hastate`); PVE then
/// refuses every change of it but disabling it (pve-ha-manager `API2/HA/Resources.pm`
/// `check_service_state`), a start included (`ha-manager set --state started`).
fn error_state(listed: Option<&str>, guest: GuestKind, vmid: u32, ha: &Ha) -> Option<String> {
    (listed == Some("error")).then(|| error_state_message(guest, vmid, ha))
}

fn error_state_message(guest: GuestKind, vmid: u32, ha: &Ha) -> String {
    Blocked::HaErrorState {
        kind: guest,
        vmid,
        state: ha.state.as_str().to_string(),
    }
    .to_string()
}

/// PVE's refusal of a change of a service in `error` (the listing was older), as
/// [`error_state`] says it.
fn refused_in_error_state(
    e: crate::pve::Error,
    guest: GuestKind,
    vmid: u32,
    ha: &Ha,
) -> ActionError {
    if e.meaning() == Some(crate::pve::texts::Meaning::HaErrorState) {
        fail(
            Category::ConfigurationError,
            error_state_message(guest, vmid, ha),
        )
    } else {
        e.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_in_error_is_refused_with_pve_s_words_and_the_fix() {
        let spec = crate::spec::test_spec("    ha: {}\n");
        let ha = spec.ha.as_deref().unwrap();
        assert!(error_state(Some("started"), GuestKind::Qemu, 100, ha).is_none());
        assert!(error_state(None, GuestKind::Qemu, 100, ha).is_none());
        let why = error_state(Some("error"), GuestKind::Qemu, 100, ha).unwrap();
        assert!(
            why.contains("in error state, must be disabled and fixed first"),
            "{why}"
        );
        assert!(
            why.contains("ha-manager set vm:100 --state disabled") && why.contains("started again"),
            "{why}"
        );
        let why = error_state(Some("error"), GuestKind::Lxc, 101, ha).unwrap();
        assert!(
            why.contains("service 'ct:101' in error state")
                && why.contains("ha-manager set ct:101 --state disabled")
                && why.contains("gave up on the container"),
            "{why}"
        );
    }
}
