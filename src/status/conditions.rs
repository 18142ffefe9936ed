//! A spec's status and its conditions (`Ready`, `Reconciling`, `Stalled`, `NodeHealthy`,
//! `Provisioned`, `RebootPending`), built each cycle from its record, the site's view, the plan
//! made after the actions and the outcome of this cycle's action.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    AttemptSummary, BackoffSummary, ConditionInput, ConditionStatus as S, DriftRecord, Reason,
    SpecStatus, TaskSummary, kinds,
};
use crate::execute::Outcome;
use crate::guest::GuestKind;
use crate::model::health::{GuestHealth, Verdict as Health};
use crate::observe::{ObservedVm, Power, SiteView};
use crate::plan::{Action, ConditionText, Duplicate, HandsOff, Verdict};
use crate::spec::{PowerState, Spec};
use crate::store::{ErrorKind, ErrorRecord, SpecRecord, VmState};

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn common(rec: Option<&SpecRecord>, status: &mut SpecStatus) {
    let Some(rec) = rec else { return };
    status.provisioned = rec.provisioned;
    status.ip_addresses = rec.ip_addresses.clone();
    status.last_task = rec.last_task.as_ref().map(|t| TaskSummary {
        upid: t.upid.clone(),
        kind: t.kind.clone(),
        status: t.status.clone(),
        at: at(t.at_ms),
    });
    status.backoff = match (&rec.last_error, rec.next_attempt_ms) {
        (Some(e), Some(next)) => Some(BackoffSummary {
            attempts: rec.attempts,
            next_attempt: at(next),
            category: e.category.as_str().to_string(),
            message: e.message.clone(),
        }),
        _ => None,
    };
    status.history = rec
        .history
        .iter()
        .map(|h| AttemptSummary {
            at: at(h.at_ms),
            action: h.action.to_string(),
            outcome: h.outcome.to_string(),
            tasks: h.tasks.clone(),
            took_ms: h.took_ms,
        })
        .collect();
}

/// What the plan made after this cycle's actions says of one spec.
#[derive(Clone, Copy, Default)]
pub(crate) struct FromPlan<'a> {
    pub verdict: Option<&'a Verdict>,
    /// Other VMs claiming the spec.
    pub duplicate: Option<&'a Duplicate>,
    /// The action still planned for it (names `Reconciling`'s step).
    pub action: Option<&'a Action>,
    /// The file its `ProxmoxImage` names now, for a guest made from one: `Ready` says which
    /// version the guest was made from, and whether the image moved on since.
    pub image_now: Option<&'a str>,
    /// What the health checks found of its guest (`spec.health`), if it is checked.
    pub health: Option<&'a GuestHealth>,
    /// Now (unix ms): a health check's verdict depends on it.
    pub now_ms: u64,
}

/// The status of a valid spec, from the plan made after this cycle's actions.
// Long because: each condition of the status in its file order, the later ones (Ready's health,
// Stalled) refining what the earlier ones decided; each is already a call.
pub(crate) fn spec_status(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    view: Option<&SiteView>,
    plan: FromPlan<'_>,
    outcome: Option<&Outcome>,
    commit: Option<&str>,
) -> SpecStatus {
    let FromPlan {
        verdict, duplicate, ..
    } = plan;
    // The VM once made: a create in flight shows no VMID yet. An observe-only spec's VM may be
    // one no record names (the VM its consent names).
    let observed = match verdict {
        Some(Verdict::Observed { vmid, .. } | Verdict::Suspended { vmid, .. }) => *vmid,
        _ => None,
    };
    let vmid = rec.and_then(|r| r.vm.made_vmid()).or(observed);
    let vm = view.and_then(|v| vmid.and_then(|id| v.vms.get(&id)));
    let mut st = SpecStatus {
        name: spec.name.to_string(),
        kind: spec.kind(),
        template: spec.template.is_some(),
        site: spec.site.to_string(),
        node: vm
            .map_or(spec.node.as_str(), |v| v.node.as_str())
            .to_string(),
        vm_id: vmid,
        vm_name: spec.guest_name().to_string(),
        tags: spec.tags.clone(),
        labels: spec.labels.clone(),
        state: match (rec.map(|r| &r.vm), vm) {
            (Some(VmState::Creating { .. }), _) => "creating".into(),
            (Some(VmState::Deleting { .. }), _) => "deleting".into(),
            (_, Some(vm)) => vm.power.as_str().into(),
            _ => "absent".into(),
        },
        commit: commit.map(str::to_string),
        spec_file: Some(spec.file.to_string()),
        observed_generation: rec.and_then(|r| r.applied_hash.as_ref().map(|h| h.to_string())),
        ..Default::default()
    };
    common(rec, &mut st);
    st.drift = vm.map_or_else(Vec::new, |vm| drift(spec, vm, rec));
    let mut c = Vec::new();

    // NodeHealthy: the VM's node, or the spec's node before there is a VM.
    let node = st.node.clone();
    c.push(node_healthy(view, &node));
    let kind = spec.kind();
    let mut prov = provisioned(kind, rec, vmid);
    if let (Reason::NotCreated, Some(id)) = (prov.reason, observed) {
        prov.message = ConditionText::ObservedOnly { kind, vmid: id }.to_string();
    }
    c.push(prov);
    c.push(reboot_pending(kind, rec));

    let error = rec.and_then(|r| r.last_error.as_deref());
    let (mut ready, reconciling) = ready_and_reconciling(spec, rec, vm, plan, outcome, error);
    if let Some(d) = duplicate {
        ready = duplicate_vm(kind, d);
    }
    if let Some(health) = spec.health.as_deref() {
        let running = vm.filter(|v| v.power == Power::Running);
        let checked = plan
            .health
            .filter(|g| running.is_some_and(|v| v.vmid == g.vmid));
        let verdict = checked.map(|g| g.verdict(health, plan.now_ms));
        c.push(healthy(
            kind,
            health,
            checked,
            verdict,
            (vmid.is_some(), running.is_some()),
        ));
        // Ready needs Healthy: a guest that matches its spec and runs but has not passed its
        // checks (or stopped passing them) is not Ready.
        if let (S::True, Some(v), PowerState::Running) = (ready.status, running, spec.power_state) {
            ready = match verdict {
                Some(Health::Healthy | Health::Failing { .. }) => ready,
                Some(Health::Unhealthy { .. }) => {
                    not_healthy(kind, v.vmid, verdict, Reason::Unhealthy)
                }
                Some(Health::Starting { .. }) | None => {
                    not_healthy(kind, v.vmid, verdict, Reason::HealthPending)
                }
            };
        }
    }
    c.push(ready);
    c.push(reconciling);
    match verdict {
        Some(Verdict::Observed { vmid, drift, .. }) => {
            c.push(synced(kind, *vmid, drift, HandsOff::ObserveOnly));
        }
        Some(Verdict::Suspended {
            vmid,
            drift,
            by,
            renamed_from,
        }) => {
            c.push(synced(kind, *vmid, drift, HandsOff::Suspended));
            c.push(suspended(spec, by, renamed_from.as_deref()));
        }
        _ => {}
    }
    c.push(match verdict {
        // A person must fix the site's endpoint or accept its cluster, whatever the record says.
        Some(Verdict::SiteIdentityChanged { message }) => ConditionInput::new(
            kinds::STALLED,
            S::True,
            Reason::SiteIdentityChanged,
            message.clone(),
        ),
        // A person decides whether the change is tried again (`reconcile NAME --retry`).
        Some(verdict @ Verdict::RolledBack { .. }) => ConditionInput::new(
            kinds::STALLED,
            S::True,
            Reason::RolledBack,
            ConditionText::ForAPerson { spec, verdict }.to_string(),
        ),
        _ => stalled(error),
    });
    st.conditions = c;
    st
}

/// `Healthy` of a spec with `health`: what the last checks of its running guest found.
fn healthy(
    kind: GuestKind,
    health: &crate::spec::health::Health,
    guest: Option<&GuestHealth>,
    verdict: Option<Health>,
    (made, running): (bool, bool),
) -> ConditionInput {
    let (Some(guest), Some(verdict)) = (guest, verdict) else {
        let text = ConditionText::HealthNotChecked {
            kind,
            made,
            running,
        };
        let reason = match made && running {
            true => Reason::HealthPending,
            false => Reason::NotChecked,
        };
        return ConditionInput::new(kinds::HEALTHY, S::Unknown, reason, text.to_string());
    };
    let (status, reason) = match verdict {
        Health::Healthy => (S::True, Reason::Passing),
        Health::Failing { .. } => (S::True, Reason::Failing),
        Health::Starting { .. } => (S::Unknown, Reason::HealthPending),
        Health::Unhealthy { .. } => (S::False, Reason::Unhealthy),
    };
    let text = ConditionText::Health {
        kind,
        guest,
        verdict,
        health,
    };
    ConditionInput::new(kinds::HEALTHY, status, reason, text.to_string())
}

/// `Ready` False while the guest is not healthy.
fn not_healthy(
    kind: GuestKind,
    vmid: u32,
    verdict: Option<Health>,
    reason: Reason,
) -> ConditionInput {
    let text = ConditionText::NotHealthy {
        kind,
        vmid,
        verdict,
    };
    ConditionInput::new(kinds::READY, S::False, reason, text.to_string())
}

/// How `vm` differs from `spec` in the listing, each field marked when PVE holds the spec's
/// value for the guest's next start.
fn drift(spec: &Spec, vm: &ObservedVm, rec: Option<&SpecRecord>) -> Vec<DriftRecord> {
    let pending = rec.map_or(&[][..], |r| &r.reboot_pending[..]);
    crate::plan::observed_drift(spec, vm)
        .into_iter()
        .map(|d| DriftRecord {
            at_next_start: d.waits_for_start(pending),
            field: d.field.to_string(),
            spec: d.spec,
            guest: d.vm,
        })
        .collect()
}

/// `Synced` of a hands-off spec: whether its guest matches it, each differing field with the
/// spec's value and the guest's.
fn synced(
    kind: GuestKind,
    vmid: Option<u32>,
    drift: &[crate::plan::FieldDrift],
    held: HandsOff,
) -> ConditionInput {
    match vmid {
        None => ConditionInput::new(
            kinds::SYNCED,
            S::False,
            Reason::Drifted,
            ConditionText::NoGuestWhile { kind, held }.to_string(),
        ),
        Some(vmid) if drift.is_empty() => ConditionInput::new(
            kinds::SYNCED,
            S::True,
            Reason::InSync,
            ConditionText::MatchesListing { kind, vmid }.to_string(),
        ),
        Some(vmid) => ConditionInput::new(
            kinds::SYNCED,
            S::False,
            Reason::Drifted,
            ConditionText::Differs { kind, vmid, drift }.to_string(),
        ),
    }
}

/// `Suspended` True: who suspended the spec, since when and why, and how to resume it.
fn suspended(
    spec: &Spec,
    by: &crate::store::Suspension,
    renamed_from: Option<&str>,
) -> ConditionInput {
    let text = match renamed_from {
        Some(from) => ConditionText::SuspendedThrough {
            kind: spec.kind(),
            from,
            by,
        },
        None => ConditionText::Suspended { spec, by },
    };
    ConditionInput::new(
        kinds::SUSPENDED,
        S::True,
        Reason::Suspended,
        text.to_string(),
    )
}

/// `Ready` False while other guests claim the spec: a second guest is never silently ignored.
fn duplicate_vm(kind: GuestKind, duplicate: &Duplicate) -> ConditionInput {
    ConditionInput::new(
        kinds::READY,
        S::False,
        Reason::DuplicateVm,
        ConditionText::Duplicate { kind, duplicate }.to_string(),
    )
}

/// `Ready` and `Reconciling` with one reason and message: `Ready` False, and `Reconciling`
/// `reconciling` (True while proxsync works at it, False while it waits for a person).
fn both(
    reconciling: S,
    reason: Reason,
    text: ConditionText<'_>,
) -> (ConditionInput, ConditionInput) {
    let message = text.to_string();
    (
        ConditionInput::new(kinds::READY, S::False, reason, message.clone()),
        ConditionInput::new(kinds::RECONCILING, reconciling, reason, message),
    )
}

/// `Ready` and `Reconciling`, from the verdict of the plan made after the actions.
// Long because: one arm per verdict of the plan (with the outcome and backoff that refine
// it), each giving the two conditions together so they never disagree.
fn ready_and_reconciling(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    vm: Option<&ObservedVm>,
    plan: FromPlan<'_>,
    outcome: Option<&Outcome>,
    error: Option<&ErrorRecord>,
) -> (ConditionInput, ConditionInput) {
    let FromPlan {
        verdict,
        action: planned,
        image_now,
        ..
    } = plan;
    let made = image_now.map(|now| (rec.and_then(SpecRecord::made_from), now));
    let vmid = rec.and_then(|r| r.vm.made_vmid());
    let kind = spec.kind();
    let text = |t: ConditionText<'_>| t.to_string();
    match verdict {
        Some(Verdict::UpToDate { vmid }) => (
            ConditionInput::new(
                kinds::READY,
                S::True,
                Reason::Available,
                text(ConditionText::UpToDate {
                    spec,
                    vm,
                    vmid: *vmid,
                    made,
                }),
            ),
            ConditionInput::new(kinds::RECONCILING, S::False, Reason::UpToDate, ""),
        ),
        Some(Verdict::BackingOff { until_ms }) => (
            ConditionInput::new(
                kinds::READY,
                S::False,
                Reason::Failed,
                error.map(failure).unwrap_or_default(),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::BackingOff,
                text(ConditionText::NextAttempt { at_ms: *until_ms }),
            ),
        ),
        Some(Verdict::NodeUnhealthy { node, .. }) => both(
            S::True,
            Reason::NodeUnhealthy,
            ConditionText::WaitingForNode { node },
        ),
        Some(Verdict::SiteIdentityChanged { message }) => (
            ConditionInput::new(
                kinds::READY,
                S::False,
                Reason::SiteIdentityChanged,
                message.clone(),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::False,
                Reason::SiteIdentityChanged,
                text(ConditionText::SiteUnsettled),
            ),
        ),
        Some(Verdict::SiteUnreachable { error }) => (
            ConditionInput::new(
                kinds::READY,
                S::Unknown,
                Reason::NotReady,
                error.to_string(),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NotReady,
                text(ConditionText::WaitingForSite),
            ),
        ),
        Some(Verdict::ListingIncomplete { why }) => (
            ConditionInput::new(kinds::READY, S::Unknown, Reason::NotReady, why.clone()),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NotReady,
                text(ConditionText::WaitingForWholeListing),
            ),
        ),
        Some(Verdict::Unknown { vmid }) => (
            ConditionInput::new(
                kinds::READY,
                S::Unknown,
                Reason::NotReady,
                text(ConditionText::UnknownState { kind, vmid: *vmid }),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NotReady,
                text(ConditionText::WaitingForState { kind }),
            ),
        ),
        Some(Verdict::BeingMade { vmid }) => (
            ConditionInput::new(
                kinds::READY,
                S::Unknown,
                Reason::NotReady,
                text(ConditionText::BeingMade { kind, vmid: *vmid }),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NotReady,
                text(ConditionText::WaitingForTaskMaking { kind, vmid: *vmid }),
            ),
        ),
        Some(Verdict::HeldByInstall { install, vmid }) => (
            ConditionInput::new(
                kinds::READY,
                S::False,
                Reason::HeldByInstall,
                text(ConditionText::HeldByInstall {
                    kind,
                    vmid: *vmid,
                    install,
                }),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::HeldByInstall,
                text(ConditionText::WaitingForHandOver {
                    kind,
                    vmid: *vmid,
                    install,
                }),
            ),
        ),
        Some(
            verdict @ (Verdict::RenameSuspected { .. }
            | Verdict::RenameUnproven { .. }
            | Verdict::SiteMoved { .. }
            | Verdict::RolledBack { .. }
            | Verdict::KindChanged { .. }
            | Verdict::UnverifiedClaim { .. }
            | Verdict::Unmarked { .. }
            | Verdict::AdoptRefused { .. }
            | Verdict::AdoptionsHeld { .. }),
        ) => both(
            S::False,
            for_a_person(verdict),
            ConditionText::ForAPerson { spec, verdict },
        ),
        Some(Verdict::Observed {
            vmid,
            renamed_from: Some(from),
            ..
        }) => both(
            S::False,
            Reason::Observing,
            ConditionText::ObservedRename {
                kind,
                vmid: *vmid,
                from,
            },
        ),
        Some(Verdict::Observed { vmid, drift, .. }) => {
            let ready = match (vmid, drift.is_empty()) {
                (Some(vmid), true) => ConditionInput::new(
                    kinds::READY,
                    S::True,
                    Reason::Observed,
                    text(ConditionText::MatchesListing { kind, vmid: *vmid }),
                ),
                _ => ConditionInput {
                    kind: kinds::READY,
                    ..synced(kind, *vmid, drift, HandsOff::ObserveOnly)
                },
            };
            (
                ready,
                ConditionInput::new(
                    kinds::RECONCILING,
                    S::False,
                    Reason::Observing,
                    text(ConditionText::ObserveOnly { kind }),
                ),
            )
        }
        Some(Verdict::RollingOut {
            set,
            max_unavailable,
            stopped_by,
        }) => both(
            S::True,
            Reason::RollingOut,
            ConditionText::RollingOut {
                set: set.as_deref(),
                max_unavailable: *max_unavailable,
                stopped_by: stopped_by.as_deref(),
            },
        ),
        Some(Verdict::WaitingForImage { image, why }) => both(
            S::True,
            Reason::WaitingForImage,
            ConditionText::WaitingForImage { kind, image, why },
        ),
        Some(Verdict::WaitingForDependencies {
            on,
            elsewhere,
            not_healthy,
        }) => both(
            S::True,
            Reason::WaitingForDependencies,
            ConditionText::WaitingForDependencies {
                kind,
                on,
                elsewhere: *elsewhere,
                not_healthy: *not_healthy,
            },
        ),
        Some(Verdict::Suspended {
            vmid, drift, by, ..
        }) => {
            let ready = match (vmid, drift.is_empty()) {
                (Some(vmid), true) => ConditionInput::new(
                    kinds::READY,
                    S::True,
                    Reason::Suspended,
                    text(ConditionText::MatchesListing { kind, vmid: *vmid }),
                ),
                _ => ConditionInput {
                    kind: kinds::READY,
                    reason: Reason::Suspended,
                    ..synced(kind, *vmid, drift, HandsOff::Suspended)
                },
            };
            (
                ready,
                ConditionInput::new(
                    kinds::RECONCILING,
                    S::False,
                    Reason::Suspended,
                    text(ConditionText::SuspendedNoAction { kind, by }),
                ),
            )
        }
        Some(Verdict::Migrating { from, to, vmid }) => {
            let (ready, reconciling) = acting(kind, rec, Some(*vmid), outcome, None);
            if ready.reason != Reason::Updating {
                return (ready, reconciling);
            }
            both(
                S::True,
                Reason::Migrating,
                ConditionText::Migrating {
                    kind,
                    vmid: *vmid,
                    from,
                    to,
                },
            )
        }
        Some(Verdict::Acting) | None | Some(Verdict::Invalid) => {
            acting(kind, rec, vmid, outcome, planned)
        }
    }
}

/// A failed action's error in words: its category and message.
fn failure(e: &ErrorRecord) -> String {
    ConditionText::Failure {
        category: e.category,
        message: &e.message,
    }
    .to_string()
}

/// The reason of a verdict that holds a spec until a person decides (its words are
/// [`ConditionText::ForAPerson`]).
fn for_a_person(verdict: &Verdict) -> Reason {
    match verdict {
        Verdict::RenameSuspected { .. } => Reason::RenameSuspected,
        Verdict::SiteMoved { .. } => Reason::SiteMoved,
        Verdict::RolledBack { .. } => Reason::RolledBack,
        Verdict::KindChanged { .. } => Reason::KindChanged,
        Verdict::RenameUnproven { .. } => Reason::RenameUnproven,
        Verdict::Unmarked { .. } => Reason::MarkerMissing,
        Verdict::UnverifiedClaim { .. } => Reason::UnverifiedClaim,
        Verdict::AdoptRefused { .. } | Verdict::AdoptionsHeld { .. } => Reason::AdoptRefused,
        _ => Reason::NotReady,
    }
}

/// `Stalled`: true when the last error needs a human: a stale lock (no task holds it; the
/// message gives the command to clear it), or a category that always does.
fn stalled(error: Option<&ErrorRecord>) -> ConditionInput {
    match error {
        Some(e) if e.needs_human() => {
            let reason = match e.kind {
                ErrorKind::StaleLock => Reason::StaleLock,
                ErrorKind::Protected => Reason::Protected,
                ErrorKind::MarkerMissing => Reason::MarkerMissing,
                ErrorKind::Plain => Reason::for_category(e.category),
            };
            ConditionInput::new(kinds::STALLED, S::True, reason, e.message.clone())
        }
        _ => ConditionInput::new(kinds::STALLED, S::False, Reason::NotStalled, ""),
    }
}

/// `NodeHealthy` for the node a spec's VM is on (or is to be created on).
fn node_healthy(view: Option<&SiteView>, node: &str) -> ConditionInput {
    match view {
        None => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::Unknown,
            Reason::NotYetObserved,
            ConditionText::SiteNotObserved.to_string(),
        ),
        Some(v) if v.identity_changed => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::Unknown,
            Reason::SiteIdentityChanged,
            ConditionText::OtherCluster { site: &v.name }.to_string(),
        ),
        Some(v) if !v.reachable() => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::Unknown,
            Reason::SiteUnreachable,
            ConditionText::SiteUnreachable {
                site: &v.name,
                error: v.error.as_deref().unwrap_or_default(),
            }
            .to_string(),
        ),
        Some(v) if !v.health.quorate => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::False,
            Reason::NoQuorum,
            ConditionText::NoQuorum.to_string(),
        ),
        Some(v) if v.health.node_healthy(node) => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::True,
            Reason::NodeOnline,
            ConditionText::NodeOnline { node }.to_string(),
        ),
        Some(_) => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::False,
            Reason::NodeOffline,
            ConditionText::NodeOffline { node }.to_string(),
        ),
    }
}

/// `Provisioned`, from the record.
fn provisioned(kind: GuestKind, rec: Option<&SpecRecord>, vmid: Option<u32>) -> ConditionInput {
    if let Some(r) = rec.filter(|r| r.provisioned) {
        let reason = match r.adopted {
            true => Reason::Adopted,
            false => Reason::Created,
        };
        let text = ConditionText::Provisioned {
            kind,
            vmid: vmid.unwrap_or(0),
            adopted: r.adopted,
        };
        ConditionInput::new(kinds::PROVISIONED, S::True, reason, text.to_string())
    } else {
        ConditionInput::new(
            kinds::PROVISIONED,
            S::False,
            Reason::NotCreated,
            ConditionText::NotProvisioned { kind }.to_string(),
        )
    }
}

/// `RebootPending`, from the changes the record says take effect at the next start.
fn reboot_pending(kind: GuestKind, rec: Option<&SpecRecord>) -> ConditionInput {
    let pending = rec.map(|r| r.reboot_pending.clone()).unwrap_or_default();
    if pending.is_empty() {
        ConditionInput::new(
            kinds::REBOOT_PENDING,
            S::False,
            Reason::NoPendingChanges,
            "",
        )
    } else {
        ConditionInput::new(
            kinds::REBOOT_PENDING,
            S::True,
            Reason::PendingChanges,
            ConditionText::RebootPending {
                kind,
                fields: &pending,
            }
            .to_string(),
        )
    }
}

/// `Ready` and `Reconciling` while proxsync acts (or is about to): the step, from this cycle's
/// outcome or the record's phase.
fn acting(
    kind: GuestKind,
    rec: Option<&SpecRecord>,
    vmid: Option<u32>,
    outcome: Option<&Outcome>,
    planned: Option<&Action>,
) -> (ConditionInput, ConditionInput) {
    let said = |t: ConditionText<'_>| t.to_string();
    let (reason, message) = match (outcome, rec.map(|r| &r.vm)) {
        (Some(Outcome::StillRunning { upid }), _) => (
            Reason::WaitingForTask,
            said(ConditionText::TaskRunning { upid }),
        ),
        (Some(Outcome::Waiting(wait)), _) => (Reason::WaitingForLock, wait.to_string()),
        (Some(Outcome::Failed(e)), _) => (
            Reason::Failed,
            said(ConditionText::Failure {
                category: e.category,
                message: &e.message,
            }),
        ),
        (_, Some(VmState::Creating { .. })) => {
            (Reason::Creating, said(ConditionText::Creating { kind }))
        }
        (_, Some(VmState::Deleting { .. })) => {
            (Reason::Deleting, said(ConditionText::Deleting { kind }))
        }
        _ if vmid.is_none() => (Reason::Creating, said(ConditionText::WillCreate { kind })),
        _ => (Reason::Updating, said(ConditionText::WillUpdate { kind })),
    };
    if reason == Reason::Updating
        && let Some((step, message)) = planned.and_then(|a| step_of(kind, a))
    {
        return (
            ConditionInput::new(kinds::READY, S::False, reason, message.clone()),
            ConditionInput::new(kinds::RECONCILING, S::True, step, message),
        );
    }
    (
        ConditionInput::new(kinds::READY, S::False, reason, message.clone()),
        ConditionInput::new(kinds::RECONCILING, S::True, reason, message),
    )
}

/// `Reconciling`'s step for the action still planned for a spec whose VM exists: taking it
/// over, starting or stopping it, growing its disk, or changing its config.
fn step_of(kind: GuestKind, action: &Action) -> Option<(Reason, String)> {
    let (step, text) = match action {
        Action::Adopt { vmid, .. } => (
            Reason::Adopting,
            ConditionText::TakingOver {
                kind,
                vmid: *vmid,
                by_consent: false,
            },
        ),
        Action::AdoptByConsent { vmid, .. } => (
            Reason::Adopting,
            ConditionText::TakingOver {
                kind,
                vmid: *vmid,
                by_consent: true,
            },
        ),
        Action::Converge { vmid, why, .. } => {
            let has = |w: &str| why.iter().any(|x| x == w);
            let step = if has("start") || has("shutdown") || has("reboot") {
                Reason::PowerChange
            } else if has("disk") {
                Reason::Resizing
            } else {
                Reason::Configuring
            };
            (
                step,
                ConditionText::WillUpdateParts {
                    kind,
                    vmid: *vmid,
                    why,
                },
            )
        }
        _ => return None,
    };
    Some((step, text.to_string()))
}

/// The status of a spec that failed validation: its VM (if any) is left as it is.
/// [`invalid_status`] of a spec whose SOPS-encrypted value does not open: `Stalled` with
/// `DecryptionFailed`. `messages` never hold the value.
pub(crate) fn decryption_failed_status(
    name: &str,
    rec: Option<&SpecRecord>,
    messages: &[String],
    commit: Option<&str>,
) -> SpecStatus {
    let mut st = invalid_status(name, rec, messages, commit);
    let message = ConditionText::DecryptionFailed {
        noun: recorded_noun(rec),
        messages,
    }
    .to_string();
    for c in &mut st.conditions {
        if c.kind == kinds::READY {
            c.message = message.clone();
        } else if c.kind == kinds::STALLED {
            c.reason = Reason::DecryptionFailed;
            c.message = message.clone();
        }
    }
    st
}

/// The word for the guest of a spec that is not read (invalid, or its secret does not open):
/// its record's kind; `guest` without a record, as the kind is not known then.
fn recorded_noun(rec: Option<&SpecRecord>) -> &'static str {
    rec.map_or("guest", |r| r.kind.noun())
}

pub(crate) fn invalid_status(
    name: &str,
    rec: Option<&SpecRecord>,
    messages: &[String],
    commit: Option<&str>,
) -> SpecStatus {
    let mut st = SpecStatus {
        name: name.to_string(),
        kind: rec.map(|r| r.kind).unwrap_or_default(),
        template: rec.is_some_and(|r| r.built_template),
        site: rec.map(|r| r.site.to_string()).unwrap_or_default(),
        node: rec
            .and_then(|r| r.vm.node())
            .map(str::to_string)
            .unwrap_or_default(),
        vm_id: rec.and_then(|r| r.vm.made_vmid()),
        state: if rec.and_then(|r| r.vm.made_vmid()).is_some() {
            "unknown".into()
        } else {
            "absent".into()
        },
        commit: commit.map(str::to_string),
        ..Default::default()
    };
    common(rec, &mut st);
    let message = ConditionText::Invalid {
        noun: recorded_noun(rec),
        messages,
    }
    .to_string();
    st.conditions = vec![
        ConditionInput::new(kinds::READY, S::False, Reason::InvalidSpec, message.clone()),
        ConditionInput::new(kinds::RECONCILING, S::False, Reason::InvalidSpec, ""),
        ConditionInput::new(kinds::STALLED, S::True, Reason::ValidationFailed, message),
    ];
    if rec.is_some_and(|r| r.provisioned) {
        st.conditions.push(ConditionInput::new(
            kinds::PROVISIONED,
            S::True,
            Reason::Created,
            "",
        ));
    }
    st
}

/// The status of a removed spec whose VM stays because its `protection` flag stops the delete
/// (the record's last error is `Protected`): `Ready` False `Deleting` and `Stalled` with what
/// to do, so the file a person looks at does not keep saying Ready.
pub(crate) fn removed_status(
    name: &str,
    rec: &SpecRecord,
    view: Option<&SiteView>,
    kept: Option<&crate::plan::TemplateKept>,
) -> SpecStatus {
    let vmid = rec.vm.made_vmid();
    let vm = view.and_then(|v| vmid.and_then(|id| v.vms.get(&id)));
    let mut st = SpecStatus {
        name: name.to_string(),
        kind: rec.kind,
        template: rec.built_template,
        site: rec.site.to_string(),
        node: rec.vm.node().map(str::to_string).unwrap_or_default(),
        vm_id: vmid,
        state: vm.map_or("unknown", |vm| vm.power.as_str()).into(),
        ..Default::default()
    };
    common(Some(rec), &mut st);
    let error = rec.last_error.as_deref();
    let message = match kept {
        // Kept by the plan, not by an error.
        Some(why) => ConditionText::TemplateKept { why }.to_string(),
        None => ConditionText::RemovedKept {
            kind: rec.kind,
            error,
        }
        .to_string(),
    };
    st.conditions = vec![
        ConditionInput::new(kinds::READY, S::False, Reason::Deleting, message),
        ConditionInput::new(kinds::RECONCILING, S::True, Reason::BackingOff, ""),
        stalled(error),
    ];
    if rec.provisioned {
        st.conditions.push(ConditionInput::new(
            kinds::PROVISIONED,
            S::True,
            if rec.adopted {
                Reason::Adopted
            } else {
                Reason::Created
            },
            "",
        ));
    }
    st
}

/// True when the status carries a condition of that type with that status.
pub(crate) fn has_condition(st: &SpecStatus, kind: &str, status: S) -> bool {
    st.conditions
        .iter()
        .any(|c| c.kind == kind && c.status == status)
}

#[cfg(test)]
mod stalled_tests {
    use super::*;
    use crate::category::Category;

    fn error(category: Category, message: &str, kind: ErrorKind) -> ErrorRecord {
        ErrorRecord {
            category,
            message: message.to_string(),
            at_ms: 0,
            inputs: String::new(),
            kind,
        }
    }

    fn reason(e: &ErrorRecord) -> (S, Reason) {
        let c = stalled(Some(e));
        (c.status, c.reason)
    }

    #[test]
    fn stalled_follows_the_error_kind_and_the_category() {
        let lock = "VM 100 is locked (create) but no task holds the lock; qm unlock 100";
        assert_eq!(
            reason(&error(Category::LockError, lock, ErrorKind::StaleLock)),
            (S::True, Reason::StaleLock)
        );
        // The kind decides, not the text (older records are converted as they are read:
        // `state::tests::error_records_of_older_releases_keep_their_verdict`).
        assert_eq!(
            reason(&error(Category::LockError, lock, ErrorKind::Plain)),
            (S::False, Reason::NotStalled)
        );
        assert_eq!(
            reason(&error(Category::PermissionDenied, "403", ErrorKind::Plain)),
            (S::True, Reason::for_category(Category::PermissionDenied))
        );
        assert_eq!(
            reason(&error(
                Category::LockError,
                "can't lock file",
                ErrorKind::Plain
            )),
            (S::False, Reason::NotStalled)
        );
        assert_eq!(
            reason(&error(
                Category::NetworkError,
                "timed out",
                ErrorKind::Plain
            )),
            (S::False, Reason::NotStalled)
        );
        assert_eq!(stalled(None).status, S::False);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status names each field the listing shows differing from the spec, with both
    /// values, and marks what PVE holds for the guest's next start; a guest that matches has
    /// none.
    #[test]
    fn drift_is_written_field_by_field_with_what_waits_for_a_start() {
        let spec = crate::spec::test_spec("    memory: 4Gi\n    tags: [web]\n");
        let vm = ObservedVm {
            kind: GuestKind::Qemu,
            vmid: 100,
            node: spec.node.clone(),
            name: Some(spec.guest_name().into()),
            power: crate::model::Power::Running,
            tags: spec.tags.iter().map(|t| t.as_str().into()).collect(),
            cpus: Some(spec.hardware.vcpus(spec.cores())),
            memory_bytes: Some(2048 << 20),
            disk_bytes: Some(spec.root_disk_bytes()),
            lock: None,
            ha_state: None,
            template: false,
            marker: None,
            marker_read: true,
            marker_verified: true,
            making: None,
            uptime_secs: Default::default(),
        };
        let mut view = SiteView::unreachable(&spec.site, String::new());
        view.error = None;
        view.vms.insert(100, vm.clone());
        let rec = SpecRecord {
            vm: VmState::Exists {
                vmid: 100,
                node: spec.node.clone(),
            },
            provisioned: true,
            reboot_pending: vec!["memory".into()],
            ..Default::default()
        };
        let plan = FromPlan {
            verdict: Some(&Verdict::UpToDate { vmid: 100 }),
            duplicate: None,
            action: None,
            image_now: None,
            ..Default::default()
        };
        let st = spec_status(&spec, Some(&rec), Some(&view), plan, None, None);
        assert_eq!(
            st.drift,
            vec![DriftRecord {
                field: "memory".into(),
                spec: "4096 MiB".into(),
                guest: "2048 MiB".into(),
                at_next_start: true,
            }]
        );
        view.vms.insert(
            100,
            ObservedVm {
                memory_bytes: Some(4096 << 20),
                ..vm
            },
        );
        let st = spec_status(&spec, Some(&rec), Some(&view), plan, None, None);
        assert_eq!(st.drift, Vec::new());
    }

    /// Every reason a condition is written with is one its list in `reasons` (and so
    /// docs/status.md) names for it, whatever the verdict, record and outcome.
    #[test]
    fn every_reason_written_is_listed_for_its_condition() {
        use crate::execute::ActionError;
        use crate::status::reasons;
        let spec = crate::spec::test_spec("");
        let exists = SpecRecord {
            vm: VmState::Exists {
                vmid: 100,
                node: "pve1".into(),
            },
            provisioned: true,
            ..Default::default()
        };
        let adopted = SpecRecord {
            adopted: true,
            reboot_pending: vec!["cpu".into()],
            ..exists.clone()
        };
        let records = [
            None,
            Some(SpecRecord::default()),
            Some(exists),
            Some(adopted),
        ];
        let verdicts = [
            Verdict::UpToDate { vmid: 100 },
            Verdict::Acting,
            Verdict::Migrating {
                from: "pve1".into(),
                to: "pve2".into(),
                vmid: 100,
            },
            Verdict::BackingOff { until_ms: 0 },
            Verdict::NodeUnhealthy {
                node: "pve1".into(),
                quorate: false,
            },
            Verdict::SiteUnreachable {
                error: crate::plan::Unreadable::Observed("down".into()),
            },
            Verdict::Unknown { vmid: 100 },
            Verdict::BeingMade { vmid: 100 },
            Verdict::Invalid,
            Verdict::RenameSuspected {
                from: "old".into(),
                vmid: 100,
            },
            Verdict::SiteMoved {
                from: "other".into(),
                vmid: 100,
            },
            Verdict::RenameUnproven {
                from: "old".into(),
                vmid: 100,
                why: Box::new(crate::gate::rename::Refused::NotShown {
                    kind: GuestKind::Qemu,
                    vmid: 100,
                    why: crate::gate::rename::Unshown::OtherUid {
                        carries: "u2".into(),
                        from: "old".into(),
                        recorded: "u1".into(),
                    },
                }),
            },
            Verdict::UnverifiedClaim { vmid: 100 },
            Verdict::HeldByInstall {
                install: "b".into(),
                vmid: 100,
            },
            Verdict::Observed {
                vmid: Some(100),
                drift: Vec::new(),
                renamed_from: None,
            },
            Verdict::Observed {
                vmid: Some(100),
                drift: Vec::new(),
                renamed_from: Some("old".into()),
            },
            Verdict::Suspended {
                vmid: Some(100),
                drift: Vec::new(),
                by: Box::new(by_hand()),
                renamed_from: Some("old".into()),
            },
        ];
        let outcomes = [
            None,
            Some(Outcome::Done),
            Some(Outcome::StillRunning {
                upid: "UPID".into(),
            }),
            Some(Outcome::Waiting(crate::model::Wait::Stopping)),
            Some(Outcome::Failed(ActionError {
                category: crate::category::Category::PermissionDenied,
                message: "403".into(),
                kind: ErrorKind::Plain,
                again: false,
            })),
        ];
        let listed = |kind: &str| match kind {
            kinds::READY => reasons::READY,
            kinds::RECONCILING => reasons::RECONCILING,
            kinds::STALLED => reasons::STALLED,
            kinds::NODE_HEALTHY => reasons::NODE_HEALTHY,
            kinds::PROVISIONED => reasons::PROVISIONED,
            kinds::REBOOT_PENDING => reasons::REBOOT_PENDING,
            kinds::HEALTHY => reasons::HEALTHY,
            kinds::SYNCED => reasons::SYNCED,
            kinds::SUSPENDED => reasons::SUSPENDED,
            other => panic!("condition {other} has no list of reasons"),
        };
        let check = |st: &SpecStatus| {
            for c in &st.conditions {
                assert!(
                    listed(c.kind).contains(&c.reason),
                    "{} written with {}, which its list in reasons does not name",
                    c.kind,
                    c.reason
                );
            }
        };
        for rec in &records {
            for verdict in &verdicts {
                for outcome in &outcomes {
                    let plan = FromPlan {
                        verdict: Some(verdict),
                        duplicate: None,
                        action: None,
                        image_now: None,
                        ..Default::default()
                    };
                    check(&spec_status(
                        &spec,
                        rec.as_ref(),
                        None,
                        plan,
                        outcome.as_ref(),
                        None,
                    ));
                }
            }
            check(&invalid_status(
                "web-01",
                rec.as_ref(),
                &["bad".into()],
                None,
            ));
        }
    }

    #[test]
    fn reconciling_names_the_step_still_planned() {
        let spec = crate::spec::test_spec("");
        let rec = SpecRecord {
            vm: VmState::Exists {
                vmid: 100,
                node: "pve1".into(),
            },
            ..Default::default()
        };
        let converge = |why: &[&str]| Action::Converge {
            spec: "web-01".into(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid: 100,
            why: why.iter().map(|w| w.to_string()).collect(),
        };
        let adopt = Action::Adopt {
            spec: "web-01".into(),
            site: "lab".into(),
            vmid: 100,
        };
        let cases = [
            (converge(&["spec changed", "start"]), Reason::PowerChange),
            (converge(&["reboot"]), Reason::PowerChange),
            (converge(&["disk"]), Reason::Resizing),
            (converge(&["cpu", "memory"]), Reason::Configuring),
            (adopt, Reason::Adopting),
        ];
        for (action, want) in cases {
            let plan = FromPlan {
                verdict: Some(&Verdict::Acting),
                duplicate: None,
                action: Some(&action),
                image_now: None,
                ..Default::default()
            };
            let st = spec_status(&spec, Some(&rec), None, plan, None, None);
            let reconciling = st
                .conditions
                .iter()
                .find(|c| c.kind == kinds::RECONCILING)
                .unwrap();
            assert_eq!(reconciling.reason, want, "{action:?}");
            let ready = st
                .conditions
                .iter()
                .find(|c| c.kind == kinds::READY)
                .unwrap();
            assert_eq!(ready.reason, Reason::Updating);
        }
    }

    /// A container's spec names its guest a container in the conditions' messages (the step,
    /// `Provisioned`, `RebootPending`, a verdict for a person, a create to come); a VM's spec
    /// keeps saying VM.
    fn by_hand() -> crate::store::Suspension {
        crate::store::Suspension {
            by: "alice (uid 1000)".into(),
            reason: Some("restoring a backup by hand".into()),
            at_ms: 0,
            from_git: false,
        }
    }

    /// A spec held through the spec it is renamed from says so, and names the spec whose
    /// resume (or whose return as Full) lets the rename proceed, never itself.
    #[test]
    fn a_spec_held_through_the_spec_it_is_renamed_from_names_that_spec() {
        let spec = crate::spec::test_spec("");
        let condition = |verdict: &Verdict, of: &str| {
            let plan = FromPlan {
                verdict: Some(verdict),
                duplicate: None,
                action: None,
                image_now: None,
                ..Default::default()
            };
            let st = spec_status(&spec, None, None, plan, None, None);
            let c = st.conditions.iter().find(|c| c.kind == of).unwrap();
            (c.status, c.reason, c.message.clone())
        };
        let suspended = Verdict::Suspended {
            vmid: Some(100),
            drift: Vec::new(),
            by: Box::new(by_hand()),
            renamed_from: Some("app".into()),
        };
        let (status, reason, message) = condition(&suspended, kinds::SUSPENDED);
        assert_eq!((status, reason), (S::True, Reason::Suspended));
        assert!(
            message.contains("through spec app")
                && message.contains("restoring a backup by hand")
                && message.contains("`proxsync resume app`")
                && !message.contains(&format!("resume {}", spec.name)),
            "{message}"
        );
        let observed = Verdict::Observed {
            vmid: Some(100),
            drift: Vec::new(),
            renamed_from: Some("app".into()),
        };
        for of in [kinds::READY, kinds::RECONCILING] {
            let (status, reason, message) = condition(&observed, of);
            assert_eq!((status, reason), (S::False, Reason::Observing), "{of}");
            assert!(
                message.contains("spec app") && message.contains("VM 100 is not re-labelled"),
                "{of}: {message}"
            );
        }
    }

    #[test]
    fn a_containers_conditions_name_it_a_container() {
        let made = SpecRecord {
            vm: VmState::Exists {
                vmid: 100,
                node: "pve1".into(),
            },
            provisioned: true,
            reboot_pending: vec!["memory".into()],
            ..Default::default()
        };
        let converge = Action::Converge {
            spec: "web-01".into(),
            site: "lab".into(),
            node: "pve1".into(),
            vmid: 100,
            why: vec!["cpu".into()],
        };
        let moved = Verdict::SiteMoved {
            from: "other".into(),
            vmid: 100,
        };
        let message = |kind: GuestKind,
                       rec: Option<&SpecRecord>,
                       verdict: &Verdict,
                       action: Option<&Action>,
                       of: &str| {
            let spec = match kind {
                GuestKind::Qemu => crate::spec::test_spec(""),
                GuestKind::Lxc => crate::spec::as_test_container(crate::spec::test_spec("")),
            };
            let plan = FromPlan {
                verdict: Some(verdict),
                duplicate: None,
                action,
                image_now: None,
                ..Default::default()
            };
            let st = spec_status(&spec, rec, None, plan, None, None);
            let c = st.conditions.iter().find(|c| c.kind == of).unwrap();
            c.message.clone()
        };
        let kinds_ = [
            (GuestKind::Qemu, "VM 100", "VM"),
            (GuestKind::Lxc, "container 100", "container"),
        ];
        for (kind, named, noun) in kinds_ {
            let step = message(
                kind,
                Some(&made),
                &Verdict::Acting,
                Some(&converge),
                kinds::RECONCILING,
            );
            assert_eq!(step, format!("{named} will be updated: cpu"));
            let prov = message(
                kind,
                Some(&made),
                &Verdict::Acting,
                None,
                kinds::PROVISIONED,
            );
            assert_eq!(prov, format!("{named} (created)"));
            let pending = message(
                kind,
                Some(&made),
                &Verdict::Acting,
                None,
                kinds::REBOOT_PENDING,
            );
            assert_eq!(
                pending,
                format!(
                    "memory take effect at the next start of the {noun} (proxsync does not reboot it)"
                )
            );
            let ready = message(kind, Some(&made), &moved, None, kinds::READY);
            assert!(
                ready.starts_with(&format!("{named} of this spec is on site other")),
                "{ready}"
            );
            let ready = message(kind, None, &Verdict::Acting, None, kinds::READY);
            assert_eq!(ready, format!("the {noun} will be created"));
        }
    }
}
