//! A guest made from a `ProxmoxImage` (`image: {image: NAME}`) is created only once the image
//! is on its storage: until then its create waits ([`Verdict::WaitingForImage`]). Under
//! `imagePolicy: Recreate`, a guest made from an older version of its image (its record's
//! `made_from` is another file than the image names now) is deleted and made again, once the
//! new version is on its node ([`recreate`]); a set's members at most `maxUnavailable` at a
//! time (`rollout`).

use std::sync::Arc;

use super::{Action, Plan, PlanInput, Verdict};
use crate::model::{ObservedVm, SiteView, SpecRecord, VmState};
use crate::spec::{Image, ImagePolicy, Spec};

/// The rebuild of spec `spec`'s guest `vm` (found by its record, on the spec's node), when the
/// spec says `imagePolicy: Recreate`, its record says which file the guest was made from,
/// the image now names another file, and that file is on the guest's node. A guest whose
/// version is not recorded (adopted, or made by an older release) is never rebuilt.
pub(super) fn recreate(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    vm: &ObservedVm,
) -> Option<Action> {
    if spec.image_policy != ImagePolicy::Recreate {
        return None;
    }
    let made_from = rec?.made_from()?;
    let now = spec.made_from_now(input.images)?;
    let node_ok = (input.sites.get(spec.site.as_str())).is_some_and(|v| v.node_healthy(&spec.node));
    // A new template version is waited for as a dependency (`dependencies::hold`); a new
    // image version, until it is on the node.
    let waiting = match spec.image() {
        Image::Managed(name) => {
            (input.images_waiting).contains_key(&(name.clone(), spec.node.to_string()))
        }
        _ => false,
    };
    if made_from == now || !node_ok || waiting {
        return None;
    }
    Some(Action::Recreate {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        node: vm.node.to_string(),
        vmid: vm.vmid,
    })
}

/// A rebuild whose delete is recorded (`Deleting`) goes on: the delete is waited for (or sent
/// again when its task failed), then the guest is made anew. Only under `imagePolicy:
/// Recreate`: a delete recorded for a removed spec that came back is not finished for it.
pub(super) fn resume_recreate(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    view: &SiteView,
    actions: &mut Vec<Action>,
) -> Option<Verdict> {
    let VmState::Deleting { vmid, node, .. } = &rec?.vm else {
        return None;
    };
    if spec.image_policy != ImagePolicy::Recreate {
        return None;
    }
    if !view.node_healthy(node) {
        return Some(super::spec::unhealthy(view, node));
    }
    if let Some(vm) = view.vms.get(vmid)
        && vm.is_unknown()
    {
        return Some(Verdict::Unknown { vmid: *vmid });
    }
    actions.push(Action::Recreate {
        spec: spec.name.to_string(),
        site: spec.site.to_string(),
        node: node.to_string(),
        vmid: *vmid,
    });
    Some(Verdict::Acting)
}

/// Holds the create of each spec whose image waits.
pub(super) fn hold(input: &PlanInput<'_>, out: &mut Plan) {
    if input.images_waiting.is_empty() {
        return;
    }
    let mut held = Vec::new();
    for spec in input.desired.iter() {
        let Image::Managed(image) = spec.image() else {
            continue;
        };
        let Some(why) = (input.images_waiting).get(&(image.clone(), spec.node.to_string())) else {
            continue;
        };
        let creating = |a: &Action| matches!(a, Action::Create { spec: s, .. } if *s == spec.name);
        if out.actions.iter().any(creating) {
            held.push(spec.name.clone());
            Arc::make_mut(&mut out.verdicts).insert(
                spec.name.clone(),
                Verdict::WaitingForImage {
                    image: image.clone(),
                    why: why.clone(),
                },
            );
        }
    }
    if !held.is_empty() {
        out.actions.retain(
            |a| !matches!(a, Action::Create { spec, .. } if held.iter().any(|h| h == spec)),
        );
    }
}
