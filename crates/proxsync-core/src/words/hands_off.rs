//! Hands-off, in words: why a guest or a spec is out of proxsync's hands ([`Cause`],
//! [`Observing`]), who suspended it ([`Suspension`]), and what the planner held for it
//! ([`Held`]), the guest named by its kind.

use std::fmt;

use crate::model::Suspension;
use crate::plan::{Action, Cause, Held, Observing};

impl fmt::Display for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Held::RemovalSuspended { spec, kind, by } => write!(
                f,
                "the removal of spec {spec}'s {} waits: the spec is suspended ({by}); `proxsync \
                 resume {spec}` lets it proceed",
                kind.noun()
            ),
            Held::RemovalObserved { spec, kind, why } => write!(
                f,
                "the removal of spec {spec}'s {noun} waits: the spec is observe-only ({why}), so \
                 its {noun} gets no action; put the spec back with managementPolicy: Full for \
                 one cycle to let its removal proceed, or remove the {noun} by hand",
                noun = kind.noun()
            ),
            Held::Action {
                action,
                kind,
                cause,
            } => {
                let what = held_action(action);
                match (action.spec(), action.guest()) {
                    (Some(spec), Some((site, vmid))) => {
                        write!(f, "{what} of {} on {site} (spec {spec})", kind.named(vmid))?
                    }
                    (Some(spec), None) => write!(f, "{what} of spec {spec}")?,
                    (None, Some((site, vmid))) => {
                        write!(f, "{what} of {} on {site}", kind.named(vmid))?
                    }
                    (None, None) => f.write_str(what)?,
                }
                write!(f, " not done: {cause}")
            }
            Held::AllSuspended { removals, by } => write!(
                f,
                "{removals} removal(s) wait: every spec is suspended ({by}); `proxsync resume \
                 --all` lets them proceed"
            ),
            Held::InstallObserves { removals } => write!(
                f,
                "{removals} removal(s) not done: [reconcile] management_policy = \"observe\" \
                 takes no action"
            ),
        }
    }
}

/// An action held, by its kind.
fn held_action(action: &Action) -> &'static str {
    match action {
        Action::Create { .. } => "the create",
        Action::ResumeCreate { .. } => "the create in flight",
        Action::Adopt { .. } => "the adoption",
        Action::AdoptByConsent { .. } => "the adoption by consent",
        Action::Converge { .. } => "the converge",
        Action::Migrate { .. } => "the migration",
        Action::Recreate { .. } => "the rebuild from a new image",
        Action::Remove { release: true, .. } => "the release",
        Action::Remove { .. } => "the delete",
        Action::Forget { .. } => "forgetting the record",
        Action::Relabel { .. } => "the re-label",
        Action::HandOver { .. } => "the hand-over",
        Action::DeleteOrphan { .. } => "the orphan delete",
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Suspended { spec, by } => write!(
                f,
                "spec {spec} is suspended ({by}); `proxsync resume {spec}` lets it proceed"
            ),
            Cause::SuspendedAll(by) => write!(
                f,
                "every spec is suspended ({by}); `proxsync resume --all` lets it proceed"
            ),
            Cause::Observed {
                spec: Some(spec),
                why,
            } => write!(f, "spec {spec} is observe-only ({why})"),
            Cause::Observed { spec: None, why } => write!(f, "observe-only ({why})"),
        }
    }
}

impl fmt::Display for Observing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Observing::Policy => "managementPolicy: Observe",
            Observing::Path => "its file is under [reconcile] observe_paths",
            Observing::Install => "[reconcile] management_policy = \"observe\"",
            Observing::Recorded => "it was observe-only when last seen",
        })
    }
}

/// Who suspended, since when and why: `by alice (uid 1000) at <time>: <reason>`, or
/// `spec.suspend in git`.
impl fmt::Display for Suspension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.from_git {
            true => f.write_str("spec.suspend in git")?,
            false => write!(f, "by {}", self.by)?,
        }
        if self.at_ms != 0 {
            let secs = (self.at_ms / 1000) as i64;
            write!(f, " at {}", crate::util::time::rfc3339_secs(secs))?;
        }
        match &self.reason {
            Some(r) => write!(f, ": {r}"),
            None => Ok(()),
        }
    }
}
