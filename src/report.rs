//! What a cycle and the notification targets report, for the status summary, the metrics and
//! the notifications: plain data, below the engine, the metrics and notify, which all read it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use crate::execute::ActionResult;
use crate::plan::Plan;

/// What one cycle did.
#[derive(Debug, Clone, Default)]
pub struct CycleReport {
    /// The plan that was executed.
    pub plan: Plan,
    pub results: Vec<ActionResult>,
    /// The plan made after the actions, when there were any (else `plan` says what is true).
    pub after: Option<Plan>,
    pub ready: usize,
    pub specs: usize,
    pub stalled: usize,
    pub backing_off: usize,
    pub sites: usize,
    pub sites_healthy: usize,
    pub cycle_ms: u64,
    /// The earliest backoff deadline of any spec (unix ms), to wake up for it.
    pub next_attempt_ms: Option<u64>,
    /// How many specs (invalid ones included) carry each (condition, status, reason).
    pub conditions: BTreeMap<ConditionKey, usize>,
    /// Each site as observed at the end of the cycle (for notifications and metrics).
    pub site_health: Vec<crate::status::SiteSummary>,
    /// The branch tip not applied this cycle (`[source] verify`): its commit and why; the
    /// specs came from the last verified commit.
    pub source_refusal: Option<crate::source::verify::Refusal>,
    /// Nothing this cycle reads had changed since the last cycle, which acted on nothing, and
    /// no deadline of its plan had come: its plan, statuses and counts are this cycle's
    /// (nothing was planned and no status built; only the summary was written).
    pub unchanged: bool,
    /// The sites a cycle after a push looked at and acted on, when it looked at only those
    /// (the others as the last cycle saw them); `None`: every site was observed.
    pub scope: Option<BTreeSet<String>>,
    /// The kind of each guest this cycle's actions named, by (site, VMID), as the views and
    /// records the actions were planned from showed it: a guest deleted is gone from the look
    /// after, and its spec's record with it. For the words about it (`container 101`).
    pub guest_kinds: GuestKinds,
}

/// Guests' kinds by (site, VMID).
pub type GuestKinds = BTreeMap<(String, u32), crate::guest::GuestKind>;

/// A condition's type, status (`True`, `False`, `Unknown`) and reason: bounded by the
/// constants of `status` and its [`Reason`](crate::status::Reason)s.
pub type ConditionKey = (&'static str, &'static str, crate::status::Reason);

impl CycleReport {
    /// True when every valid spec is Ready and there is no invalid spec.
    pub fn all_ready(&self) -> bool {
        self.ready == self.specs
    }
}

/// How one target is doing, for `_summary.yaml` and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetStats {
    pub name: String,
    /// `webhook`, `slack`, `gitea`, `github` or `gitlab`.
    pub kind: &'static str,
    /// Messages delivered (a forge's message is one status per commit).
    pub sent: u64,
    /// Messages given up: a permanent error, or every attempt failed.
    pub failures: u64,
    /// Batches dropped because the queue was full.
    pub dropped: u64,
    /// The last failure's error (never a secret: URLs are left out).
    pub last_error: Option<String>,
    /// Since when the target fails (the first failure after a success); `None` when the last
    /// message was delivered.
    pub failing_since: Option<SystemTime>,
}
