//! A change `changePolicy` guards, judged once it is applied: the guest passed its health
//! checks (the change ends: proxsync's older snapshots beyond `keep` are deleted), or it is
//! unhealthy (rolled back to the snapshot taken before it), or it waits (for a restart, for
//! its checks). A change rolled back is held until the spec changes. What the planner asks for
//! goes in the converge's `why`: `rollback` or `snapshots`.

use crate::model::health::Unwell;
use crate::model::{ChangeStep, ObservedVm, Power, SpecRecord};
use crate::spec::health::RollbackWhen;
use crate::spec::{PowerState, Spec};

use super::{PlanInput, Verdict};

/// What a converge of a guarded change's guest does first: roll the guest back to the guard's
/// snapshot.
pub const ROLLBACK: &str = "rollback";
/// What a converge of a guarded change's guest does first: end the change (the guard's
/// snapshot kept, older ones beyond `keep` deleted).
pub const END: &str = "snapshots";

/// The judgement of `spec`'s guarded change on guest `vm`, given what else differs (`why`,
/// which this extends): `Some` verdict when the spec is held (its change rolled back).
pub(super) fn judge(
    input: &PlanInput<'_>,
    spec: &Spec,
    rec: Option<&SpecRecord>,
    vm: &ObservedVm,
    why: &mut Vec<String>,
) -> Option<Verdict> {
    let rec = rec?;
    let changes = rec.changes_of(vm.vmid)?;
    if let Some(rb) = &changes.rolled_back
        && rb.hash == crate::spec::spec_hash(spec)
    {
        return Some(Verdict::RolledBack {
            vmid: vm.vmid,
            snapshot: rb.snapshot.clone(),
            why: rb.why.clone(),
        });
    }
    let Some(guard) = changes.guard.as_ref() else {
        // No change in flight, yet more of proxsync's snapshots than `keep`: a change's end
        // whose deletes a kill or an error cut short. Finished now, not at the next change.
        let keep = spec.change_policy.as_deref().map(|c| c.keep as usize);
        if why.is_empty() && keep.is_some_and(|keep| changes.snapshots.len() > keep) {
            why.push(END.to_string());
        }
        return None;
    };
    match guard.step {
        // Asked for before a kill, or failed: asked again (the same snapshot, the same guest).
        ChangeStep::RollingBack => *why = vec![ROLLBACK.to_string()],
        // Before the change was applied: the converge that applies it finishes the snapshot;
        // with nothing to apply any more (the spec changed back), the change ends.
        ChangeStep::Snapshotting => {
            if why.is_empty() {
                why.push(END.to_string());
            }
        }
        ChangeStep::Applied => {
            if why.is_empty() && rec.reboot_pending.is_empty() {
                match after_change(input, spec, vm) {
                    After::Passed => why.push(END.to_string()),
                    After::Unhealthy => *why = vec![ROLLBACK.to_string()],
                    After::Waiting => {}
                }
            }
        }
    }
    None
}

/// What the guest's health says of an applied change that took effect.
enum After {
    Passed,
    Unhealthy,
    Waiting,
}

fn after_change(input: &PlanInput<'_>, spec: &Spec, vm: &ObservedVm) -> After {
    // A guest the spec keeps stopped has nothing to check: its change runs at its next start.
    if spec.power_state != PowerState::Running {
        return After::Passed;
    }
    if vm.power != Power::Running {
        return After::Waiting;
    }
    let Some(_) = spec.health.as_deref() else {
        return After::Passed;
    };
    if !input.health_checked {
        return After::Waiting;
    }
    let rollback = spec
        .change_policy
        .as_deref()
        .is_some_and(|c| c.rollback == RollbackWhen::OnUnhealthy);
    match input.unwell.get(spec.name.as_str()) {
        None => After::Passed,
        Some(Unwell::Unhealthy) if rollback => After::Unhealthy,
        Some(_) => After::Waiting,
    }
}
