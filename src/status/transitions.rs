//! A spec file from the engine's view and what the previous file carries over: the standard
//! conditions, their `lastTransitionTime`, a sticky `Provisioned`, the history kept.

use std::time::SystemTime;

use super::{
    AttemptRecord, AttemptSummary, BackoffRecord, Condition, ConditionStatus, DriftRecord,
    Initialization, MAX_HISTORY, Reason, SpecFile, SpecStatus, TaskRecord, clip, kinds,
    parse_rfc3339, rfc3339, rfc3339_secs, unix_secs,
};

/// What a spec's next file takes from its previous one, read back from that file when the next
/// one is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Carried {
    /// `initialization.provisioned`, or a True `Provisioned` condition: it never reverts.
    provisioned: bool,
    /// The reason and message of `Provisioned` while it was True: restored if the engine
    /// reports it otherwise.
    provisioned_as: Option<Box<(String, String)>>,
    /// Each condition's type, status and `lastTransitionTime`.
    conditions: Box<[CarriedCondition]>,
}

/// A condition as the next file carries it over.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CarriedCondition {
    /// The type when it is not one of [`kinds::ORDER`] (a file of another version).
    other: Option<Box<str>>,
    /// Else its index in [`kinds::ORDER`].
    order: u8,
    status: ConditionStatus,
    /// `lastTransitionTime` in whole seconds since the epoch (what the file holds), or
    /// [`NO_TIME`] when the file's was not a valid time: the next transition time is then now.
    since: i64,
}

const NO_TIME: i64 = i64::MIN;

impl CarriedCondition {
    fn kind(&self) -> &str {
        match &self.other {
            Some(kind) => kind,
            None => kinds::ORDER[usize::from(self.order)],
        }
    }
}

impl Carried {
    pub(super) fn of(f: &SpecFile) -> Carried {
        let provisioned = f
            .condition(kinds::PROVISIONED)
            .filter(|c| c.status == ConditionStatus::True);
        Carried {
            provisioned: f.initialization.provisioned || provisioned.is_some(),
            provisioned_as: provisioned.map(|c| Box::new((c.reason.clone(), c.message.clone()))),
            conditions: f
                .conditions
                .iter()
                .map(|c| {
                    // The standard types are an index: no allocation for them.
                    let order = kinds::ORDER.iter().position(|k| *k == c.kind);
                    CarriedCondition {
                        other: match order {
                            Some(_) => None,
                            None => Some(c.kind.as_str().into()),
                        },
                        order: order.map_or(0, |i| i as u8),
                        status: c.status,
                        since: parse_rfc3339(&c.last_transition_time).map_or(NO_TIME, unix_secs),
                    }
                })
                .collect(),
        }
    }

    /// The previous status and transition time (whole seconds since the epoch) of a
    /// condition type.
    fn condition(&self, kind: &str) -> Option<(ConditionStatus, Option<i64>)> {
        self.conditions
            .iter()
            .find(|c| c.kind() == kind)
            .map(|c| (c.status, (c.since != NO_TIME).then_some(c.since)))
    }
}

/// Builds the file for this cycle from the engine's view and the previous file.
pub(super) fn build_spec_file(s: &SpecStatus, prev: Option<&Carried>, now: SystemTime) -> SpecFile {
    let now_s = rfc3339(now);
    let mut conditions = conditions(s);
    let provisioned = sticky_provisioned(s, prev, &mut conditions);
    transition_times(&mut conditions, prev, &now_s);
    sort_conditions(&mut conditions);
    let history = history(s);

    SpecFile {
        name: s.name.clone(),
        kind: match (s.template, s.kind) {
            (true, _) => Some(crate::spec::templates::TEMPLATE_KIND.to_string()),
            (false, crate::guest::GuestKind::Lxc) => Some(s.kind.spec_kind().to_string()),
            (false, crate::guest::GuestKind::Qemu) => None,
        },
        site: clip(&s.site),
        node: clip(&s.node),
        vm_id: s.vm_id,
        vm_name: clip(&s.vm_name),
        state: clip(&s.state),
        // What the guest said; `execute` keeps only addresses, a record an older release
        // wrote may hold any text it sent.
        ip_addresses: (s.ip_addresses.iter())
            .filter(|a| a.parse::<std::net::IpAddr>().is_ok())
            .cloned()
            .collect(),
        tags: s.tags.iter().map(|t| clip(t)).collect(),
        labels: s.labels.iter().map(|(k, v)| (clip(k), clip(v))).collect(),
        commit: s.commit.as_deref().map(clip),
        spec_file: s.spec_file.as_deref().map(clip),
        observed_generation: s.observed_generation.as_deref().map(clip),
        initialization: Initialization { provisioned },
        conditions,
        last_task: s.last_task.as_ref().map(|t| TaskRecord {
            upid: clip(&t.upid),
            kind: clip(&t.kind),
            status: clip(&t.status),
            at: rfc3339(t.at),
        }),
        backoff: s.backoff.as_ref().map(|b| BackoffRecord {
            attempts: b.attempts,
            next_attempt: rfc3339(b.next_attempt),
            category: clip(&b.category),
            message: clip(&b.message),
        }),
        history,
        drift: (s.drift.iter())
            .map(|d| DriftRecord {
                field: clip(&d.field),
                spec: clip(&d.spec),
                guest: clip(&d.guest),
                at_next_start: d.at_next_start,
            })
            .collect(),
        updated_at: None,
    }
}

/// The engine's conditions, first one of each type wins, then the standard ones it did not
/// report (`Unknown`, `NotYetObserved`). Transition times are set later.
fn conditions(s: &SpecStatus) -> Vec<Condition> {
    let mut conditions: Vec<Condition> = Vec::new();
    for c in &s.conditions {
        if c.kind.is_empty() {
            tracing::warn!(spec = %s.name, "condition without a type; dropped");
            continue;
        }
        if conditions.iter().any(|x| x.kind == c.kind) {
            tracing::warn!(spec = %s.name, kind = c.kind, "duplicate condition; first kept");
            continue;
        }
        conditions.push(Condition {
            kind: c.kind.to_string(),
            status: c.status,
            reason: c.reason.to_string(),
            message: clip(&c.message),
            last_transition_time: String::new(),
        });
    }
    for kind in kinds::STANDARD {
        if !conditions.iter().any(|c| c.kind == kind) {
            conditions.push(Condition {
                kind: kind.to_string(),
                status: ConditionStatus::Unknown,
                reason: Reason::NotYetObserved.to_string(),
                message: String::new(),
                last_transition_time: String::new(),
            });
        }
    }
    conditions
}

/// Provisioned never goes back once True: returns `initialization.provisioned` and restores
/// the condition when the engine reports it False after it was True.
fn sticky_provisioned(
    s: &SpecStatus,
    prev: Option<&Carried>,
    conditions: &mut [Condition],
) -> bool {
    let mut provisioned = s.provisioned || prev.is_some_and(|p| p.provisioned);
    if let Some(c) = conditions.iter_mut().find(|c| c.kind == kinds::PROVISIONED) {
        if c.status == ConditionStatus::True {
            provisioned = true;
        } else if provisioned {
            // The previous True condition comes back (its time with it: the status is the
            // same, see `transition_times`).
            c.status = ConditionStatus::True;
            match prev.and_then(|p| p.provisioned_as.as_deref()) {
                Some((reason, message)) => {
                    c.reason = reason.clone();
                    c.message = message.clone();
                }
                None => {
                    c.reason = Reason::Created.to_string();
                    c.message = "initial provisioning completed".to_string();
                }
            }
        }
    }
    provisioned
}

/// lastTransitionTime moves only when the status changes.
fn transition_times(conditions: &mut [Condition], prev: Option<&Carried>, now_s: &str) {
    for c in conditions {
        c.last_transition_time = match prev.and_then(|p| p.condition(&c.kind)) {
            Some((status, Some(since))) if status == c.status => rfc3339_secs(since),
            _ => now_s.to_string(),
        };
    }
}

/// The file order: [`kinds::ORDER`] first, other types after, sorted by name.
fn sort_conditions(conditions: &mut [Condition]) {
    conditions.sort_by(|a, b| {
        let rank = |k: &str| {
            kinds::ORDER
                .iter()
                .position(|o| *o == k)
                .unwrap_or(kinds::ORDER.len())
        };
        rank(&a.kind)
            .cmp(&rank(&b.kind))
            .then_with(|| a.kind.cmp(&b.kind))
    });
}

/// The most recent attempts first, at most [`MAX_HISTORY`].
fn history(s: &SpecStatus) -> Vec<AttemptRecord> {
    let mut history: Vec<&AttemptSummary> = s.history.iter().collect();
    history.sort_by_key(|h| std::cmp::Reverse(h.at)); // stable: keeps the engine's order on ties
    history
        .into_iter()
        .take(MAX_HISTORY)
        .map(|h| AttemptRecord {
            at: rfc3339(h.at),
            action: clip(&h.action),
            outcome: clip(&h.outcome),
            tasks: h.tasks.iter().map(|t| clip(t)).collect(),
            took_ms: h.took_ms,
        })
        .collect()
}

#[cfg(test)]
mod size_tests {
    /// The writer keeps the carried conditions of every spec (five or six each, 10,000 specs
    /// and more): a standard type is an index and the time whole seconds.
    #[test]
    fn carried_conditions_stay_small() {
        let size = std::mem::size_of::<super::CarriedCondition>();
        assert!(size <= 32, "{size}");
        assert!(super::kinds::ORDER.len() <= usize::from(u8::MAX));
    }
}
