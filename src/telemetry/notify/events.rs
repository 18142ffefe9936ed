//! What is worth telling: the transitions between one cycle and the last (pure, no I/O).
//!
//! The [`Tracker`] keeps what the last cycle showed (each spec's Ready and Stalled, site
//! reachability, orphans, valve refusals, the applied commit's state) and turns the next
//! cycle's [`CycleFacts`] into [`Event`]s: only changes, never a repeat of a steady state.
//! Every text comes from status conditions, PVE errors or valve refusals, which carry no
//! user-data or secret (the status module's invariant).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::guest::GuestKind;
use crate::status::Reason;

/// One transition. Serialised as the webhook's `events[]` entries (`"type": "spec_stalled"`).
/// An event about one guest names its `kind` (`qemu` or `lxc`, as `plan --json` does).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// A spec became Stalled (or stays Stalled for another reason): a person must act.
    SpecStalled {
        spec: String,
        reason: String,
        message: String,
    },
    /// A spec became Ready (created, or recovered).
    SpecReady { spec: String },
    /// An observe-only spec's VM (`managementPolicy: Observe`) now differs from it, or
    /// differs otherwise: `message` lists each field with the spec's value and the VM's.
    SpecDrifted { spec: String, message: String },
    /// A spec was suspended (`spec.suspend`, `proxsync suspend`): `message` says by whom,
    /// since when and why. No action is taken for its VM until it is resumed.
    SpecSuspended { spec: String, message: String },
    /// A suspended spec was resumed: proxsync acts on its guest, a `kind`, again.
    SpecResumed { spec: String, kind: GuestKind },
    /// A spec's guest (`spec.health`) became unhealthy: it failed its checks `failures`
    /// times in a row, or did not pass within `timeout` of its start. `message` is `Healthy`'s.
    /// proxsync does not restart it; `spec_ready` tells when it is healthy again.
    SpecUnhealthy {
        spec: String,
        kind: GuestKind,
        message: String,
    },
    /// A removed spec's guest was deleted.
    SpecDeleted {
        spec: String,
        site: String,
        vmid: u32,
        kind: GuestKind,
    },
    /// A removed spec's guest was released (`deletionPolicy: Orphan`): it stays, unmanaged.
    SpecReleased {
        spec: String,
        site: String,
        vmid: u32,
        kind: GuestKind,
    },
    /// A guest carrying this install's tag and marker that no spec describes.
    OrphanFound {
        site: String,
        vmid: u32,
        kind: GuestKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        duplicate_of: Option<String>,
    },
    /// A stopped orphan past its grace period was deleted.
    OrphanDeleted {
        site: String,
        vmid: u32,
        kind: GuestKind,
    },
    /// A safety valve refused every delete and release of the cycle.
    DeletesRefused { reasons: Vec<String> },
    /// A site could not be read.
    SiteUnreachable { site: String, error: String },
    /// A site that could not be read is read again.
    SiteReachable { site: String },
    /// The applied commit's state changed: pending while its specs converge, success when
    /// every spec it changed is Ready (and every spec it removed is gone), failure naming
    /// the Stalled ones.
    CommitState {
        commit: String,
        state: CommitState,
        description: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        stalled: Vec<StalledSpec>,
    },
    /// A commit was refused before anything was applied (e.g. its signature did not verify).
    CommitRefused { commit: String, reason: String },
    /// The commit applied does not descend from `from`, the commit applied before it: a rewind
    /// (without `[source] verify`, or accepted by an operator). Its deletes count as one batch.
    CommitRewound { commit: String, from: String },
}

impl Event {
    /// The commit a forge's status is about, with the state to post, for the events the
    /// forges take (commit states and refusals).
    pub(crate) fn commit_status(&self) -> Option<(&str, CommitState, &str)> {
        match self {
            Event::CommitState {
                commit,
                state,
                description,
                ..
            } => Some((commit, *state, description)),
            Event::CommitRefused { commit, reason } => Some((commit, CommitState::Refused, reason)),
            _ => None,
        }
    }
}

/// The state of an applied commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommitState {
    Pending,
    Success,
    Failure,
    /// Not applied at all (`CommitRefused`); forges show it as an error.
    Refused,
}

/// A Stalled spec of a failed commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StalledSpec {
    pub spec: String,
    pub reason: String,
    pub message: String,
}

/// One spec as a cycle left it (borrowed from the status the engine gave it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecFacts<'a> {
    /// What the spec's guest is (an invalid or removed spec's: what its record made).
    pub kind: GuestKind,
    pub ready: bool,
    /// Stalled's reason and message when Stalled is True.
    pub stalled: Option<(Reason, &'a str)>,
    /// Synced's message when an observe-only spec's VM differs from it.
    pub drifted: Option<&'a str>,
    /// Suspended's message while the spec is suspended.
    pub suspended: Option<&'a str>,
    /// Healthy's message while it is False.
    pub unhealthy: Option<&'a str>,
}

/// A site as a cycle saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteFacts {
    pub name: String,
    /// Why it could not be read; `None` when it was read.
    pub error: Option<String>,
}

/// An orphan as a cycle saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanFacts {
    pub site: String,
    pub vmid: u32,
    pub kind: GuestKind,
    pub name: Option<String>,
    pub duplicate_of: Option<String>,
}

/// A removed spec's guest deleted or released this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemovalFacts {
    pub spec: String,
    pub site: String,
    pub vmid: u32,
    /// What the guest was, as the cycle saw it before the removal.
    pub kind: GuestKind,
    /// Released (`deletionPolicy: Orphan`), not deleted.
    pub released: bool,
}

/// What one cycle showed, as the tracker needs it.
#[derive(Debug, Default)]
pub struct CycleFacts<'a> {
    /// The commit applied.
    pub commit: &'a str,
    /// Every spec of the commit (valid and invalid), by name.
    pub specs: BTreeMap<&'a str, SpecFacts<'a>>,
    /// A hash of each spec of the commit, to tell which specs a new commit changed; only
    /// needed when the commit differs from the last one (`Tracker::needs_hashes`).
    pub spec_hashes: Option<BTreeMap<String, String>>,
    /// Removed specs whose VM is not deleted or released yet (they still have a status).
    pub pending_removals: BTreeSet<&'a str>,
    /// Deletes and releases done this cycle.
    pub removed: Vec<RemovalFacts>,
    /// Orphans deleted this cycle: (site, vmid, kind).
    pub orphans_deleted: Vec<(String, u32, GuestKind)>,
    pub orphans: Vec<OrphanFacts>,
    /// The safety valves' refusals this cycle.
    pub refused: Vec<String>,
    pub sites: Vec<SiteFacts>,
}

/// What the last cycle showed of one spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecMemory {
    pub ready: bool,
    /// Text, not a [`Reason`]: read back from status files an earlier run (of any release)
    /// wrote.
    pub stalled_reason: Option<String>,
    /// Synced's message while False.
    pub drifted: Option<String>,
    /// Whether the spec was suspended.
    pub suspended: bool,
    /// Whether its guest was unhealthy (`Healthy` False).
    pub unhealthy: bool,
}

/// The state of the commit being applied.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CommitMemory {
    sha: String,
    /// Names of the specs it added or changed (present in it).
    changed: BTreeSet<String>,
    /// Names of the specs it removed.
    removed: BTreeSet<String>,
    /// Each spec's hash in it.
    hashes: BTreeMap<String, String>,
    /// The state last told, and the Stalled specs with their reasons.
    told: Option<(CommitState, Vec<(String, String)>)>,
}

/// What the last cycle showed; turns the next one into events.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    specs: BTreeMap<String, SpecMemory>,
    /// Sites by name: reachable or not.
    sites: BTreeMap<String, bool>,
    orphans: BTreeSet<(String, u32)>,
    refused: Vec<String>,
    commit: Option<CommitMemory>,
}

/// What the status files say of the last run, to start from after a restart (so a restart
/// repeats nothing that did not change meanwhile).
#[derive(Debug, Default)]
pub struct Baseline {
    pub specs: BTreeMap<String, SpecMemory>,
    pub sites: BTreeMap<String, bool>,
    pub orphans: BTreeSet<(String, u32)>,
    pub refused: Vec<String>,
    /// The commit the last cycle applied.
    pub commit: Option<String>,
}

impl Tracker {
    /// A tracker that takes `baseline` as what was last told.
    pub(crate) fn from_baseline(b: Baseline) -> Tracker {
        Tracker {
            commit: b.commit.map(|sha| CommitMemory {
                sha,
                changed: BTreeSet::new(),
                removed: BTreeSet::new(),
                hashes: BTreeMap::new(),
                told: None,
            }),
            specs: b.specs,
            sites: b.sites,
            orphans: b.orphans,
            refused: b.refused,
        }
    }

    /// True when the next cycle's facts must carry `spec_hashes` (the commit moved, or no
    /// hashes are known yet).
    pub(crate) fn needs_hashes(&self, commit: &str) -> bool {
        self.commit
            .as_ref()
            .is_none_or(|c| c.sha != commit || c.hashes.is_empty())
    }

    /// The events of a cycle, in a stable order; remembers what it showed.
    pub(crate) fn observe(&mut self, facts: &CycleFacts<'_>) -> Vec<Event> {
        let mut events = Vec::new();
        self.site_events(facts, &mut events);
        self.spec_events(facts, &mut events);
        removal_events(facts, &mut events);
        self.orphan_events(facts, &mut events);
        if !facts.refused.is_empty() && facts.refused != self.refused {
            events.push(Event::DeletesRefused {
                reasons: facts.refused.clone(),
            });
        }
        self.refused = facts.refused.clone();
        self.commit_events(facts, &mut events);
        events
    }

    fn site_events(&mut self, facts: &CycleFacts<'_>, events: &mut Vec<Event>) {
        for site in &facts.sites {
            let reachable = site.error.is_none();
            // A site never seen before counts as reachable: only a loss is news.
            let was = self.sites.get(&site.name).copied().unwrap_or(true);
            match (&site.error, was) {
                (Some(error), true) => events.push(Event::SiteUnreachable {
                    site: site.name.clone(),
                    error: error.clone(),
                }),
                (None, false) => events.push(Event::SiteReachable {
                    site: site.name.clone(),
                }),
                _ => {}
            }
            self.sites.insert(site.name.clone(), reachable);
        }
        self.sites
            .retain(|name, _| facts.sites.iter().any(|s| &s.name == name));
    }

    fn spec_events(&mut self, facts: &CycleFacts<'_>, events: &mut Vec<Event>) {
        for (name, now) in &facts.specs {
            let before = self.specs.get(*name);
            let stalled_reason = now.stalled.map(|(r, _)| r);
            if before.is_some_and(|b| {
                b.ready == now.ready
                    && b.stalled_reason.as_deref() == stalled_reason.map(Reason::as_str)
                    && b.drifted.as_deref() == now.drifted
                    && b.suspended == now.suspended.is_some()
                    && b.unhealthy == now.unhealthy.is_some()
            }) {
                continue;
            }
            let before = before.cloned().unwrap_or_default();
            if let Some((reason, message)) = now.stalled
                && before.stalled_reason.as_deref() != Some(reason.as_str())
            {
                events.push(Event::SpecStalled {
                    spec: name.to_string(),
                    reason: reason.to_string(),
                    message: message.to_string(),
                });
            }
            if now.ready && !before.ready {
                events.push(Event::SpecReady {
                    spec: name.to_string(),
                });
            }
            match (now.suspended, before.suspended) {
                (Some(message), false) => events.push(Event::SpecSuspended {
                    spec: name.to_string(),
                    message: message.to_string(),
                }),
                (None, true) => events.push(Event::SpecResumed {
                    spec: name.to_string(),
                    kind: now.kind,
                }),
                _ => {}
            }
            if let Some(message) = now.unhealthy
                && !before.unhealthy
            {
                events.push(Event::SpecUnhealthy {
                    spec: name.to_string(),
                    kind: now.kind,
                    message: message.to_string(),
                });
            }
            if let Some(message) = now.drifted
                && before.drifted.as_deref() != Some(message)
            {
                events.push(Event::SpecDrifted {
                    spec: name.to_string(),
                    message: message.to_string(),
                });
            }
            self.specs.insert(
                name.to_string(),
                SpecMemory {
                    ready: now.ready,
                    stalled_reason: stalled_reason.map(|r| r.to_string()),
                    drifted: now.drifted.map(str::to_string),
                    suspended: now.suspended.is_some(),
                    unhealthy: now.unhealthy.is_some(),
                },
            );
        }
        // Forget specs gone from the commit, unless their removal is still under way.
        if self.specs.len() != facts.specs.len() {
            self.specs.retain(|name, _| {
                facts.specs.contains_key(name.as_str())
                    || facts.pending_removals.contains(name.as_str())
            });
        }
    }

    fn orphan_events(&mut self, facts: &CycleFacts<'_>, events: &mut Vec<Event>) {
        let mut now = BTreeSet::new();
        for o in &facts.orphans {
            let key = (o.site.clone(), o.vmid);
            if !self.orphans.contains(&key) {
                events.push(Event::OrphanFound {
                    site: o.site.clone(),
                    vmid: o.vmid,
                    kind: o.kind,
                    name: o.name.clone(),
                    duplicate_of: o.duplicate_of.clone(),
                });
            }
            now.insert(key);
        }
        self.orphans = now;
    }

    fn commit_events(&mut self, facts: &CycleFacts<'_>, events: &mut Vec<Event>) {
        if facts.commit.is_empty() {
            return;
        }
        let mut memory = match self.commit.take() {
            Some(m) if m.sha == facts.commit && !m.hashes.is_empty() => m,
            previous => new_commit(previous, facts),
        };
        let (state, stalled) = commit_state(&memory, facts);
        let told: Vec<(String, String)> = stalled
            .iter()
            .map(|s| (s.spec.clone(), s.reason.clone()))
            .collect();
        if memory.told.as_ref() != Some(&(state, told.clone())) {
            events.push(Event::CommitState {
                commit: memory.sha.clone(),
                state,
                description: describe_commit(state, &memory, &stalled),
                stalled,
            });
            memory.told = Some((state, told));
        }
        self.commit = Some(memory);
    }
}

/// The memory of a commit seen for the first time: which specs it changed against the
/// previous commit's hashes (all of them when those are unknown, as after a restart, when
/// the commit's state is told once more: forges keep the latest status per context).
fn new_commit(previous: Option<CommitMemory>, facts: &CycleFacts<'_>) -> CommitMemory {
    let hashes = facts.spec_hashes.clone().unwrap_or_default();
    let (changed, removed) = match &previous {
        Some(p) if !p.hashes.is_empty() && p.sha != facts.commit => {
            let changed = hashes
                .iter()
                .filter(|(name, h)| p.hashes.get(*name) != Some(*h))
                .map(|(name, _)| name.clone())
                .collect();
            let removed = p
                .hashes
                .keys()
                .filter(|name| !hashes.contains_key(*name))
                .cloned()
                .collect();
            (changed, removed)
        }
        _ => (hashes.keys().cloned().collect(), BTreeSet::new()),
    };
    let told = match previous {
        // Still the commit the last run applied: what was told then is not known, and
        // telling its current state once again is harmless.
        Some(p) if p.sha == facts.commit => p.told,
        _ => None,
    };
    CommitMemory {
        sha: facts.commit.to_string(),
        changed,
        removed,
        hashes,
        told,
    }
}

/// Failure when a spec the commit changed is Stalled; success when all of them are Ready and
/// the specs it removed are gone; else pending.
fn commit_state(memory: &CommitMemory, facts: &CycleFacts<'_>) -> (CommitState, Vec<StalledSpec>) {
    let mut stalled = Vec::new();
    let mut converging = false;
    for name in &memory.changed {
        match facts.specs.get(name.as_str()) {
            Some(SpecFacts {
                stalled: Some((reason, message)),
                ..
            }) => stalled.push(StalledSpec {
                spec: name.clone(),
                reason: reason.to_string(),
                message: message.to_string(),
            }),
            // An observe-only spec whose VM differs is as far as proxsync takes it.
            Some(s) if s.ready || s.drifted.is_some() => {}
            _ => converging = true,
        }
    }
    let removing: Vec<&String> = memory
        .removed
        .iter()
        .filter(|n| facts.pending_removals.contains(n.as_str()))
        .collect();
    if !facts.refused.is_empty() {
        // A valve refused the deletes this commit asked for.
        for name in &removing {
            stalled.push(StalledSpec {
                spec: name.to_string(),
                reason: "DeleteRefused".into(),
                message: facts.refused.join("; "),
            });
        }
    }
    let removing = !removing.is_empty();
    let state = if !stalled.is_empty() {
        CommitState::Failure
    } else if converging || removing {
        CommitState::Pending
    } else {
        CommitState::Success
    };
    (state, stalled)
}

/// A one-line description (forges show about 140 characters).
fn describe_commit(state: CommitState, m: &CommitMemory, stalled: &[StalledSpec]) -> String {
    let specs = |n: usize| if n == 1 { "spec" } else { "specs" };
    let (changed, removed) = (m.changed.len(), m.removed.len());
    let text = match state {
        CommitState::Pending => format!(
            "applying: {changed} {} changed, {removed} removed",
            specs(changed)
        ),
        CommitState::Success => format!(
            "applied: {changed} changed {} Ready, {removed} removed",
            specs(changed)
        ),
        CommitState::Failure | CommitState::Refused => {
            let names: Vec<String> = stalled
                .iter()
                .map(|s| format!("{} ({})", s.spec, s.reason))
                .collect();
            format!("Stalled: {}", names.join(", "))
        }
    };
    super::clip_chars(&text, 140)
}

/// Deletes, releases and orphan deletes done this cycle.
fn removal_events(facts: &CycleFacts<'_>, events: &mut Vec<Event>) {
    for r in &facts.removed {
        let (spec, site, vmid, kind) = (r.spec.clone(), r.site.clone(), r.vmid, r.kind);
        events.push(if r.released {
            Event::SpecReleased {
                spec,
                site,
                vmid,
                kind,
            }
        } else {
            Event::SpecDeleted {
                spec,
                site,
                vmid,
                kind,
            }
        });
    }
    for (site, vmid, kind) in &facts.orphans_deleted {
        events.push(Event::OrphanDeleted {
            site: site.clone(),
            vmid: *vmid,
            kind: *kind,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C1: &str = "1111111111111111111111111111111111111111";
    const C2: &str = "2222222222222222222222222222222222222222";

    fn ready() -> SpecFacts<'static> {
        SpecFacts {
            kind: GuestKind::Qemu,
            ready: true,
            stalled: None,
            drifted: None,
            suspended: None,
            unhealthy: None,
        }
    }
    fn converging() -> SpecFacts<'static> {
        SpecFacts {
            kind: GuestKind::Qemu,
            ready: false,
            stalled: None,
            drifted: None,
            suspended: None,
            unhealthy: None,
        }
    }
    fn stalled(reason: Reason) -> SpecFacts<'static> {
        SpecFacts {
            kind: GuestKind::Qemu,
            ready: false,
            stalled: Some((reason, "what to do")),
            drifted: None,
            suspended: None,
            unhealthy: None,
        }
    }

    /// A cycle of `commit` with these specs (each hashed as given).
    fn cycle<'a>(commit: &'a str, specs: &[(&'a str, SpecFacts<'a>, &str)]) -> CycleFacts<'a> {
        CycleFacts {
            commit,
            specs: specs.iter().map(|(n, f, _)| (*n, *f)).collect(),
            spec_hashes: Some(
                specs
                    .iter()
                    .map(|(n, _, h)| (n.to_string(), h.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn states(events: &[Event]) -> Vec<(CommitState, Vec<String>)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::CommitState { state, stalled, .. } => {
                    Some((*state, stalled.iter().map(|s| s.spec.clone()).collect()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_changes_are_told() {
        let mut t = Tracker::default();
        let first = t.observe(&cycle(C1, &[("a", converging(), "h1")]));
        assert_eq!(states(&first), vec![(CommitState::Pending, vec![])]);
        assert!(!first.iter().any(|e| matches!(e, Event::SpecReady { .. })));

        let done = t.observe(&cycle(C1, &[("a", ready(), "h1")]));
        assert!(done.contains(&Event::SpecReady { spec: "a".into() }));
        assert_eq!(states(&done), vec![(CommitState::Success, vec![])]);

        // The same cycle again: nothing.
        assert_eq!(t.observe(&cycle(C1, &[("a", ready(), "h1")])), vec![]);
    }

    /// An observe-only spec's drift is told once per difference, and does not hold its commit
    /// pending: proxsync takes it no further.
    #[test]
    fn a_drift_is_told_once_and_settles_its_commit() {
        let drifted = |m: &'static str| SpecFacts {
            kind: GuestKind::Qemu,
            ready: false,
            stalled: None,
            drifted: Some(m),
            suspended: None,
            unhealthy: None,
        };
        let mut t = Tracker::default();
        let e = t.observe(&cycle(
            C1,
            &[("a", drifted("memory: spec 4096 MiB, VM 2048 MiB"), "h1")],
        ));
        assert!(e.contains(&Event::SpecDrifted {
            spec: "a".into(),
            message: "memory: spec 4096 MiB, VM 2048 MiB".into()
        }));
        assert_eq!(states(&e), vec![(CommitState::Success, vec![])]);
        let same = t.observe(&cycle(
            C1,
            &[("a", drifted("memory: spec 4096 MiB, VM 2048 MiB"), "h1")],
        ));
        assert_eq!(same, vec![]);
        let other = t.observe(&cycle(
            C1,
            &[("a", drifted("power: spec running, VM stopped"), "h1")],
        ));
        assert!(
            matches!(other.as_slice(), [Event::SpecDrifted { .. }]),
            "{other:?}"
        );
    }

    #[test]
    fn stalled_then_ready_again_and_the_commit_fails_then_succeeds() {
        let mut t = Tracker::default();
        t.observe(&cycle(C1, &[("a", ready(), "h1"), ("b", ready(), "h1")]));
        // C2 changes b only; b stalls.
        let e = t.observe(&cycle(
            C2,
            &[
                ("a", ready(), "h1"),
                ("b", stalled(Reason::ImageNotFound), "h2"),
            ],
        ));
        assert!(e.contains(&Event::SpecStalled {
            spec: "b".into(),
            reason: "ImageNotFound".into(),
            message: "what to do".into(),
        }));
        assert_eq!(states(&e), vec![(CommitState::Failure, vec!["b".into()])]);
        let Some(Event::CommitState {
            commit,
            description,
            ..
        }) = e.iter().find(|e| matches!(e, Event::CommitState { .. }))
        else {
            unreachable!()
        };
        assert_eq!(commit, C2);
        assert_eq!(description, "Stalled: b (ImageNotFound)");

        // Stalled for another reason: told again.
        let e = t.observe(&cycle(
            C2,
            &[
                ("a", ready(), "h1"),
                ("b", stalled(Reason::NodeOffline), "h2"),
            ],
        ));
        assert_eq!(e.len(), 2, "{e:?}");

        let e = t.observe(&cycle(C2, &[("a", ready(), "h1"), ("b", ready(), "h2")]));
        assert!(e.contains(&Event::SpecReady { spec: "b".into() }));
        assert_eq!(states(&e), vec![(CommitState::Success, vec![])]);
    }

    #[test]
    fn a_commit_is_judged_by_the_specs_it_changed() {
        let mut t = Tracker::default();
        t.observe(&cycle(
            C1,
            &[
                ("a", stalled(Reason::QuotaExceeded), "h1"),
                ("b", ready(), "h1"),
            ],
        ));
        // C2 changes b only: a's old stall does not fail it.
        let e = t.observe(&cycle(
            C2,
            &[
                ("a", stalled(Reason::QuotaExceeded), "h1"),
                ("b", ready(), "h2"),
            ],
        ));
        assert_eq!(states(&e), vec![(CommitState::Success, vec![])]);
    }

    #[test]
    fn a_removed_spec_keeps_its_commit_pending_until_its_vm_is_gone() {
        let mut t = Tracker::default();
        t.observe(&cycle(C1, &[("a", ready(), "h1"), ("b", ready(), "h1")]));
        let mut c = cycle(C2, &[("a", ready(), "h1")]);
        c.pending_removals.insert("b");
        assert_eq!(states(&t.observe(&c)), vec![(CommitState::Pending, vec![])]);

        // The valve refuses the delete: the commit fails, saying so.
        c.refused = vec!["refused to delete 1 of 2 managed VMs".into()];
        let e = t.observe(&c);
        assert!(e.contains(&Event::DeletesRefused {
            reasons: c.refused.clone()
        }));
        assert_eq!(states(&e), vec![(CommitState::Failure, vec!["b".into()])]);

        let mut c = cycle(C2, &[("a", ready(), "h1")]);
        c.removed = vec![RemovalFacts {
            spec: "b".into(),
            site: "s1".into(),
            vmid: 101,
            kind: GuestKind::Lxc,
            released: false,
        }];
        let e = t.observe(&c);
        assert!(e.contains(&Event::SpecDeleted {
            spec: "b".into(),
            site: "s1".into(),
            vmid: 101,
            kind: GuestKind::Lxc,
        }));
        assert_eq!(states(&e), vec![(CommitState::Success, vec![])]);
    }

    /// A guest that fails its health checks is told once, as it becomes unhealthy (with
    /// `Healthy`'s message), not at every cycle it stays so; it is told again only after it
    /// passed (its recovery is `spec_ready`). A restart repeats nothing the status files showed.
    #[test]
    fn an_unhealthy_guest_is_told_once_and_its_recovery_as_ready() {
        let unhealthy = |m: &'static str| SpecFacts {
            ready: false,
            unhealthy: Some(m),
            ..ready()
        };
        let mut t = Tracker::default();
        t.observe(&cycle(C1, &[("web", ready(), "h1")]));
        let e = t.observe(&cycle(C1, &[("web", unhealthy("tcp refused"), "h1")]));
        assert!(
            e.contains(&Event::SpecUnhealthy {
                spec: "web".into(),
                kind: GuestKind::Qemu,
                message: "tcp refused".into(),
            }),
            "{e:?}"
        );
        let e = t.observe(&cycle(C1, &[("web", unhealthy("tcp timed out"), "h1")]));
        assert!(
            !e.iter().any(|e| matches!(e, Event::SpecUnhealthy { .. })),
            "still unhealthy, another answer: {e:?}"
        );
        let e = t.observe(&cycle(C1, &[("web", ready(), "h1")]));
        assert!(
            e.contains(&Event::SpecReady { spec: "web".into() }),
            "{e:?}"
        );
        let e = t.observe(&cycle(C1, &[("web", unhealthy("tcp refused"), "h1")]));
        assert!(
            e.iter().any(|e| matches!(e, Event::SpecUnhealthy { .. })),
            "{e:?}"
        );

        let mut b = Baseline::default();
        b.specs.insert(
            "web".into(),
            SpecMemory {
                unhealthy: true,
                ..SpecMemory::default()
            },
        );
        let mut t = Tracker::from_baseline(b);
        let e = t.observe(&cycle(C1, &[("web", unhealthy("tcp refused"), "h1")]));
        assert!(
            !e.iter().any(|e| matches!(e, Event::SpecUnhealthy { .. })),
            "the status files showed it before the restart: {e:?}"
        );
    }

    /// A resumed spec's event names what proxsync acts on again: its guest's kind.
    #[test]
    fn a_resumed_spec_names_its_guests_kind() {
        let suspended = |kind| SpecFacts {
            kind,
            suspended: Some("suspended by alice"),
            ..ready()
        };
        let mut t = Tracker::default();
        t.observe(&cycle(C1, &[("dns", suspended(GuestKind::Lxc), "h1")]));
        let e = t.observe(&cycle(
            C1,
            &[(
                "dns",
                SpecFacts {
                    kind: GuestKind::Lxc,
                    ..ready()
                },
                "h1",
            )],
        ));
        assert!(
            e.contains(&Event::SpecResumed {
                spec: "dns".into(),
                kind: GuestKind::Lxc
            }),
            "{e:?}"
        );
    }

    #[test]
    fn sites_and_orphans_are_told_when_they_change() {
        let mut t = Tracker::default();
        let site = |error: Option<&str>| SiteFacts {
            name: "s1".into(),
            error: error.map(str::to_string),
        };
        let orphan = OrphanFacts {
            site: "s1".into(),
            vmid: 120,
            kind: GuestKind::Lxc,
            name: Some("old".into()),
            duplicate_of: None,
        };
        let mut c = cycle(C1, &[]);
        c.sites = vec![site(None)];
        let e = t.observe(&c);
        assert!(!e.iter().any(|e| matches!(e, Event::SiteReachable { .. })));

        c.sites = vec![site(Some("connection refused"))];
        c.orphans = vec![orphan.clone()];
        let e = t.observe(&c);
        assert!(e.contains(&Event::SiteUnreachable {
            site: "s1".into(),
            error: "connection refused".into()
        }));
        assert!(e.iter().any(|e| matches!(
            e,
            Event::OrphanFound {
                vmid: 120,
                kind: GuestKind::Lxc,
                ..
            }
        )));
        assert_eq!(t.observe(&c), vec![], "a steady state is not told again");

        c.sites = vec![site(None)];
        c.orphans = vec![];
        c.orphans_deleted = vec![("s1".into(), 120, GuestKind::Lxc)];
        let e = t.observe(&c);
        assert!(e.contains(&Event::SiteReachable { site: "s1".into() }));
        assert!(e.contains(&Event::OrphanDeleted {
            site: "s1".into(),
            vmid: 120,
            kind: GuestKind::Lxc,
        }));
    }

    #[test]
    fn a_restart_repeats_nothing_the_status_files_already_showed() {
        let mut b = Baseline::default();
        b.specs.insert(
            "a".into(),
            SpecMemory {
                ready: false,
                stalled_reason: Some("ImageNotFound".into()),
                drifted: None,
                suspended: false,
                unhealthy: false,
            },
        );
        b.specs.insert(
            "b".into(),
            SpecMemory {
                ready: true,
                stalled_reason: None,
                drifted: None,
                suspended: false,
                unhealthy: false,
            },
        );
        b.sites.insert("s1".into(), false);
        b.orphans.insert(("s1".into(), 120));
        b.commit = Some(C1.into());
        let mut t = Tracker::from_baseline(b);
        let mut c = cycle(
            C1,
            &[
                ("a", stalled(Reason::ImageNotFound), "h"),
                ("b", ready(), "h"),
            ],
        );
        c.sites = vec![SiteFacts {
            name: "s1".into(),
            error: Some("down".into()),
        }];
        c.orphans = vec![OrphanFacts {
            site: "s1".into(),
            vmid: 120,
            kind: GuestKind::Qemu,
            name: None,
            duplicate_of: None,
        }];
        let e = t.observe(&c);
        // Only the commit's state, whose last telling is not known.
        assert_eq!(states(&e), vec![(CommitState::Failure, vec!["a".into()])]);
        assert_eq!(e.len(), 1, "{e:?}");
    }

    #[test]
    fn descriptions_fit_a_forge() {
        let names: Vec<String> = (0..40).map(|i| format!("spec-number-{i}")).collect();
        let specs: Vec<(&str, SpecFacts, &str)> = names
            .iter()
            .map(|n| (n.as_str(), stalled(Reason::ImageNotFound), "h"))
            .collect();
        let mut t = Tracker::default();
        let e = t.observe(&cycle(C1, &specs));
        let Some(Event::CommitState { description, .. }) = e.last() else {
            unreachable!()
        };
        assert_eq!(description.chars().count(), 140);
        assert!(description.ends_with('…'));
    }
}
