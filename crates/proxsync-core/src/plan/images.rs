//! A guest made from a `ProxmoxImage` (`image: {image: NAME}`) is created only once the image
//! is on its storage: until then its create waits ([`Verdict::WaitingForImage`]).

use super::{Action, Plan, PlanInput, Verdict};
use crate::spec::Image;

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
        let Some(why) = (input.images_waiting).get(&(image.clone(), spec.node.clone())) else {
            continue;
        };
        let creating = |a: &Action| matches!(a, Action::Create { spec: s, .. } if *s == spec.name);
        if out.actions.iter().any(creating) {
            held.push(spec.name.clone());
            out.verdicts.insert(
                spec.name.clone(),
                Verdict::WaitingForImage {
                    image: image.clone(),
                    why: why.clone(),
                },
            );
        }
    }
    if !held.is_empty() {
        out.actions
            .retain(|a| !matches!(a, Action::Create { spec, .. } if held.contains(spec)));
    }
}
