//! How many specs of a cycle are in each state, and the cycle's report.

use super::*;

/// How many specs of a cycle are in each state (for the summary and the cycle report).
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) ready: usize,
    pub(super) stalled: usize,
    pub(super) backing_off: usize,
    pub(super) invalid: usize,
    conditions: BTreeMap<ConditionKey, usize>,
}

impl Counts {
    /// Counts a valid spec's status.
    pub(super) fn add(&mut self, st: &SpecStatus) {
        if has_condition(st, kinds::READY, S::True) {
            self.ready += 1;
        }
        if has_condition(st, kinds::STALLED, S::True) {
            self.stalled += 1;
        }
        if st.backoff.is_some() {
            self.backing_off += 1;
        }
    }

    /// Counts each condition of a spec's status (valid or not) by type, status and reason.
    pub(super) fn tally(&mut self, st: &SpecStatus) {
        for c in &st.conditions {
            *self
                .conditions
                .entry((c.kind, c.status.as_str(), c.reason))
                .or_default() += 1;
        }
    }
}

/// What a cycle reports, besides its plans and results (filled in by `reconcile`).
pub(super) fn cycle_report(
    counts: &Counts,
    specs: &SpecSet,
    views: &BTreeMap<String, SiteView>,
    records: &BTreeMap<String, SpecRecord>,
    cycle_ms: u64,
    now_ms: u64,
) -> CycleReport {
    CycleReport {
        plan: Plan::default(),
        results: Vec::new(),
        after: None,
        ready: counts.ready,
        specs: specs.specs.len() + counts.invalid,
        stalled: counts.stalled,
        backing_off: counts.backing_off,
        sites: views.len(),
        sites_healthy: views
            .values()
            .filter(|v| v.reachable() && v.health.quorate)
            .count(),
        cycle_ms,
        // Only deadlines still ahead: one already past belongs to a spec that got no action
        // this cycle (node offline, site down, spec invalid), and waking for it every second
        // would spin.
        next_attempt_ms: records
            .values()
            .filter_map(|r| r.next_attempt_ms)
            .filter(|at| *at > now_ms)
            .min(),
        conditions: counts.conditions.clone(),
        site_health: views.values().map(site_summary).collect(),
        source_refusal: None,
        unchanged: false,
        scope: None,
        guest_kinds: Default::default(),
    }
}
