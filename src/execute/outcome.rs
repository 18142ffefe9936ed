//! What an action's outcome does to its spec's record: attempts and backoff, the last error,
//! the history line, written to the state database.

use crate::backoff;
use crate::plan::{Action, inputs_hash};
use crate::pve::Pve;
use crate::store::{ErrorRecord, SpecRecord, VmState};

use super::{ExecCtx, Outcome};
use crate::model::Note;

/// When a spec whose task still runs, or that waits for something that resolves by itself,
/// is looked at again (a deadline the daemon wakes for; not a backoff: no error is recorded).
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Records `result` on the spec's record: a failure counts an attempt and sets the backoff and
/// `last_error`; success or a wait clears them; every outcome adds a history line.
/// `unwritten`: the state the store still holds when the action changed `rec.vm` in memory
/// only (an adoption of a guest already as its spec says). The write's result is returned
/// (and a failure logged).
pub(super) fn record(
    ctx: &ExecCtx<impl Pve>,
    action: &Action,
    mut rec: SpecRecord,
    unwritten: Option<&VmState>,
    result: &Outcome,
    started_ms: u64,
) -> Result<(), crate::store::StateError> {
    let Some(spec_name) = action.spec() else {
        return Ok(());
    };
    // Record the outcome for backoff and status. Removed and handed-over specs have no
    // record any more; a hand-over of a VM no record knew (an owned VM after a lost database)
    // does not make one.
    if matches!(action, Action::Forget { .. })
        || matches!(action, Action::Remove { .. }) && *result == Outcome::Done
        || matches!(action, Action::HandOver { .. })
            && (*result == Outcome::Done || rec.site.is_empty())
    {
        return Ok(());
    }
    let now = ctx.clock.now_ms();
    match result {
        Outcome::Failed(e) => {
            rec.attempts = rec.attempts.saturating_add(1);
            let delay = backoff::delay(spec_name, rec.attempts, e.needs_human());
            rec.next_attempt_ms = Some(now + delay.as_millis() as u64);
            let inputs = ctx
                .specs
                .get(spec_name)
                .map(|s| inputs_hash(s, &ctx.config_hash))
                .unwrap_or_default();
            rec.last_error = Some(Box::new(ErrorRecord {
                category: e.category,
                message: e.message.clone(),
                at_ms: now,
                inputs,
                kind: e.kind,
            }));
            let note = Note::Failed {
                category: e.category,
                message: e.message.clone(),
            };
            rec.note(now, action_name(action), &note.to_string());
            tracing::warn!(spec = spec_name, category = %e.category, error = %e.message, attempts = rec.attempts, "action failed");
        }
        Outcome::Done => {
            rec.attempts = 0;
            rec.next_attempt_ms = None;
            rec.last_error = None;
            rec.note(now, action_name(action), "ok");
        }
        Outcome::StillRunning { upid } => {
            // Look again soon: the daemon wakes for this deadline instead of the resync.
            rec.next_attempt_ms = Some(now + LOOK_AGAIN.as_millis() as u64);
            let note = Note::StillRunning {
                upid: upid.to_string(),
            };
            rec.note(now, action_name(action), &note.to_string());
        }
        Outcome::Waiting(wait) => {
            // Blocked by something that resolves by itself: whatever failed before no longer
            // applies, and nothing is to be held back; the daemon looks again soon.
            rec.attempts = 0;
            rec.next_attempt_ms = Some(now + LOOK_AGAIN.as_millis() as u64);
            rec.last_error = None;
            rec.note(now, action_name(action), &wait.to_string());
        }
    }
    rec.finish_attempt(started_ms);
    // An adoption done is recorded lazily, in one write if `create::adopt` made none.
    let written = match (action, result) {
        (Action::Adopt { .. }, Outcome::Done) => {
            let stored = unwritten.unwrap_or(&rec.vm);
            ctx.store.put_adopted_lazily(spec_name, stored, &rec)
        }
        _ => ctx.store.put(spec_name, &rec),
    };
    if let Err(e) = &written {
        tracing::error!(spec = spec_name, error = %e, "cannot record the outcome");
    }
    written
}

/// Notes a failed attempt that this cycle tries again (`execute::create_again`) in the spec's
/// history: no attempt is counted and no backoff set, the next attempt follows.
pub(super) fn retrying(
    ctx: &ExecCtx<impl Pve>,
    action: &Action,
    mut rec: SpecRecord,
    result: &Outcome,
    started_ms: u64,
) {
    let (Some(spec_name), Outcome::Failed(e)) = (action.spec(), result) else {
        return;
    };
    let now = ctx.clock.now_ms();
    let note = Note::Retrying {
        category: e.category,
        message: e.message.clone(),
    };
    rec.note(now, action_name(action), &note.to_string());
    rec.finish_attempt(started_ms);
    tracing::info!(spec = spec_name, category = %e.category, error = %e.message, "create failed on a lock; trying again this cycle");
    if let Err(e) = ctx.store.put(spec_name, &rec) {
        tracing::error!(spec = spec_name, error = %e, "cannot record the outcome");
    }
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Create { .. } => "create",
        Action::ResumeCreate { .. } => "resume-create",
        Action::Adopt { .. } => "adopt",
        Action::AdoptByConsent { .. } => "adopt-by-consent",
        Action::Relabel { .. } => "rename",
        Action::Converge { .. } => "converge",
        Action::Migrate { .. } => "migrate",
        Action::Recreate { .. } => "recreate",
        Action::Remove { release: true, .. } => "release",
        Action::Remove { .. } => "delete",
        Action::Forget { .. } => "forget",
        Action::HandOver { .. } => "hand-over",
        Action::DeleteOrphan { .. } => "delete-orphan",
    }
}
