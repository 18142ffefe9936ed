//! What a spec's status condition says ([`ConditionText`]): the cases `status` decides a
//! condition's type, status and reason for, with the values its message names. `words` says
//! them, so the status files speak of verdicts, records and sites in the words `plan`,
//! notifications and the journal use.

use super::{Duplicate, FieldDrift, Verdict};
use crate::category::Category;
use crate::guest::GuestKind;
use crate::model::{ErrorRecord, ObservedVm, Suspension};
use crate::spec::Spec;

/// Why proxsync keeps its hands off a spec's guest, as a condition names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandsOff {
    /// `managementPolicy: Observe`.
    ObserveOnly,
    /// `proxsync suspend` or `spec.suspend`.
    Suspended,
}

/// The message of one status condition.
#[derive(Debug, Clone, Copy)]
pub enum ConditionText<'a> {
    /// `Healthy` of a guest that was checked: the verdict, the checks and their last answers.
    Health {
        /// The guest's kind.
        kind: GuestKind,
        /// What the checks found.
        guest: &'a crate::model::health::GuestHealth,
        /// Their judgement now.
        verdict: crate::model::health::Verdict,
        /// The spec's `health`.
        health: &'a crate::spec::health::Health,
    },
    /// `Healthy` Unknown: the guest is not checked (not made yet, not running, or not yet).
    HealthNotChecked {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest is made.
        made: bool,
        /// It runs (and is checked at the next round).
        running: bool,
    },
    /// `Ready` False because the guest is not healthy (`Healthy`'s message says why).
    NotHealthy {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The judgement; `None`: not checked yet.
        verdict: Option<crate::model::health::Verdict>,
    },
    /// No guest of a hands-off spec was found (`Synced` False).
    NoGuestWhile {
        /// The spec's kind.
        kind: GuestKind,
        /// Why nothing is created.
        held: HandsOff,
    },
    /// A hands-off spec's guest differs from the spec, field by field.
    Differs {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// Each differing field, the spec's value and the guest's.
        drift: &'a [FieldDrift],
    },
    /// A hands-off spec's guest matches it as far as the listing shows.
    MatchesListing {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// `Suspended` True through the spec this one is renamed from.
    SuspendedThrough {
        /// The spec's kind.
        kind: GuestKind,
        /// The spec it is renamed from.
        from: &'a str,
        /// Who suspended it.
        by: &'a Suspension,
    },
    /// `Suspended` True: who, since when, and how to resume.
    Suspended {
        /// The spec.
        spec: &'a Spec,
        /// Who suspended it.
        by: &'a Suspension,
    },
    /// Other guests claim the spec too (`Ready` False `DuplicateVm`).
    Duplicate {
        /// The spec's kind.
        kind: GuestKind,
        /// The guest kept and the others.
        duplicate: &'a Duplicate,
    },
    /// An action failed: its category and PVE's words.
    Failure {
        /// The error's category.
        category: Category,
        /// What it said.
        message: &'a str,
    },
    /// The next attempt of a spec backing off.
    NextAttempt {
        /// When, in ms since the epoch.
        at_ms: u64,
    },
    /// Waiting for the spec's node to come back.
    WaitingForNode {
        /// The node.
        node: &'a str,
    },
    /// A site that reaches another cluster is left to a person.
    SiteUnsettled,
    /// Waiting for the site to be read.
    WaitingForSite,
    /// Waiting for a listing of the site that reads whole.
    WaitingForWholeListing,
    /// The guest is listed with an unknown state.
    UnknownState {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// Waiting for the guest's state.
    WaitingForState {
        /// The guest's kind.
        kind: GuestKind,
    },
    /// A create or clone of this install's token that no record names is making a guest.
    BeingMade {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest being made.
        vmid: u32,
    },
    /// Waiting for the task making a guest.
    WaitingForTaskMaking {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest being made.
        vmid: u32,
    },
    /// The guest is still held by another install.
    HeldByInstall {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The install that holds it.
        install: &'a str,
    },
    /// Waiting for another install to hand the guest over.
    WaitingForHandOver {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// The install that holds it.
        install: &'a str,
    },
    /// A verdict that holds the spec until a person decides, with what to do.
    ForAPerson {
        /// The spec.
        spec: &'a Spec,
        /// The verdict.
        verdict: &'a Verdict,
    },
    /// The spec this one is renamed from was observe-only when last seen.
    ObservedRename {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest, when known.
        vmid: Option<u32>,
        /// The spec it is renamed from.
        from: &'a str,
    },
    /// `managementPolicy: Observe`: what proxsync never does to the guest.
    ObserveOnly {
        /// The guest's kind.
        kind: GuestKind,
    },
    /// A set's reboot or rebuild waits its turn (`None`: a spec of its own's rebuild).
    RollingOut {
        /// The set.
        set: Option<&'a str>,
        /// Its `maxUnavailable`.
        max_unavailable: u32,
        /// The unhealthy member the roll stopped at.
        stopped_by: Option<&'a str>,
    },
    /// Waiting for the `ProxmoxImage` it is made from.
    WaitingForImage {
        /// The guest's kind.
        kind: GuestKind,
        /// The image.
        image: &'a str,
        /// Why the image is not there yet.
        why: &'a str,
    },
    /// Waiting for the specs it depends on.
    WaitingForDependencies {
        /// The guest's kind.
        kind: GuestKind,
        /// The specs waited for.
        on: &'a str,
        /// Whether one is another install's spec.
        elsewhere: bool,
        /// Its guest runs but has not passed its health checks.
        not_healthy: bool,
    },
    /// Suspended: proxsync takes no action.
    SuspendedNoAction {
        /// The guest's kind.
        kind: GuestKind,
        /// Who suspended it.
        by: &'a Suspension,
    },
    /// The guest moves to another node.
    Migrating {
        /// The guest's kind (a container moves with a restart).
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// Its node now.
        from: &'a str,
        /// The spec's node.
        to: &'a str,
    },
    /// A task outlived the wait.
    TaskRunning {
        /// Its UPID.
        upid: &'a str,
    },
    /// The guest is being created.
    Creating {
        /// The guest's kind.
        kind: GuestKind,
    },
    /// The guest is being deleted.
    Deleting {
        /// The guest's kind.
        kind: GuestKind,
    },
    /// The guest will be created.
    WillCreate {
        /// The guest's kind.
        kind: GuestKind,
    },
    /// The guest will be updated.
    WillUpdate {
        /// The guest's kind.
        kind: GuestKind,
    },
    /// Taking over a guest that carries the spec's marker, or (`by_consent`) that the spec
    /// consents to.
    TakingOver {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// Taken over by the spec's consent rather than its marker.
        by_consent: bool,
    },
    /// The guest will be updated: which of its parts.
    WillUpdateParts {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// What differs (`start`, `disk`, `memory`, ...).
        why: &'a [String],
    },
    /// The site has not been observed yet.
    SiteNotObserved,
    /// The site reaches another cluster than the recorded one.
    OtherCluster {
        /// The site.
        site: &'a str,
    },
    /// The site could not be reached.
    SiteUnreachable {
        /// The site.
        site: &'a str,
        /// Why.
        error: &'a str,
    },
    /// The cluster has no quorum.
    NoQuorum,
    /// The node is online.
    NodeOnline {
        /// The node.
        node: &'a str,
    },
    /// The node is offline or unknown.
    NodeOffline {
        /// The node.
        node: &'a str,
    },
    /// The guest was made or taken over.
    Provisioned {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
        /// Taken over rather than created.
        adopted: bool,
    },
    /// No guest yet.
    NotProvisioned {
        /// The spec's kind.
        kind: GuestKind,
    },
    /// The guest exists and is observed only.
    ObservedOnly {
        /// The guest's kind.
        kind: GuestKind,
        /// The guest.
        vmid: u32,
    },
    /// Changes that take effect at the guest's next start.
    RebootPending {
        /// The guest's kind.
        kind: GuestKind,
        /// The pending fields.
        fields: &'a [String],
    },
    /// The guest matches its spec, with what the spec still says that has done its work.
    UpToDate {
        /// The spec.
        spec: &'a Spec,
        /// The guest as observed.
        vm: Option<&'a ObservedVm>,
        /// The guest.
        vmid: u32,
        /// For a guest made from a `ProxmoxImage`: the file it was made from (`None`: not
        /// recorded) and the one its image names now.
        made: Option<(Option<&'a str>, &'a str)>,
    },
    /// The spec's encrypted value does not open.
    DecryptionFailed {
        /// What the guest is (`guest` when no record says).
        noun: &'static str,
        /// Why, never holding the value.
        messages: &'a [String],
    },
    /// The spec is invalid.
    Invalid {
        /// What the guest is (`guest` when no record says).
        noun: &'static str,
        /// The validation errors.
        messages: &'a [String],
    },
    /// A removed old version of a `ProxmoxTemplate` kept this cycle, and why.
    TemplateKept {
        /// Why.
        why: &'a super::TemplateKept,
    },
    /// A removed spec's guest that is not deleted, and why.
    RemovedKept {
        /// The guest's kind.
        kind: GuestKind,
        /// The last error.
        error: Option<&'a ErrorRecord>,
    },
}
