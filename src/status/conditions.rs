//! A spec's status and its conditions (`Ready`, `Reconciling`, `Stalled`, `NodeHealthy`,
//! `Provisioned`, `RebootPending`), built each cycle from its record, the site's view, the plan
//! made after the actions and the outcome of this cycle's action.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    AttemptSummary, BackoffSummary, ConditionInput, ConditionStatus as S, Reason, SpecStatus,
    TaskSummary, kinds,
};
use crate::execute::Outcome;
use crate::guest::GuestKind;
use crate::observe::{ObservedVm, SiteView};
use crate::plan::{Action, Duplicate, Verdict};
use crate::spec::Spec;
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
            action: h.action.clone(),
            outcome: h.outcome.clone(),
            tasks: h.tasks.clone(),
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
}

/// The status of a valid spec, from the plan made after this cycle's actions.
pub(crate) fn spec_status(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    view: Option<&SiteView>,
    plan: FromPlan<'_>,
    outcome: Option<&Outcome>,
    commit: Option<&str>,
) -> SpecStatus {
    let FromPlan {
        verdict,
        duplicate,
        action: planned,
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
        name: spec.name.clone(),
        kind: spec.kind(),
        site: spec.site.clone(),
        node: vm
            .map(|v| v.node.clone())
            .unwrap_or_else(|| spec.node.clone()),
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
        spec_file: Some(spec.file.clone()),
        observed_generation: rec.and_then(|r| r.applied_hash.clone()),
        ..Default::default()
    };
    common(rec, &mut st);
    let mut c = Vec::new();

    // NodeHealthy: the VM's node, or the spec's node before there is a VM.
    let node = st.node.clone();
    c.push(node_healthy(view, &node));
    let kind = spec.kind();
    let mut prov = provisioned(kind, rec, vmid);
    if let (Reason::NotCreated, Some(id)) = (prov.reason, observed) {
        prov.message = format!(
            "{} exists and is observed only: neither made nor adopted",
            kind.named(id)
        );
    }
    c.push(prov);
    c.push(reboot_pending(kind, rec));

    let error = rec.and_then(|r| r.last_error.as_deref());
    let (mut ready, reconciling) =
        ready_and_reconciling(spec, rec, vm, verdict, outcome, error, planned);
    if let Some(d) = duplicate {
        ready = duplicate_vm(kind, d);
    }
    c.push(ready);
    c.push(reconciling);
    match verdict {
        Some(Verdict::Observed { vmid, drift, .. }) => {
            c.push(synced(kind, *vmid, drift, "observe-only"));
        }
        Some(Verdict::Suspended {
            vmid,
            drift,
            by,
            renamed_from,
        }) => {
            c.push(synced(kind, *vmid, drift, "suspended"));
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
        _ => stalled(error),
    });
    st.conditions = c;
    st
}

/// `Synced` of an observe-only spec: whether its VM matches it, each differing field with the
/// spec's value and the VM's.
/// `while`: why nothing is done (`observe-only`, `suspended`).
fn synced(
    kind: GuestKind,
    vmid: Option<u32>,
    drift: &[crate::plan::FieldDrift],
    while_: &str,
) -> ConditionInput {
    match vmid {
        None => ConditionInput::new(
            kinds::SYNCED,
            S::False,
            Reason::Drifted,
            format!(
                "no {} of the spec was found; nothing is created while it is {while_}",
                kind.noun()
            ),
        ),
        Some(id) if drift.is_empty() => ConditionInput::new(
            kinds::SYNCED,
            S::True,
            Reason::InSync,
            matches_listing(kind, id),
        ),
        Some(id) => {
            let fields: Vec<String> = drift.iter().map(ToString::to_string).collect();
            ConditionInput::new(
                kinds::SYNCED,
                S::False,
                Reason::Drifted,
                format!(
                    "{} differs from the spec: {}",
                    kind.named(id),
                    fields.join("; ")
                ),
            )
        }
    }
}

/// The guest matches its spec as far as the cluster listing shows (an observe-only or
/// suspended spec's guest).
fn matches_listing(kind: GuestKind, vmid: u32) -> String {
    format!(
        "{} matches the spec in what the cluster listing shows",
        kind.named(vmid)
    )
}

/// Several guests named in one message: `VMs` for a VM's spec; `guests` for a container's, as
/// the others that claim it may be of either kind.
fn several(kind: GuestKind) -> &'static str {
    match kind {
        GuestKind::Qemu => "VMs",
        GuestKind::Lxc => "guests",
    }
}

/// `Suspended` True: who suspended the spec, since when and why, and how to resume it.
fn suspended(
    spec: &Spec,
    by: &crate::store::Suspension,
    renamed_from: Option<&str>,
) -> ConditionInput {
    if let Some(from) = renamed_from {
        let resume = match by.from_git {
            true => format!(
                "`proxsync resume {from}` resumes it (spec.suspend in git, kept since spec {from} was removed)"
            ),
            false => format!("`proxsync resume {from}` resumes it"),
        };
        return ConditionInput::new(
            kinds::SUSPENDED,
            S::True,
            Reason::Suspended,
            format!(
                "suspended through spec {from}, which this spec is renamed from ({}): its {} is \
                 neither re-labelled nor changed; {resume}",
                by,
                spec.kind().noun()
            ),
        );
    }
    let resume = match (by.from_git, spec.suspend) {
        (true, _) => "remove spec.suspend to resume it".to_string(),
        (false, true) => format!(
            "`proxsync resume {}` and removing spec.suspend resume it",
            spec.name
        ),
        (false, false) => format!("`proxsync resume {}` resumes it", spec.name),
    };
    ConditionInput::new(
        kinds::SUSPENDED,
        S::True,
        Reason::Suspended,
        format!(
            "suspended {}; no action is taken for its {}; {resume}",
            by,
            spec.kind().noun()
        ),
    )
}

/// `Ready` False while other VMs claim the spec: a second VM is never silently ignored.
fn duplicate_vm(kind: GuestKind, d: &Duplicate) -> ConditionInput {
    let extras: Vec<String> = d.extras.iter().map(u32::to_string).collect();
    let (kept, noun, many) = (kind.named(d.kept), kind.noun(), several(kind));
    if let Some(from) = &d.renamed_from {
        return ConditionInput::new(
            kinds::READY,
            S::False,
            Reason::DuplicateVm,
            format!(
                "{kept} is this spec's, and {many} {} on site {} claim it too, among them the \
                 {noun} of spec {from}, which this spec is renamed from ({}): the spec had a \
                 {noun} of its own already. proxsync never deletes spec {from}'s {noun} while the \
                 annotation names it: check them and delete what you do not need by hand, or \
                 remove the annotation (spec {from}'s {noun} is then an orphan of this install)",
                extras.join(", "),
                d.site,
                crate::spec::RENAMED_FROM,
            ),
        );
    }
    ConditionInput::new(
        kinds::READY,
        S::False,
        Reason::DuplicateVm,
        format!(
            "{many} {} and {} on site {} all carry this spec's marker; {kept} is the spec's, the \
             others are listed in _orphans.yaml (deleted when tagged, stopped and past the orphan \
             grace period; otherwise delete them by hand after checking them)",
            d.kept,
            extras.join(", "),
            d.site,
        ),
    )
}

/// `Ready` and `Reconciling`, from the verdict of the plan made after the actions.
// Long because: one arm per verdict of the plan (with the outcome and backoff that refine
// it), each giving the two conditions together so they never disagree.
fn ready_and_reconciling(
    spec: &Spec,
    rec: Option<&SpecRecord>,
    vm: Option<&ObservedVm>,
    verdict: Option<&Verdict>,
    outcome: Option<&Outcome>,
    error: Option<&ErrorRecord>,
    planned: Option<&Action>,
) -> (ConditionInput, ConditionInput) {
    let vmid = rec.and_then(|r| r.vm.made_vmid());
    let (kind, noun) = (spec.kind(), spec.kind().noun());
    match verdict {
        Some(Verdict::UpToDate { vmid }) => up_to_date(spec, vm, *vmid),
        Some(Verdict::BackingOff { until_ms }) => {
            let msg = error
                .map(|e| format!("{}: {}", e.category, e.message))
                .unwrap_or_default();
            (
                ConditionInput::new(kinds::READY, S::False, Reason::Failed, msg.clone()),
                ConditionInput::new(
                    kinds::RECONCILING,
                    S::True,
                    Reason::BackingOff,
                    format!("next attempt at {}", crate::status::rfc3339(at(*until_ms))),
                ),
            )
        }
        Some(Verdict::NodeUnhealthy { node, .. }) => (
            ConditionInput::new(
                kinds::READY,
                S::False,
                Reason::NodeUnhealthy,
                format!("waiting for node {node}"),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NodeUnhealthy,
                format!("waiting for node {node}"),
            ),
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
                "nothing is done on the site until a person settles its cluster",
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
                "waiting for the site",
            ),
        ),
        Some(Verdict::ListingIncomplete { why }) => (
            ConditionInput::new(kinds::READY, S::Unknown, Reason::NotReady, why.clone()),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NotReady,
                "waiting for a listing of the site that reads whole",
            ),
        ),
        Some(Verdict::Unknown { vmid }) => (
            ConditionInput::new(
                kinds::READY,
                S::Unknown,
                Reason::NotReady,
                format!("{} is listed with an unknown state", kind.named(*vmid)),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NotReady,
                format!("waiting for the {noun}'s state"),
            ),
        ),
        Some(Verdict::BeingMade { vmid }) => (
            ConditionInput::new(
                kinds::READY,
                S::Unknown,
                Reason::NotReady,
                format!(
                    "{} is being made by a create or clone of this install's token that no \
                     record names (the state database was lost while it ran): it may be this \
                     spec's {noun}, judged by its marker once the task ends; nothing is created \
                     meanwhile",
                    kind.named(*vmid)
                ),
            ),
            ConditionInput::new(
                kinds::RECONCILING,
                S::True,
                Reason::NotReady,
                format!("waiting for the task making {}", kind.named(*vmid)),
            ),
        ),
        Some(Verdict::HeldByInstall { install, vmid }) => {
            let msg = format!(
                "{} carries this spec's marker for install {install} and that install's \
                 ownership tag: the spec moved here from install {install} ([source] selector), \
                 which hands the {noun} over at its next cycle (its tag removed); this install \
                 then adopts it. Nothing is created meanwhile. If install {install} is unrelated \
                 and only uses the same spec and {noun} name, rename one of them",
                kind.named(*vmid)
            );
            (
                ConditionInput::new(kinds::READY, S::False, Reason::HeldByInstall, msg),
                ConditionInput::new(
                    kinds::RECONCILING,
                    S::True,
                    Reason::HeldByInstall,
                    format!(
                        "waiting for install {install} to hand {} over",
                        kind.named(*vmid)
                    ),
                ),
            )
        }
        Some(
            v @ (Verdict::RenameSuspected { .. }
            | Verdict::RenameUnproven { .. }
            | Verdict::SiteMoved { .. }
            | Verdict::KindChanged { .. }
            | Verdict::UnverifiedClaim { .. }
            | Verdict::Unmarked { .. }
            | Verdict::AdoptRefused { .. }
            | Verdict::AdoptionsHeld { .. }),
        ) => {
            let (reason, msg) = for_a_person(spec, v);
            (
                ConditionInput::new(kinds::READY, S::False, reason, msg.clone()),
                ConditionInput::new(kinds::RECONCILING, S::False, reason, msg),
            )
        }
        Some(Verdict::Observed {
            vmid,
            renamed_from: Some(from),
            ..
        }) => {
            let vm = vmid
                .map(|id| kind.named(id))
                .unwrap_or_else(|| format!("its {noun}"));
            let msg = format!(
                "spec {from}, which this spec is renamed from, was observe-only when last seen: \
                 {vm} is not re-labelled, and nothing is done for this spec; put spec {from} \
                 back with managementPolicy: Full for one cycle to let the rename proceed"
            );
            (
                ConditionInput::new(kinds::READY, S::False, Reason::Observing, &msg),
                ConditionInput::new(kinds::RECONCILING, S::False, Reason::Observing, msg),
            )
        }
        Some(Verdict::Observed { vmid, drift, .. }) => {
            let ready = match (vmid, drift.is_empty()) {
                (Some(id), true) => ConditionInput::new(
                    kinds::READY,
                    S::True,
                    Reason::Observed,
                    matches_listing(kind, *id),
                ),
                _ => ConditionInput {
                    kind: kinds::READY,
                    ..synced(kind, *vmid, drift, "observe-only")
                },
            };
            (
                ready,
                ConditionInput::new(
                    kinds::RECONCILING,
                    S::False,
                    Reason::Observing,
                    format!(
                        "managementPolicy: Observe: proxsync never creates, changes, powers or \
                         deletes this {noun}; set Full to apply the spec"
                    ),
                ),
            )
        }
        Some(Verdict::RollingOut {
            set,
            max_unavailable,
        }) => {
            let msg = format!(
                "a change needs a reboot, and set {set} reboots at most {max_unavailable} \
                 member(s) at a time (maxUnavailable): this one waits its turn"
            );
            (
                ConditionInput::new(kinds::READY, S::False, Reason::RollingOut, &msg),
                ConditionInput::new(kinds::RECONCILING, S::True, Reason::RollingOut, msg),
            )
        }
        Some(Verdict::WaitingForDependencies { on, elsewhere }) => {
            let mut msg = format!(
                "waiting for {on} to be Ready (dependsOn): the {noun} is not created, started or \
                 rebooted until then"
            );
            if *elsewhere {
                msg.push_str(&format!(
                    "; {on} is another install's spec (outside [source] selector), which this \
                     install never sees Ready: depend only on this install's specs"
                ));
            }
            (
                ConditionInput::new(kinds::READY, S::False, Reason::WaitingForDependencies, &msg),
                ConditionInput::new(
                    kinds::RECONCILING,
                    S::True,
                    Reason::WaitingForDependencies,
                    msg,
                ),
            )
        }
        Some(Verdict::Suspended {
            vmid, drift, by, ..
        }) => {
            let ready = match (vmid, drift.is_empty()) {
                (Some(id), true) => ConditionInput::new(
                    kinds::READY,
                    S::True,
                    Reason::Suspended,
                    matches_listing(kind, *id),
                ),
                _ => ConditionInput {
                    kind: kinds::READY,
                    reason: Reason::Suspended,
                    ..synced(kind, *vmid, drift, "suspended")
                },
            };
            let words = by.to_string();
            (
                ready,
                ConditionInput::new(
                    kinds::RECONCILING,
                    S::False,
                    Reason::Suspended,
                    format!("suspended {words}: proxsync takes no action for this {noun}"),
                ),
            )
        }
        Some(Verdict::Migrating { from, to, vmid }) => {
            let (mut ready, mut reconciling) = acting(kind, rec, Some(*vmid), outcome, None);
            if ready.reason == Reason::Updating {
                // A container cannot move live: PVE stops it, moves it and starts it again.
                let message = match kind {
                    GuestKind::Qemu => format!("migrating VM {vmid} from node {from} to node {to}"),
                    GuestKind::Lxc => format!(
                        "migrating container {vmid} from node {from} to node {to} with a restart \
                         migration: it is shut down, moved and started again there"
                    ),
                };
                ready =
                    ConditionInput::new(kinds::READY, S::False, Reason::Migrating, message.clone());
                reconciling =
                    ConditionInput::new(kinds::RECONCILING, S::True, Reason::Migrating, message);
            }
            (ready, reconciling)
        }
        Some(Verdict::Acting) | None | Some(Verdict::Invalid) => {
            acting(kind, rec, vmid, outcome, planned)
        }
    }
}

/// The verdicts that hold a spec until a person decides, with the reason and what to do.
fn for_a_person(spec: &Spec, verdict: &Verdict) -> (Reason, String) {
    let (kind, noun) = (spec.kind(), spec.kind().noun());
    match verdict {
        Verdict::RenameSuspected { from, vmid } => (
            Reason::RenameSuspected,
            format!(
                "this commit removes spec {from} and adds this one with the same content: a rename of \
                 metadata.name? Neither is {named} deleted nor a new {noun} created. To keep {named} \
                 under this name, add the annotation {}: {from} to this spec's metadata; to replace \
                 it, change the content or remove the specs in separate commits",
                crate::spec::RENAMED_FROM,
                named = kind.named(*vmid)
            ),
        ),
        Verdict::SiteMoved { from, vmid } => (
            Reason::SiteMoved,
            format!(
                "{named} of this spec is on site {from}, and the spec now names site {}. proxsync \
                 never moves a {noun} between clusters by itself (a create here and a delete there). \
                 Move the spec back to site {from}, or move what you need off {named}, delete it \
                 on {from}, and the {noun} is then created on site {}",
                spec.site,
                spec.site,
                named = kind.named(*vmid)
            ),
        ),
        Verdict::KindChanged { vmid, found } => (
            Reason::KindChanged,
            format!(
                "this spec asks for a {} ({}), and its guest {vmid} is a {}. proxsync never \
                 replaces a guest by one of the other kind by itself (a delete and a create). \
                 Change kind back, or move what you need off {vmid} and delete it ({} destroy \
                 {vmid}): the {} is then created",
                spec.kind().noun(),
                spec.kind().spec_kind(),
                found.noun(),
                found.cli(),
                spec.kind().noun()
            ),
        ),
        Verdict::RenameUnproven { from, vmid, why } => (
            Reason::RenameUnproven,
            format!(
                "this spec is renamed from {from} ({}), whose record names {named}, but {named} \
                 is not shown to be {from}'s: {why}. Neither is it re-labelled nor deleted, and no \
                 {noun} is created for this spec. If {named} is the one to keep, check its \
                 proxsync-id line; otherwise remove the annotation (then {from} is removed as any \
                 removed spec)",
                crate::spec::RENAMED_FROM,
                named = kind.named(*vmid)
            ),
        ),
        Verdict::Unmarked { vmid } => (
            Reason::MarkerMissing,
            format!(
                "{named} carries this install's tag and this spec's {noun} name but no \
                 proxsync-id line (its notes were replaced?), and no record names it: nothing is \
                 created while it may be this spec's {noun}. If it is: proxsync adopt {} --vmid \
                 {vmid} (the line is written back below its notes); otherwise remove the tag \
                 proxsync.<install_id> from it, or delete it",
                spec.name,
                named = kind.named(*vmid)
            ),
        ),
        Verdict::UnverifiedClaim { vmid } => (
            Reason::UnverifiedClaim,
            format!(
                "{} claims this spec but its marker does not verify (copied from another {noun}, \
                 typed by hand, or signed with a lost marker key); nothing is created while it does. \
                 If it is this spec's {noun}: proxsync adopt {} --vmid {vmid}; otherwise delete it or \
                 remove the proxsync-id line from its description",
                kind.named(*vmid),
                spec.name
            ),
        ),
        Verdict::AdoptRefused { vmid, why } => (
            Reason::AdoptRefused,
            format!(
                "this spec consents to take over {} ({}), and it is not taken: {why}",
                kind.named(*vmid),
                crate::spec::ADOPT
            ),
        ),
        Verdict::AdoptionsHeld { count, max } => (
            Reason::AdoptRefused,
            format!(
                "{count} {} would be taken over by consent this cycle, more than [reconcile] \
                 max_adopt_per_cycle = {max}: none is taken. Raise the limit, or commit the \
                 imported specs in smaller parts",
                several(kind)
            ),
        ),
        _ => (Reason::NotReady, String::new()),
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
            "site not observed",
        ),
        Some(v) if v.identity_changed => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::Unknown,
            Reason::SiteIdentityChanged,
            format!(
                "site {} reaches another cluster than the recorded one: its nodes are not judged",
                v.name
            ),
        ),
        Some(v) if !v.reachable() => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::Unknown,
            Reason::SiteUnreachable,
            format!(
                "site {} unreachable: {}",
                v.name,
                v.error.clone().unwrap_or_default()
            ),
        ),
        Some(v) if !v.health.quorate => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::False,
            Reason::NoQuorum,
            "the cluster has no quorum: nothing is created, changed or deleted until it returns",
        ),
        Some(v) if v.health.node_healthy(node) => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::True,
            Reason::NodeOnline,
            format!("node {node} online"),
        ),
        Some(_) => ConditionInput::new(
            kinds::NODE_HEALTHY,
            S::False,
            Reason::NodeOffline,
            format!(
                "node {node} is offline or unknown: nothing is created, changed or deleted there"
            ),
        ),
    }
}

/// `Provisioned`, from the record.
fn provisioned(kind: GuestKind, rec: Option<&SpecRecord>, vmid: Option<u32>) -> ConditionInput {
    if let Some(r) = rec.filter(|r| r.provisioned) {
        let (reason, how) = if r.adopted {
            (Reason::Adopted, "taken over")
        } else {
            (Reason::Created, "created")
        };
        ConditionInput::new(
            kinds::PROVISIONED,
            S::True,
            reason,
            format!("{} ({how})", kind.named(vmid.unwrap_or(0))),
        )
    } else {
        ConditionInput::new(
            kinds::PROVISIONED,
            S::False,
            Reason::NotCreated,
            format!("no {} yet", kind.noun()),
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
            format!(
                "{} take effect at the next start of the {}{} (proxsync does not reboot it)",
                pending.join(", "),
                kind.noun(),
                if pending.iter().any(|k| k == "cloudinit") {
                    "; cloud-init reads its new settings then"
                } else if pending.iter().any(|k| k == "hostname") {
                    "; its guest gets the new hostname (and /etc/hosts) then"
                } else {
                    ""
                }
            ),
        )
    }
}

/// `Ready` and `Reconciling` of a VM that matches its spec.
fn up_to_date(spec: &Spec, vm: Option<&ObservedVm>, vmid: u32) -> (ConditionInput, ConditionInput) {
    let mut message = format!("{} {vmid} matches the spec", spec.kind().noun());
    if spec.adopt.as_ref().is_some_and(|c| c.vmid == vmid) {
        message.push_str(&format!(
            "; the {} annotations did their work (the {} is this spec's): remove them",
            crate::spec::ADOPT,
            spec.kind().noun()
        ));
    }
    if let Some(vm) = vm
        && vm.disk_bytes.is_some_and(|d| d > spec.root_disk_bytes())
    {
        message.push_str(&format!(
            "; its disk ({} bytes) is larger than the spec's {} bytes: disks only grow, not applied",
            vm.disk_bytes.unwrap_or(0),
            spec.root_disk_bytes()
        ));
    }
    (
        ConditionInput::new(kinds::READY, S::True, Reason::Available, message),
        ConditionInput::new(kinds::RECONCILING, S::False, Reason::UpToDate, ""),
    )
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
    let noun = kind.noun();
    let (reason, message) = match (outcome, rec.map(|r| &r.vm)) {
        (Some(Outcome::StillRunning { upid }), _) => {
            (Reason::WaitingForTask, format!("task {upid} still running"))
        }
        (Some(Outcome::Waiting(wait)), _) => (Reason::WaitingForLock, wait.to_string()),
        (Some(Outcome::Failed(e)), _) => (Reason::Failed, format!("{}: {}", e.category, e.message)),
        (_, Some(VmState::Creating { .. })) => (Reason::Creating, format!("creating the {noun}")),
        (_, Some(VmState::Deleting { .. })) => (Reason::Deleting, format!("deleting the {noun}")),
        _ if vmid.is_none() => (Reason::Creating, format!("the {noun} will be created")),
        _ => (Reason::Updating, format!("the {noun} will be updated")),
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
    match action {
        Action::Adopt { vmid, .. } => Some((
            Reason::Adopting,
            format!(
                "taking over {}, which carries this spec's marker",
                kind.named(*vmid)
            ),
        )),
        Action::AdoptByConsent { vmid, .. } => Some((
            Reason::Adopting,
            format!(
                "taking over {}, as the spec consents ({})",
                kind.named(*vmid),
                crate::spec::ADOPT
            ),
        )),
        Action::Converge { vmid, why, .. } => {
            let has = |w: &str| why.iter().any(|x| x == w);
            let step = if has("start") || has("shutdown") || has("reboot") {
                Reason::PowerChange
            } else if has("disk") {
                Reason::Resizing
            } else {
                Reason::Configuring
            };
            Some((
                step,
                format!("{} will be updated: {}", kind.named(*vmid), why.join(", ")),
            ))
        }
        _ => None,
    }
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
    let message = format!(
        "the spec's encrypted userData does not open; its {} (if any) is left exactly as it is \
         until it does: {}",
        recorded_noun(rec),
        messages.join("; ")
    );
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
        site: rec.map(|r| r.site.clone()).unwrap_or_default(),
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
    let message = format!(
        "the spec is invalid; its {} (if any) is left exactly as it is until the spec is fixed: {}",
        recorded_noun(rec),
        messages.join("; ")
    );
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
pub(crate) fn removed_status(name: &str, rec: &SpecRecord, view: Option<&SiteView>) -> SpecStatus {
    let vmid = rec.vm.made_vmid();
    let vm = view.and_then(|v| vmid.and_then(|id| v.vms.get(&id)));
    let mut st = SpecStatus {
        name: name.to_string(),
        kind: rec.kind,
        site: rec.site.clone(),
        node: rec.vm.node().map(str::to_string).unwrap_or_default(),
        vm_id: vmid,
        state: vm.map_or("unknown", |vm| vm.power.as_str()).into(),
        ..Default::default()
    };
    common(Some(rec), &mut st);
    let error = rec.last_error.as_deref();
    let message = format!(
        "the spec was removed; its {} is not deleted: {}",
        rec.kind.noun(),
        error.map(|e| e.message.as_str()).unwrap_or_default()
    );
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
                why: crate::gate::rename::Refused::NotShown {
                    kind: GuestKind::Qemu,
                    vmid: 100,
                    why: crate::gate::rename::Unshown::OtherUid {
                        carries: "u2".into(),
                        from: "old".into(),
                        recorded: "u1".into(),
                    },
                },
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
