//! Hands-off: whether proxsync may act on a guest at all, decided once over every source that
//! takes a guest out of its hands. The spec decisions ask it first (a hands-off spec's verdict
//! is `Observed` or `Suspended`, before any other decision, renames included), and [`hold`]
//! asks it again of every action the plan holds at the end, whatever its kind, so no kind can
//! be missed: what it holds is reported in `refused` (and an orphan's delete as refused).
//!
//! The sources:
//! - observe-only: a desired spec's `managementPolicy: Observe`; without one, its file under
//!   `[reconcile] observe_paths`, or `[reconcile] management_policy = "observe"`. A spec not
//!   desired (removed from git, or now outside the selector) keeps the policy it was last seen
//!   with (`SpecRecord::observe_only`), and the install's policy covers it too, as it covers an
//!   orphan, which no spec governs;
//! - suspended: `proxsync suspend NAME`, `spec.suspend` (a set's is its members'; once recorded
//!   it is lifted when the spec no longer says it, and kept when the spec is removed), and
//!   `proxsync suspend --all`.
//!
//! A guest is covered when a source covers any spec it is tied to: the spec an action is for,
//! the spec a re-label takes it from, every spec whose record names its VMID on its site, and
//! the spec its marker (this install's) names. So the extras of a `DuplicateVM` are their
//! spec's, and a renamed spec's old VM is its old spec's. Forgetting the record of a spec whose
//! guest is gone (not listed) ties to no guest and is never held.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Action, OrphanDisposition, Plan, PlanInput, Refused, Verdict};
use crate::config::{ManagementPolicy, ReconcileConfig};
use crate::guest::GuestKind;
use crate::model::SiteView;
use crate::model::{SUSPEND_ALL, SpecRecord, Suspension};
use crate::spec::Spec;
use crate::util::fnv::FnvHashMap;

/// Why a guest (or a spec) is hands-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Spec `spec` is suspended: `proxsync suspend`, or its `spec.suspend` (`by` says which).
    Suspended {
        /// The spec suspended.
        spec: String,
        /// Who suspended it, since when and why.
        by: Suspension,
    },
    /// `proxsync suspend --all`.
    SuspendedAll(Suspension),
    /// Spec `spec` is observe-only, for `why`; `None`: an orphan under the install's policy.
    Observed {
        /// The spec observe-only, if any.
        spec: Option<String>,
        /// What makes it observe-only.
        why: Observing,
    },
}

/// What makes a spec observe-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observing {
    /// Its `managementPolicy: Observe`.
    Policy,
    /// Its file under `[reconcile] observe_paths`.
    Path,
    /// `[reconcile] management_policy = "observe"`.
    Install,
    /// Removed (or outside the selector), it was observe-only when last seen: its record says
    /// so.
    Recorded,
}

/// An action [`hold`] held, reported in the plan's `refused` (its words in `words`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// The removal of suspended spec `spec`'s guest (a `kind`) waits.
    RemovalSuspended {
        /// The spec.
        spec: String,
        /// What its guest is.
        kind: GuestKind,
        /// Who suspended it, since when and why.
        by: Suspension,
    },
    /// The removal of observe-only spec `spec`'s guest (a `kind`) waits.
    RemovalObserved {
        /// The spec.
        spec: String,
        /// What its guest is.
        kind: GuestKind,
        /// What makes it observe-only.
        why: Observing,
    },
    /// `action` (on a `kind`, when it names a guest) is not done, for `cause`.
    Action {
        /// The action held.
        action: Action,
        /// What the guest it names is.
        kind: GuestKind,
        /// Why it is hands-off.
        cause: Cause,
    },
    /// `removals` removals wait: every spec is suspended (`proxsync suspend --all`).
    AllSuspended {
        /// How many.
        removals: usize,
        /// Who suspended them, since when and why.
        by: Suspension,
    },
    /// `removals` removals are not done: `[reconcile] management_policy = "observe"`.
    InstallObserves {
        /// How many.
        removals: usize,
    },
}

/// The one hands-off decision over a plan's inputs.
pub(super) struct HandsOff<'a> {
    /// Some source may cover something: without one, every question is answered at once.
    active: bool,
    install_id: &'a str,
    reconcile: &'a ReconcileConfig,
    suspensions: &'a BTreeMap<String, Suspension>,
    all: Option<&'a Suspension>,
    records: &'a BTreeMap<String, SpecRecord>,
    sites: &'a BTreeMap<String, SiteView>,
    desired: FnvHashMap<&'a str, &'a Spec>,
    /// (site, VMID) -> the specs whose records name it (made or in the making).
    recorded: BTreeMap<(&'a str, u32), Vec<&'a str>>,
}

impl<'a> HandsOff<'a> {
    pub(super) fn new(input: &PlanInput<'a>) -> HandsOff<'a> {
        let reconcile = input.reconcile;
        let active = !input.suspensions.is_empty()
            || reconcile.management_policy == ManagementPolicy::Observe
            || !reconcile.observe_paths.is_empty()
            || input.records.values().any(|r| r.observe_only)
            || (input.desired.iter())
                .any(|s| s.suspend || s.management_policy == Some(ManagementPolicy::Observe));
        let mut out = HandsOff {
            active,
            install_id: input.install_id,
            reconcile,
            suspensions: input.suspensions,
            all: input.suspensions.get(SUSPEND_ALL),
            records: input.records,
            sites: input.sites,
            desired: FnvHashMap::default(),
            recorded: BTreeMap::new(),
        };
        if active {
            out.desired = input.desired.iter().map(|s| (s.name.as_str(), s)).collect();
            for (name, r) in input.records {
                if let Some(vmid) = r.vmid() {
                    (out.recorded.entry((r.site.as_str(), vmid)).or_default()).push(name);
                }
            }
        }
        out
    }

    /// Whether a source covers desired spec `spec`, and which (a suspension before a policy).
    pub(super) fn spec(&self, spec: &Spec) -> Option<Cause> {
        if !self.active {
            return None;
        }
        self.suspended(&spec.name, Some(spec))
            .or_else(|| self.observed(&spec.name, Some(spec)))
    }

    /// Whether a source covers the spec named `name`, desired or not (removed from git,
    /// outside the selector, invalid).
    pub(super) fn name(&self, name: &str) -> Option<Cause> {
        if !self.active {
            return None;
        }
        let spec = self.desired.get(name).copied();
        self.suspended(name, spec)
            .or_else(|| self.observed(name, spec))
    }

    /// Whether a source covers the guest at `vmid` on `site`: `--all`, or any spec a record
    /// names it for, or the spec its marker of this install names.
    pub(super) fn guest(&self, site: &str, vmid: u32) -> Option<Cause> {
        if !self.active {
            return None;
        }
        if let Some(all) = self.all {
            return Some(Cause::SuspendedAll(all.clone()));
        }
        let mut recorded = self.recorded.get(&(site, vmid)).into_iter().flatten();
        if let Some(cause) = recorded.find_map(|name| self.name(name)) {
            return Some(cause);
        }
        let vm = self.sites.get(site).and_then(|v| v.vms.get(&vmid));
        let marker = vm.and_then(|vm| vm.marker.as_deref());
        marker
            .filter(|m| m.install == self.install_id)
            .and_then(|m| self.name(&m.spec))
    }

    /// Whether a source covers `action`: the spec it is for, the spec a re-label takes the
    /// guest from, the guest it names ([`HandsOff::guest`]), and for an orphan's delete the
    /// install's policy. Forgetting a record whose guest is not listed ties to no guest.
    pub(super) fn action(&self, action: &Action) -> Option<Cause> {
        if !self.active {
            return None;
        }
        let guest = match action {
            Action::Forget { spec } => {
                let r = self.records.get(spec)?;
                let vmid = r.vmid()?;
                let listed = self.sites.get(r.site.as_str())?.vms.contains_key(&vmid);
                listed.then_some((r.site.as_str(), vmid))?
            }
            other => match other.guest() {
                Some(g) => g,
                None => {
                    // A create: no guest yet, only its spec.
                    return (other.spec()).and_then(|s| self.name(s));
                }
            },
        };
        if let Some(all) = self.all {
            return Some(Cause::SuspendedAll(all.clone()));
        }
        let from = match action {
            Action::Relabel { from, .. } => Some(from.as_str()),
            _ => None,
        };
        let mut named = action.spec().into_iter().chain(from);
        if let Some(cause) = named.find_map(|n| self.name(n)) {
            return Some(cause);
        }
        if let Some(cause) = self.guest(guest.0, guest.1) {
            return Some(cause);
        }
        (matches!(action, Action::DeleteOrphan { .. })
            && self.reconcile.management_policy == ManagementPolicy::Observe)
            .then_some(Cause::Observed {
                spec: None,
                why: Observing::Install,
            })
    }

    /// What the guest `action` names is: as listed, else as its spec's record says.
    fn kind(&self, action: &Action) -> GuestKind {
        let listed = action.guest().and_then(|(site, vmid)| {
            let vm = self.sites.get(site)?.vms.get(&vmid)?;
            Some(vm.kind)
        });
        let recorded = || Some(self.records.get(action.spec()?)?.kind);
        listed.or_else(recorded).unwrap_or_default()
    }

    /// The suspension covering spec `name` (`spec`: its spec, when desired): one of its name
    /// (a recorded `spec.suspend` only while the spec still says it, or once it is gone),
    /// `--all`, or its `spec.suspend` not recorded yet.
    fn suspended(&self, name: &str, spec: Option<&Spec>) -> Option<Cause> {
        let by_name = (self.suspensions.get(name))
            .filter(|s| spec.is_none_or(|spec| spec.suspend || !s.from_git));
        if let Some(by) = by_name {
            return Some(Cause::Suspended {
                spec: name.to_string(),
                by: by.clone(),
            });
        }
        if let Some(all) = self.all {
            return Some(Cause::SuspendedAll(all.clone()));
        }
        spec.filter(|s| s.suspend).map(|_| Cause::Suspended {
            spec: name.to_string(),
            by: Suspension {
                by: "git".into(),
                reason: None,
                at_ms: 0,
                from_git: true,
            },
        })
    }

    /// What makes spec `name` observe-only, if anything: a desired spec's policy; for one not
    /// desired, its record's, else the install's.
    fn observed(&self, name: &str, spec: Option<&Spec>) -> Option<Cause> {
        let install = self.reconcile.management_policy == ManagementPolicy::Observe;
        let why = match spec {
            Some(spec) => match spec.management_policy {
                Some(ManagementPolicy::Observe) => Some(Observing::Policy),
                Some(ManagementPolicy::Full) => None,
                None => match self.reconcile.default_policy(&spec.file) {
                    ManagementPolicy::Full => None,
                    ManagementPolicy::Observe if install => Some(Observing::Install),
                    ManagementPolicy::Observe => Some(Observing::Path),
                },
            },
            None if self.records.get(name).is_some_and(|r| r.observe_only) => {
                Some(Observing::Recorded)
            }
            None => install.then_some(Observing::Install),
        };
        why.map(|why| Cause::Observed {
            spec: Some(name.to_string()),
            why,
        })
    }
}

/// The verdict of a hands-off spec, from how its guest compares (`observed`: the verdict
/// `Observed` as the listing shows the guest, or why it cannot be judged), for `cause`.
/// `spec`: the spec's name; a cause of another spec (the one it is renamed from) is named.
pub(super) fn verdict(spec: &str, observed: Verdict, cause: Cause) -> Verdict {
    let Verdict::Observed { vmid, drift, .. } = observed else {
        return observed;
    };
    match cause {
        Cause::Suspended { spec: of, by } => Verdict::Suspended {
            vmid,
            drift,
            by: Box::new(by),
            renamed_from: (of != spec).then_some(of),
        },
        Cause::SuspendedAll(by) => Verdict::Suspended {
            vmid,
            drift,
            by: Box::new(by),
            renamed_from: None,
        },
        Cause::Observed { spec: of, .. } => Verdict::Observed {
            vmid,
            drift,
            renamed_from: of.filter(|of| of != spec),
        },
    }
}

/// Holds every action of `out` that a hands-off source covers ([`HandsOff::action`]), whatever
/// its kind, after every other decision: each is reported in `out.refused` with its cause (the
/// removals of a suspended or observe-only spec by name, those of `--all` and of the install's
/// policy counted), an orphan's delete is listed as refused, and a desired spec whose action is
/// held says why in its verdict (`observed`: its verdict as the listing shows its guest).
pub(super) fn hold(
    hands_off: &HandsOff<'_>,
    out: &mut Plan,
    observed: impl Fn(&str) -> Option<Verdict>,
) {
    if !hands_off.active {
        return;
    }
    let mut held: Vec<(Action, Cause)> = Vec::new();
    out.actions.retain(|a| match hands_off.action(a) {
        Some(cause) => {
            held.push((a.clone(), cause));
            false
        }
        None => true,
    });
    let (mut all, mut install) = (None, 0);
    for (action, cause) in held {
        if let Action::DeleteOrphan { site, vmid, .. } = &action
            && let Some(o) = (out.orphans.iter_mut()).find(|o| o.site == *site && o.vmid == *vmid)
        {
            o.disposition = OrphanDisposition::Refused;
        }
        if let Some(spec) = action.spec()
            && matches!(
                out.verdicts.get(spec),
                Some(Verdict::Acting | Verdict::Migrating { .. })
            )
            && let Some(v) = observed(spec)
        {
            let v = verdict(spec, v, cause.clone());
            Arc::make_mut(&mut out.verdicts).insert(spec.into(), v);
        }
        let removal = action.removes();
        let own = |of: &str| removal && action.spec() == Some(of);
        let kind = hands_off.kind(&action);
        match cause {
            Cause::SuspendedAll(by) if removal => {
                let n = all.get_or_insert((by, 0));
                n.1 += 1;
            }
            Cause::Observed {
                why: Observing::Install,
                ..
            } if removal => install += 1,
            Cause::Suspended { spec, by } if own(&spec) => out
                .refused
                .push(Refused::HandsOff(Held::RemovalSuspended { spec, kind, by })),
            Cause::Observed {
                spec: Some(spec),
                why,
            } if own(&spec) => {
                out.refused
                    .push(Refused::HandsOff(Held::RemovalObserved { spec, kind, why }))
            }
            cause => out.refused.push(Refused::HandsOff(Held::Action {
                action,
                kind,
                cause,
            })),
        }
    }
    if let Some((by, removals)) = all {
        (out.refused).push(Refused::HandsOff(Held::AllSuspended { removals, by }));
    }
    if install > 0 {
        (out.refused).push(Refused::HandsOff(Held::InstallObserves {
            removals: install,
        }));
    }
}
