//! Notifications (`[[notify]]`): the transitions of each cycle, sent to webhooks, Slack and
//! the commit statuses of Gitea/Forgejo, GitHub and GitLab.
//!
//! After each cycle the daemon calls [`Notifier::after_cycle`]: the [`Tracker`] turns what the
//! cycle showed into events (only changes: a spec becomes Stalled or Ready, a delete, an
//! orphan found, a valve refusal, a site lost or back, the applied commit's state), and the
//! batch is pushed onto every target's bounded queue. Each target's own task sends (see
//! `sender`): the reconcile loop never waits for a target. A restart starts from what the
//! status files say, so it repeats nothing that did not change.
//!
//! Events name specs, conditions, reasons and messages, which the status module already
//! keeps free of user-data and secrets; the payloads add nothing else.

use std::collections::{BTreeMap, HashMap};

use crate::config::Config;
use crate::engine::CycleReport;
use crate::execute::Outcome;
use crate::plan::Action;
use crate::spec::SpecSet;
use crate::status::{ConditionStatus, LastStatus, StatusDir, kinds};

mod events;
mod payload;
mod sender;

pub use events::{
    Baseline, CommitState, CycleFacts, Event, OrphanFacts, RemovalFacts, SiteFacts, SpecFacts,
    SpecMemory, StalledSpec, Tracker,
};
pub use payload::{Message, SIGNATURE_HEADER, signature};
pub use sender::{QUEUE_CAPACITY, Target, TargetHandle, TargetStats, coalesce};

/// A target could not be set up (a secret unreadable, a CA file unusable).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotifyError(pub String);

/// The daemon's notifier: what the last cycle showed, and the running targets.
pub struct Notifier {
    tracker: Tracker,
    targets: Vec<TargetHandle>,
}

impl Notifier {
    /// Reads every target's secrets and builds its client, without starting anything (a
    /// reload checks the new config with it).
    pub(crate) fn check(config: &Config) -> Result<Vec<Target>, NotifyError> {
        config
            .notify
            .iter()
            .map(|n| Target::build(n, &config.install_id).map_err(NotifyError))
            .collect()
    }

    /// Starts the targets of `config` (`None` when there are none), remembering what the
    /// status files say as what was last told. Call inside the runtime.
    pub fn start(config: &Config) -> Result<Option<Notifier>, NotifyError> {
        let targets = Notifier::check(config)?;
        if targets.is_empty() {
            return Ok(None);
        }
        let tracker = Tracker::from_baseline(baseline(config));
        Ok(Some(Notifier {
            tracker,
            targets: targets.into_iter().map(TargetHandle::spawn).collect(),
        }))
    }

    /// After a reload: the targets of the new config, keeping what was last told. The old
    /// targets' queues are dropped with them.
    pub(crate) fn reload(
        old: Option<Notifier>,
        config: &Config,
    ) -> Result<Option<Notifier>, NotifyError> {
        let targets = Notifier::check(config)?;
        if targets.is_empty() {
            return Ok(None);
        }
        let tracker = match old {
            Some(n) => n.tracker.clone(),
            None => Tracker::from_baseline(baseline(config)),
        };
        Ok(Some(Notifier {
            tracker,
            targets: targets.into_iter().map(TargetHandle::spawn).collect(),
        }))
    }

    /// Hands a cycle's transitions to the targets; never waits for one.
    pub(crate) fn after_cycle(
        &mut self,
        commit: &str,
        specs: &SpecSet,
        report: &CycleReport,
        statuses: &HashMap<compact_str::CompactString, LastStatus>,
    ) {
        let with_hashes = self.tracker.needs_hashes(commit);
        let facts = cycle_facts(commit, specs, report, statuses, with_hashes);
        let events = self.tracker.observe(&facts);
        self.send(&events);
    }

    /// A commit refused before anything was applied (e.g. an unsigned commit under
    /// `[source] verify`): told at once, and a forge marks the commit as an error.
    pub fn commit_refused(&self, commit: &str, reason: &str) {
        self.send(&[Event::CommitRefused {
            commit: commit.to_string(),
            reason: reason.to_string(),
        }]);
    }

    /// The commit applied rewinds the branch (it does not descend from `from`): told once, when
    /// the daemon first applies it.
    pub(crate) fn commit_rewound(&self, commit: &str, from: &str) {
        self.send(&[Event::CommitRewound {
            commit: commit.to_string(),
            from: from.to_string(),
        }]);
    }

    /// Pushes events onto every target's queue.
    pub fn send(&self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        tracing::debug!(events = events.len(), "notifications queued");
        for t in &self.targets {
            t.push(events);
        }
    }

    /// Every target's counts and last error (for the metrics).
    pub fn stats(&self) -> Vec<TargetStats> {
        self.targets.iter().map(TargetHandle::stats).collect()
    }

    /// The targets whose last message failed, for `_summary.yaml`.
    pub fn failing(&self) -> Vec<crate::status::NotifyFailure> {
        self.stats()
            .into_iter()
            .filter_map(|s| {
                Some(crate::status::NotifyFailure {
                    since: s.failing_since?,
                    target: s.name,
                    kind: s.kind.to_string(),
                    failures: s.failures,
                    last_error: s.last_error.unwrap_or_default(),
                })
            })
            .collect()
    }
}

/// What a cycle showed, from its report and the statuses the engine gave the specs.
fn cycle_facts<'a>(
    commit: &'a str,
    specs: &'a SpecSet,
    report: &'a CycleReport,
    statuses: &'a HashMap<compact_str::CompactString, LastStatus>,
    with_hashes: bool,
) -> CycleFacts<'a> {
    let invalid = specs.invalid_names();
    let spec_facts = spec_facts(specs, &invalid, statuses);
    let pending_removals = if statuses.len() > spec_facts.len() {
        statuses
            .keys()
            .map(compact_str::CompactString::as_str)
            .filter(|n| !spec_facts.contains_key(n))
            .collect()
    } else {
        Default::default()
    };
    let spec_hashes = with_hashes.then(|| {
        specs
            .specs
            .iter()
            .map(|s| (s.name.to_string(), crate::spec::spec_hash(s)))
            .chain(
                invalid
                    .iter()
                    .map(|n| (n.to_string(), "invalid".to_string())),
            )
            .collect()
    });
    let mut facts = CycleFacts {
        commit,
        specs: spec_facts,
        spec_hashes,
        pending_removals,
        refused: report
            .plan
            .refused
            .iter()
            .map(ToString::to_string)
            .collect(),
        orphans: orphan_facts(report),
        sites: site_facts(report),
        ..Default::default()
    };
    // The guest is gone once removed: its kind is what the cycle saw before.
    let kind = |site: &String, vmid: u32| {
        (report.guest_kinds.get(&(site.clone(), vmid)).copied()).unwrap_or_default()
    };
    for r in report
        .results
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Done))
    {
        match &r.action {
            Action::Remove {
                spec,
                site,
                vmid,
                release,
                ..
            } => facts.removed.push(RemovalFacts {
                spec: spec.clone(),
                site: site.clone(),
                vmid: *vmid,
                kind: kind(site, *vmid),
                released: *release,
            }),
            Action::DeleteOrphan { site, vmid, .. } => {
                let kind = kind(site, *vmid);
                facts.orphans_deleted.push((site.clone(), *vmid, kind));
            }
            _ => {}
        }
    }
    facts
}

/// Ready and Stalled of every spec of the commit (valid or not) that has a status.
fn spec_facts<'a>(
    specs: &'a SpecSet,
    invalid: &std::collections::BTreeSet<&'a str>,
    statuses: &'a HashMap<compact_str::CompactString, LastStatus>,
) -> BTreeMap<&'a str, SpecFacts<'a>> {
    let facts_of = |st: &'a LastStatus| SpecFacts {
        kind: st.kind,
        ready: st.ready,
        stalled: st.stalled(),
        drifted: st.drifted(),
        suspended: st.suspended(),
        unhealthy: st.unhealthy(),
    };
    specs
        .specs
        .iter()
        .map(|s| s.name.as_str())
        .chain(invalid.iter().copied())
        .filter_map(|n| Some((n, facts_of(statuses.get(n)?))))
        .collect()
}

/// The orphans as the cycle's last plan saw them.
fn orphan_facts(report: &CycleReport) -> Vec<OrphanFacts> {
    let last_plan = report.after.as_ref().unwrap_or(&report.plan);
    last_plan
        .orphans
        .iter()
        .map(|o| OrphanFacts {
            site: o.site.clone(),
            vmid: o.vmid,
            kind: o.kind,
            name: o.name.clone(),
            duplicate_of: o.duplicate_of.clone(),
        })
        .collect()
}

fn site_facts(report: &CycleReport) -> Vec<SiteFacts> {
    report
        .site_health
        .iter()
        .map(|s| SiteFacts {
            name: s.name.clone(),
            error: (!s.reachable).then(|| s.error.clone().unwrap_or_default()),
        })
        .collect()
}

/// What the status files say of the last run (nothing when they cannot be read).
fn baseline(config: &Config) -> Baseline {
    let mut b = Baseline::default();
    let Ok(dir) = StatusDir::open(&config.status_dir) else {
        return b;
    };
    for name in dir.spec_names().unwrap_or_default() {
        if let Ok(Some(f)) = dir.read_spec(&name) {
            let is_true = |kind: &str| {
                f.condition(kind)
                    .filter(|c| c.status == ConditionStatus::True)
            };
            b.specs.insert(
                name,
                SpecMemory {
                    ready: is_true(kinds::READY).is_some(),
                    stalled_reason: is_true(kinds::STALLED).map(|c| c.reason.clone()),
                    drifted: f
                        .condition(kinds::SYNCED)
                        .filter(|c| c.status == ConditionStatus::False)
                        .map(|c| c.message.clone()),
                    suspended: is_true(kinds::SUSPENDED).is_some(),
                    unhealthy: f
                        .condition(kinds::HEALTHY)
                        .is_some_and(|c| c.status == ConditionStatus::False),
                },
            );
        }
    }
    if let Ok(Some(s)) = dir.read_summary() {
        b.sites = s
            .sites
            .iter()
            .map(|x| (x.name.clone(), x.reachable))
            .collect();
        b.refused = s.refused;
        b.commit = s.commit;
    }
    if let Ok(Some(o)) = dir.read_orphans() {
        b.orphans = o
            .orphans
            .iter()
            .map(|x| (x.site.clone(), x.vm_id))
            .collect();
    }
    b
}

/// Cuts `s` to at most `max` characters, ending with `…` when cut.
pub(crate) fn clip_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execute::ActionResult;
    use crate::guest::GuestKind;
    use crate::plan::{Orphan, OrphanDisposition, Plan};

    /// The facts of a cycle that deleted a removed spec's container and an orphan container,
    /// and still lists another: each names the container, from what the cycle saw before the
    /// guests were gone (`guest_kinds`) and from the plan's orphans.
    #[test]
    fn the_facts_name_each_guests_kind_from_the_cycle() {
        let done = |action| ActionResult {
            action,
            outcome: Outcome::Done,
        };
        let orphan = Orphan {
            site: "lab".into(),
            vmid: 130,
            kind: GuestKind::Lxc,
            node: "pve1".into(),
            name: None,
            power: "running".into(),
            first_seen_ms: 0,
            disposition: OrphanDisposition::Reported,
            duplicate_of: None,
        };
        let report = CycleReport {
            plan: Plan {
                orphans: vec![orphan],
                ..Default::default()
            },
            results: vec![
                done(Action::Remove {
                    spec: "dns".into(),
                    site: "lab".into(),
                    node: "pve1".into(),
                    vmid: 101,
                    release: false,
                }),
                done(Action::Remove {
                    spec: "web".into(),
                    site: "lab".into(),
                    node: "pve1".into(),
                    vmid: 102,
                    release: true,
                }),
                done(Action::DeleteOrphan {
                    site: "lab".into(),
                    node: "pve1".into(),
                    vmid: 120,
                }),
            ],
            guest_kinds: [
                (("lab".to_string(), 101), GuestKind::Lxc),
                (("lab".to_string(), 120), GuestKind::Lxc),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let (specs, statuses) = (SpecSet::default(), HashMap::new());
        let facts = cycle_facts("c", &specs, &report, &statuses, false);
        let removed: Vec<(&str, GuestKind)> = (facts.removed.iter())
            .map(|r| (r.spec.as_str(), r.kind))
            .collect();
        // A guest the cycle did not see is taken for a VM, as the executor takes it.
        assert_eq!(removed, [("dns", GuestKind::Lxc), ("web", GuestKind::Qemu)]);
        assert_eq!(
            facts.orphans_deleted,
            [("lab".to_string(), 120, GuestKind::Lxc)]
        );
        assert_eq!(facts.orphans[0].kind, GuestKind::Lxc);
    }
}
