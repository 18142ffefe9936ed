//! Waiting for tasks without crowding a site: [`Client::wait_task`] is [`TaskWatcher::wait`].
//! A caller still awaits one task's outcome; behind it
//!
//! - **a task is first read when such tasks usually end on its node**: each node keeps, per
//!   task type, how long they took ([`super::pace`], learnt from the waits that saw one end),
//!   and a task just started is first read then, so it mostly costs one read and is noticed a
//!   few percent of its duration late. One still running is read again at 1, 2 and 4 small
//!   steps ([`super::pace::follow_up`]), then at the pace of its overrun (below);
//! - **otherwise the pause between polls grows with the task's age** (its start is in the
//!   UPID): a task of a type not seen ending on its node yet, or an older one (a wait resumed
//!   after a restart), is read once after [`FIRST_POLL`], so a quick one costs one read; then
//!   it is polled every [`MIN_INTERVAL`] while younger than 0.5 s, every 0.5 s, 1 s, ... (the
//!   largest power-of-two multiple of [`MIN_INTERVAL`] not above its age, or past its usual
//!   duration, not above its overrun; for the first tasks of a type on a node, which teach the
//!   others when to be read, not above a quarter of its age) up to `task_poll_max`. The pause
//!   never exceeds the task's age, so a task is noticed at most its own duration late (and
//!   `task_poll_max` at most);
//! - **at most [`TASK_POLLS_PER_SITE`] task reads are in flight per site** (a status, a log, a
//!   listing), however many actions wait;
//! - **waits on one node share that node's listing**: with two or more waits on a node, a poll
//!   after the first reads `GET /nodes/{node}/tasks?source=active` (at most once per poll
//!   instant: polls fall on a grid of their interval, shared by every wait of the site), and
//!   only a task missing from it (or listed with an exit status) gets its own
//!   `tasks/{upid}/status` read for the exit status. A lone wait reads its task's status.
//!
//! What PVE's active listing is: pve-manager `PVE/API2/Tasks.pm` (at 14a22df) `node_tasks`,
//! parameter `source` (`enum => ['archive', 'active', 'all']`, default `archive`, lines
//! 91-97); `active` reads `PVE::INotify::read_file('active')` (`/var/log/pve/tasks/active`),
//! skips tasks already archived (`next if $task->{saved}`) and sets
//! `$task->{status} = 'RUNNING' if !$task->{status}` (lines 228-237). pve-common
//! `src/PVE/RESTEnvironment.pm` (at f665029): `fork_worker` adds the task to that file
//! (`active_workers($upid, $sync)`, line 727) before it returns the UPID, so a task we wait for
//! is listed from its start; when the worker ends, `log_task_result` (line 55) has
//! `active_workers` write its end time and exit status and archive it (`saved`, lines 344-361),
//! so an ended task is either gone from the listing or listed with its exit status. The
//! listing is not checked against the processes (a worker whose daemon was restarted can stay
//! `RUNNING` until the next task starts on the node), so the poll at the wait's deadline is
//! always a status read: [`TaskOutcome::StillRunning`] is never said on the listing's word.
//!
//! Why a small fixed number of reads per site: a task's status and log are `protected`
//! (`PVE/API2/Tasks.pm` lines 462-464: `protected => 1`, `proxyto => 'node'`), so pveproxy
//! forwards each to the node's pvedaemon, which runs 3 workers by default
//! (`PVE/Service/pvedaemon.pm` line 18, `max_workers => 3`) shared with the creates and
//! config writes. `max_parallel_per_node` counts actions per node, not reads per site.
//!
//! Each wait also tells the site's [`crate::concurrency::NodeLimits`] how its task went: how
//! long a task that ended well took, and a lock timeout it died of.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::client::Client;
use super::error::Error;
use super::pace::{FOLLOW_UPS, Pace, Seen, follow_up};
use super::task::{TaskOutcome, Upid, classify_exit};
use super::types::TaskStatus;

/// Task reads (status, log, listing) one site gets at once from all waits together.
pub const TASK_POLLS_PER_SITE: usize = 4;

/// A task that has just started is first read this old: most tasks proxsync starts (a config
/// change, a start, a resize) have ended by then, and then cost one read.
pub(crate) const FIRST_POLL: Duration = Duration::from_millis(100);

/// The shortest pause between two polls of one task, and the grid every interval is a
/// power-of-two multiple of.
pub const MIN_INTERVAL: Duration = Duration::from_millis(250);

/// The task waits of one site (one per [`Client`]).
pub(crate) struct TaskWatcher {
    /// Poll instants are multiples of their interval since `epoch`, so waits of one node
    /// that poll at the same interval poll at the same instant and share one listing.
    epoch: Instant,
    reads: Semaphore,
    nodes: Mutex<HashMap<String, Arc<NodeWaits>>>,
}

/// The waits on one node, its latest active listing and how long its tasks take.
#[derive(Default)]
struct NodeWaits {
    waiting: AtomicUsize,
    /// Per task type, how long such tasks take on this node.
    paces: Mutex<HashMap<String, Pace>>,
    /// Woken when a task type's first duration is learnt here.
    learned: tokio::sync::Notify,
    /// Held while the listing is read: one listing in flight per node; waits due at the same
    /// instant take the one read for it.
    listing: tokio::sync::Mutex<Option<Listing>>,
}

struct Listing {
    /// When the read was sent: it tells what ran at this instant or later.
    at: Instant,
    /// The UPIDs listed as running (empty when the read failed: each wait reads its status).
    running: HashSet<String>,
}

/// A wait counted on its node until it ends or is dropped (a caller's `select!` may cancel it).
struct Registered(Arc<NodeWaits>);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl TaskWatcher {
    pub(crate) fn new() -> TaskWatcher {
        TaskWatcher {
            epoch: Instant::now(),
            reads: Semaphore::new(TASK_POLLS_PER_SITE),
            nodes: Mutex::new(HashMap::new()),
        }
    }

    fn register(&self, node: &str) -> Registered {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let waits = nodes.entry(node.to_string()).or_default().clone();
        waits.waiting.fetch_add(1, Ordering::Relaxed);
        Registered(waits)
    }

    /// Polls a task until it stops or `timeout` passes; see [`Client::wait_task`].
    // Long because: one poll loop whose pace, shared listing and end are one state each turn.
    pub(crate) async fn wait(
        &self,
        client: &Client,
        upid: &Upid,
        timeout: Duration,
    ) -> Result<TaskOutcome, Error> {
        let began = Instant::now();
        // A timeout past what an Instant holds waits as good as forever.
        let deadline = began
            .checked_add(timeout)
            .unwrap_or(began + Duration::from_secs(100 * 365 * 86_400));
        let node = self.register(&upid.node);
        // Both bounds are at most the true age: a clock skew only changes the pace.
        let age = |now: Instant| {
            upid.age_at_least(crate::util::clock::system_now())
                .max(now.saturating_duration_since(began))
        };
        // A task started just now (its UPID's whole second, less than a second ago) is read
        // when its type usually ends here; an older one, as its age says.
        let fresh = upid.age_at_least(crate::util::clock::system_now()) < Duration::from_secs(1);
        let mut planned = if fresh { node.0.pace(&upid.kind) } else { None };
        // The estimate the first read was made at, for learning (not one learnt meanwhile).
        let first_planned = planned;
        let mut due = began + planned.unwrap_or_else(|| first_poll_delay(age(began)));
        let mut reads = 0;
        // Reads since the wait was planned at its kind's usual end (the follow-ups count them).
        let mut since_plan = 0;
        // When (since `began`) a read last found the task running.
        let mut running: Option<Duration> = None;
        loop {
            if fresh && planned.is_none() {
                // One of the first of its kind on the node: when another wait learns how long
                // such tasks take, this one is read at that time too, not at its next poll.
                let learned = node.0.learned.notified();
                tokio::pin!(learned);
                learned.as_mut().enable();
                if node.0.pace(&upid.kind).is_none() {
                    tokio::select! {
                        () = tokio::time::sleep_until(due.min(deadline).into()) => {}
                        () = &mut learned => {}
                    }
                }
                if let Some(usual) = node.0.pace(&upid.kind) {
                    planned = Some(usual);
                    since_plan = 0;
                    if Instant::now() < began + usual {
                        due = began + usual;
                        continue;
                    }
                }
            } else {
                tokio::time::sleep_until(due.min(deadline).into()).await;
            }
            let last = Instant::now() >= deadline;
            // The first poll reads the status (a quick task ends there), and so do the read at
            // the kind's usual end, its follow-ups and the last poll.
            let personal = reads == 0 || planned.is_some_and(|_| since_plan <= FOLLOW_UPS);
            let shared = !personal && !last && node.0.waiting.load(Ordering::Relaxed) >= 2;
            reads += 1;
            since_plan += 1;
            if !(shared
                && self
                    .listed_running(client, &node.0, &upid.node, due, upid)
                    .await)
            {
                let (status, sent) = self.read_at(client.task_status(upid)).await;
                let status = status?;
                if status.status != "running" {
                    let seen = Seen {
                        running,
                        ended: sent.saturating_duration_since(began),
                    };
                    let outcome = self.ended(client, upid, status).await;
                    let how = (fresh, first_planned);
                    self.learn(client, &node.0, upid, began, how, seen, &outcome);
                    return outcome;
                }
                if Instant::now() >= deadline {
                    return Ok(TaskOutcome::StillRunning);
                }
                running = Some(sent.saturating_duration_since(began));
            } else {
                running = Some(due.saturating_duration_since(began));
            }
            let now = Instant::now();
            due = match planned.and_then(|p| follow_up(p, since_plan)) {
                Some(pause) => now + pause,
                None => {
                    // Past its usual end, a task is polled as if it started then; the first of
                    // its kind on the node four times as often as its age says, so that its
                    // end, which the next ones are read at, is known within a quarter.
                    let age = match planned {
                        Some(usual) => age(now).saturating_sub(usual),
                        None if fresh => age(now) / 4,
                        None => age(now),
                    };
                    next_poll(self.epoch, now, poll_interval(age, client.task_poll_max))
                }
            };
        }
    }

    /// What a wait saw of its ended task: how long such tasks take on the node (a task that
    /// ended well and started when the wait began), and the node's limit of actions at once
    /// (`crate::concurrency`: a flat duration raises it, a lock timeout cuts it).
    #[allow(clippy::too_many_arguments)]
    fn learn(
        &self,
        client: &Client,
        node: &NodeWaits,
        upid: &Upid,
        began: Instant,
        (fresh, planned): (bool, Option<Duration>),
        seen: Seen,
        outcome: &Result<TaskOutcome, Error>,
    ) {
        match outcome {
            Ok(_) if fresh => {
                let first = {
                    let mut paces = node.paces.lock().unwrap_or_else(|e| e.into_inner());
                    let pace = paces.entry(upid.kind.clone()).or_default();
                    let first = pace.first_read().is_none();
                    pace.learn(seen, planned);
                    first
                };
                if first {
                    node.learned.notify_waiters();
                }
                client.task_took(&upid.node, &upid.kind, began, seen.ended);
            }
            Err(e) if e.is_lock_timeout() => client.overloaded(&upid.node, began),
            _ => {}
        }
    }

    /// Whether the node's active listing, read at `due` or later, lists `upid` as running.
    /// A failed read lists nothing: every wait due then reads its task's status instead, and
    /// those reads carry the errors a wait reports.
    async fn listed_running(
        &self,
        client: &Client,
        waits: &NodeWaits,
        node: &str,
        due: Instant,
        upid: &Upid,
    ) -> bool {
        let mut listing = waits.listing.lock().await;
        if listing.as_ref().is_none_or(|l| l.at < due) {
            let at = Instant::now();
            let running = match self.read(client.active_tasks(node)).await {
                Ok(tasks) => tasks.into_iter().map(|t| t.upid).collect(),
                Err(e) => {
                    tracing::debug!(node, error = %e, "task listing failed; reading task statuses");
                    HashSet::new()
                }
            };
            *listing = Some(Listing { at, running });
        }
        listing
            .as_ref()
            .is_some_and(|l| l.running.contains(upid.as_str()))
    }

    /// A stopped task's outcome: `OK` and `WARNINGS: n` succeed, anything else is
    /// [`Error::TaskFailed`] with the log's last lines.
    async fn ended(
        &self,
        client: &Client,
        upid: &Upid,
        status: TaskStatus,
    ) -> Result<TaskOutcome, Error> {
        let exit = status
            .exitstatus
            .unwrap_or_else(|| "(no exit status)".into());
        match classify_exit(&exit) {
            Ok(outcome) => Ok(outcome),
            Err(text) => {
                client.metrics.task_failed(&upid.kind);
                let log_tail = self
                    .read(client.task_log_tail(upid, 10))
                    .await
                    .unwrap_or_default();
                Err(Error::TaskFailed {
                    upid: upid.to_string(),
                    exitstatus: text,
                    log_tail,
                })
            }
        }
    }

    /// One task read, within the site's [`TASK_POLLS_PER_SITE`].
    async fn read<T>(&self, call: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        self.read_at(call).await.0
    }

    /// [`read`](Self::read), with when it was sent (once the site let it go).
    async fn read_at<T>(
        &self,
        call: impl Future<Output = Result<T, Error>>,
    ) -> (Result<T, Error>, Instant) {
        // Never closed, so the permit always comes; without one the read would still be right.
        let _permit = self.reads.acquire().await.ok();
        let sent = Instant::now();
        (call.await, sent)
    }
}

impl NodeWaits {
    /// When a task of type `kind` is best first read here, since its wait began.
    fn pace(&self, kind: &str) -> Option<Duration> {
        self.paces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)
            .and_then(Pace::first_read)
    }
}

/// How long after the wait begins its first poll comes: when the task is [`FIRST_POLL`] old,
/// at once for an older one (a wait resumed after a restart).
pub(crate) fn first_poll_delay(age: Duration) -> Duration {
    FIRST_POLL.saturating_sub(age)
}

/// The pause before the next poll of a task `age` old: the largest power-of-two multiple of
/// [`MIN_INTERVAL`] not above its age (at least [`MIN_INTERVAL`]), at most `cap`.
pub(crate) fn poll_interval(age: Duration, cap: Duration) -> Duration {
    let cap = cap.max(Duration::from_millis(1));
    let mut interval = MIN_INTERVAL;
    while interval * 2 <= age && interval * 2 <= cap {
        interval *= 2;
    }
    interval.min(cap)
}

/// The next multiple of `interval` since `epoch` after `now`: waits polling at one interval
/// poll at the same instants (and a shorter power-of-two interval's grid holds the longer's).
pub(crate) fn next_poll(epoch: Instant, now: Instant, interval: Duration) -> Instant {
    let step = interval.as_nanos().max(1);
    let ticks = now.saturating_duration_since(epoch).as_nanos() / step + 1;
    u64::try_from(ticks * step)
        .ok()
        .and_then(|n| epoch.checked_add(Duration::from_nanos(n)))
        .unwrap_or(now + interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_secs(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_young_task_is_read_when_first_poll_old_an_older_one_at_once() {
        assert_eq!(first_poll_delay(ms(0)), FIRST_POLL);
        assert_eq!(first_poll_delay(ms(30)), ms(70));
        assert_eq!(first_poll_delay(ms(100)), ms(0));
        assert_eq!(first_poll_delay(Duration::from_secs(3600)), ms(0));
    }

    #[test]
    fn the_interval_doubles_with_the_age_up_to_the_cap() {
        let table = [
            (0, 250),
            (200, 250),
            (499, 250),
            (500, 500),
            (999, 500),
            (1000, 1000),
            (1999, 1000),
            (2000, 2000),
            (60_000, 2000),
        ];
        for (age, interval) in table {
            assert_eq!(poll_interval(ms(age), CAP), ms(interval), "age {age} ms");
        }
        // Never longer than the task is old (past MIN_INTERVAL), nor than the cap.
        for age in (0..10_000).step_by(37) {
            let i = poll_interval(ms(age), CAP);
            assert!(
                i <= ms(age).max(MIN_INTERVAL) && i <= CAP,
                "age {age} ms: {i:?}"
            );
        }
        assert_eq!(
            poll_interval(ms(5000), ms(100)),
            ms(100),
            "a cap below the grid"
        );
        assert_eq!(poll_interval(ms(5000), ms(0)), ms(1), "never zero");
        assert_eq!(poll_interval(ms(60_000), Duration::from_secs(8)), ms(8000));
    }

    #[test]
    fn polls_fall_on_a_shared_grid() {
        let epoch = Instant::now();
        let at = |n: u64| epoch + ms(n);
        assert_eq!(next_poll(epoch, at(0), ms(250)), at(250));
        assert_eq!(next_poll(epoch, at(10), ms(250)), at(250));
        assert_eq!(
            next_poll(epoch, at(250), ms(250)),
            at(500),
            "strictly after now"
        );
        assert_eq!(next_poll(epoch, at(1100), ms(1000)), at(2000));
        // Two waits of one interval that polled at different instants meet at the next one.
        assert_eq!(
            next_poll(epoch, at(1010), ms(500)),
            next_poll(epoch, at(1370), ms(500))
        );
        // A 2 s poll instant is also a 250 ms one: young and old waits share it.
        let long = next_poll(epoch, at(3100), ms(2000));
        assert_eq!(next_poll(epoch, long - ms(1), ms(250)), long);
    }

    #[test]
    fn a_wait_is_counted_on_its_node_until_dropped() {
        let w = TaskWatcher::new();
        let a = w.register("pve1");
        let b = w.register("pve1");
        let other = w.register("pve2");
        assert_eq!(a.0.waiting.load(Ordering::Relaxed), 2);
        assert_eq!(other.0.waiting.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(
            a.0.waiting.load(Ordering::Relaxed),
            1,
            "a cancelled wait leaves"
        );
        drop(a);
        let again = w.register("pve1");
        assert_eq!(again.0.waiting.load(Ordering::Relaxed), 1);
    }
}
