//! The conformance suite: what proxsync expects of Proxmox VE, asked of a PVE (a real cluster,
//! the fakepve harness or the in-memory fake) through the client trait, so one list of
//! scenarios checks all three. `proxsync doctor --exercise` runs it on the operator's cluster.
//!
//! Each scenario makes throwaway guests, a VM and a container, in a pool of its own
//! ([`Setup::pool`]), named with its prefix and carrying its line in the description, signed
//! with the install's marker key for the guest's VMID and identity ([`Setup::marker_line`]),
//! and deletes them again through the gate's [`crate::gate::permit::exercise_delete`]: only
//! what it proves it made, the proof read again before each step that changes a guest. Every
//! run first sweeps that pool of the guests a killed run left ([`sweep`]; a live run's are
//! left to it), and sweeps it again at its end.
//!
//! Each request is a [`Step`] of the [`Report`]: what proxsync expects (the request done, or a
//! refusal in words of `pve::texts` that mean what the client takes them to), what PVE answered,
//! and how long it took, a task's whole run included. The durations per task type seed the
//! adaptive concurrency's first estimates ([`Report::durations`]).
//!
//! The scenarios ([`Scope::Full`]): create, clone, resize, start, reboot, stop, migrate (with a
//! second node) and delete of a VM and a container; a lock another task holds (a clone's); a
//! stale digest; and the refusals of `pve::texts` a request can provoke without harm
//! ([`coverage`] names, for every row of the table, the step that provokes it or why none
//! does). [`Scope::Exercise`] (`doctor --exercise`) is create, clone, resize, start, stop and
//! delete.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::gate::permit::ExerciseMarks;
use crate::guest::GuestId;
use crate::ownership::{ExerciseLine, MarkerKey};
use crate::pve::texts::{self, Meaning};
use crate::pve::{Error, Pve, TaskOutcome, Upid};

pub mod coverage;
pub mod durations;
mod scenarios;
mod sweep;

pub(crate) use sweep::sweep;

/// Which scenarios run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `doctor --exercise`: create, clone, resize, start, stop and delete of each kind.
    Exercise,
    /// The whole conformance suite.
    Full,
}

/// Where and with what the scenarios run.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The site's name (a permit names it).
    pub site: String,
    /// The node the guests are made on.
    pub node: String,
    /// Another node, for the migrations (none: not run).
    pub other_node: Option<String>,
    /// A storage for a VM's disk (`images`).
    pub vm_storage: String,
    /// A storage for a container's root file system (`rootdir`).
    pub ct_storage: String,
    pub bridge: String,
    /// A container template (`local:vztmpl/...`); none: the container's scenarios are not run.
    pub ct_template: Option<String>,
    /// The pool every guest joins: a pool of the suite's own.
    pub pool: String,
    /// How long a task may take before the step says it is still running.
    pub task_timeout: Duration,
    pub scope: Scope,
    /// The install's marker key: it signs each guest's line ([`Setup::marker_line`]).
    pub key: MarkerKey,
    /// This run.
    pub run: Run,
}

/// A run of the suite: its id and start go into each guest's line, so a sweep tells a live
/// run's guests from a killed one's.
#[derive(Debug, Clone)]
pub struct Run {
    /// 16 hex digits, random.
    pub id: String,
    /// When it began, in seconds since the epoch.
    pub started: u64,
    /// Runs known to have ended (the last holder of the exercise's lock): their guests are
    /// swept however young.
    pub ended: Vec<String>,
}

impl Run {
    /// A new run, begun now; `ended`: the runs known to have ended.
    pub fn new(ended: Vec<String>) -> Run {
        Run {
            id: crate::ownership::new_uid(),
            started: now_secs(),
            ended,
        }
    }
}

/// How long a run may be live: a guest of another run younger than this, whose run is not
/// known to have ended, is left to its own run by a sweep.
pub(crate) const LIVE_RUN_SECS: u64 = 2 * 3600;

/// Now, in seconds since the epoch.
pub(crate) fn now_secs() -> u64 {
    crate::util::clock::system_now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The pool `doctor --exercise` uses.
pub(crate) const EXERCISE_POOL: &str = "proxsync-exercise";
/// The pool the conformance suite uses.
pub const CONFORMANCE_POOL: &str = "proxsync-conformance";

impl Setup {
    /// The name prefix of every guest made: the pool's name and a dash.
    pub(crate) fn prefix(&self) -> String {
        format!("{}-", self.pool)
    }

    /// The sentence every guest made carries in its description, before its signed fields
    /// ([`Setup::marker_line`]).
    pub(crate) fn marker(&self) -> String {
        format!(
            "{}: a throwaway guest of proxsync's exercise; its next run deletes it",
            self.pool
        )
    }

    /// The line guest `vmid` (identity `identity`; none: a clone's, before PVE picks it)
    /// carries in its description: the sentence, this run, and the install key's signature.
    pub(crate) fn marker_line(&self, vmid: u32, identity: Option<&GuestId>) -> String {
        let run = (self.run.id.as_str(), self.run.started);
        ExerciseLine::signed(&self.key, &self.pool, run, vmid, identity).line(&self.marker())
    }
}

/// The evidence an exercise's delete needs, borrowed from `setup` and its owned strings.
pub(crate) fn marks<'a>(setup: &'a Setup, prefix: &'a str, marker: &'a str) -> ExerciseMarks<'a> {
    ExerciseMarks {
        pool: &setup.pool,
        prefix,
        marker,
        key: &setup.key,
        now: now_secs(),
    }
}

/// What a step expects of PVE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The request is done (its task, if any, ends `OK`).
    Done,
    /// A refusal (an answer or a task's exit) in words `pve::texts` reads as this meaning, and
    /// that the client classifies in the meaning's category.
    Refused(Meaning),
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Done => f.write_str("done"),
            Expect::Refused(m) => write!(f, "refused: {m:?}"),
        }
    }
}

/// How a step came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// As proxsync expects.
    AsExpected,
    /// As expected, with a remark (a VM without an OS ignores a reboot's ACPI request).
    Noted(String),
    /// Not as proxsync expects: what PVE answered.
    Differs(String),
    /// Not run, and why.
    NotRun(String),
}

/// One request and its answer.
#[derive(Debug, Clone)]
pub struct Step {
    /// `vm create`, `ct resize`, ...
    pub name: String,
    pub expected: Expect,
    /// The task type of the answer's UPID, if a task ran (`qmcreate`, `vzclone`, ...).
    pub task: Option<String>,
    /// From the request to the answer, or to its task's end.
    pub took: Duration,
    pub outcome: Outcome,
    /// The row of `pve::texts` PVE's words matched, if they were a refusal.
    pub text: Option<&'static str>,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let task = self
            .task
            .as_deref()
            .map(|t| format!(" [{t}]"))
            .unwrap_or_default();
        let took = format!("{:.1}s", self.took.as_secs_f64());
        match &self.outcome {
            Outcome::AsExpected => {
                write!(f, "ok   {}{task}: {} in {took}", self.name, self.expected)
            }
            Outcome::Noted(n) => write!(
                f,
                "ok   {}{task}: {} in {took} ({n})",
                self.name, self.expected
            ),
            Outcome::Differs(got) => write!(
                f,
                "DIFF {}{task}: expected {}, PVE answered: {got} ({took})",
                self.name, self.expected
            ),
            Outcome::NotRun(why) => write!(f, "skip {}: {why}", self.name),
        }
    }
}

/// Every step of a run, in order.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub steps: Vec<Step>,
}

impl Report {
    /// The steps whose answer was not as proxsync expects.
    pub fn differences(&self) -> Vec<&Step> {
        self.steps
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Differs(_)))
            .collect()
    }

    /// The step named `name`, if it ran.
    #[cfg(test)]
    pub(crate) fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// Per task type, the shortest time a task of it took that ended as expected and `OK`.
    pub(crate) fn durations(&self) -> BTreeMap<String, Duration> {
        let mut out: BTreeMap<String, Duration> = BTreeMap::new();
        for step in &self.steps {
            let (Some(task), Expect::Done, Outcome::AsExpected) =
                (&step.task, step.expected, &step.outcome)
            else {
                continue;
            };
            out.entry(task.clone())
                .and_modify(|d| *d = (*d).min(step.took))
                .or_insert(step.took);
        }
        out
    }

    fn push(&mut self, step: Step) {
        tracing::info!("{step}");
        self.steps.push(step);
    }

    fn not_run(&mut self, name: &str, expected: Expect, why: impl Into<String>) {
        self.push(Step {
            name: name.to_string(),
            expected,
            task: None,
            took: Duration::ZERO,
            outcome: Outcome::NotRun(why.into()),
            text: None,
        });
    }
}

/// A call's answer that may name a task to wait for.
pub(crate) trait Answer {
    fn upid(self) -> Option<Upid>;
}

impl Answer for Upid {
    fn upid(self) -> Option<Upid> {
        Some(self)
    }
}

impl Answer for Option<Upid> {
    fn upid(self) -> Option<Upid> {
        self
    }
}

impl Answer for () {
    fn upid(self) -> Option<Upid> {
        None
    }
}

/// Runs the scenarios of `setup.scope` on `pve`: the sweep of the pool first, the scenarios,
/// the sweep again. Never panics; every answer is in the report.
pub async fn run(pve: &impl Pve, setup: &Setup) -> Report {
    let mut report = Report::default();
    sweep(pve, setup, &mut report).await;
    scenarios::vm(pve, setup, &mut report).await;
    scenarios::ct(pve, setup, &mut report).await;
    sweep(pve, setup, &mut report).await;
    report
}

/// Sends one request (its future), waits for its task, and records the step: whether the
/// answer is what `expected` says. `Ok(true)`: done.
pub(crate) async fn step<A: Answer>(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    name: &str,
    expected: Expect,
    request: impl std::future::Future<Output = Result<A, Error>>,
) -> bool {
    let began = tokio::time::Instant::now();
    step_from(pve, setup, report, (name, expected, began), request).await
}

/// [`step`], its duration counted from `began` (a task started before).
pub(crate) async fn step_from<A: Answer>(
    pve: &impl Pve,
    setup: &Setup,
    report: &mut Report,
    (name, expected, began): (&str, Expect, tokio::time::Instant),
    request: impl std::future::Future<Output = Result<A, Error>>,
) -> bool {
    let mut task = None;
    let answer = match request.await {
        Ok(a) => match a.upid() {
            Some(upid) => {
                task = Some(upid.kind.clone());
                match pve.wait_task(&upid, setup.task_timeout).await {
                    Ok(TaskOutcome::StillRunning) => Err(Judged::from(format!(
                        "its task {upid} still ran after {:?}",
                        setup.task_timeout
                    ))),
                    Ok(_) => Ok(()),
                    Err(e) => Err(judge_error(&e, expected)),
                }
            }
            None => Ok(()),
        },
        Err(e) => Err(judge_error(&e, expected)),
    };
    let took = began.elapsed();
    let (outcome, text, done) = match (answer, expected) {
        (Ok(()), Expect::Done) => (Outcome::AsExpected, None, true),
        (Ok(()), Expect::Refused(_)) => (Outcome::Differs("done".into()), None, true),
        (Err(Judged::Expected(row)), _) => (Outcome::AsExpected, Some(row), false),
        (Err(Judged::Differs(got, row)), _) => (Outcome::Differs(got), row, false),
    };
    report.push(Step {
        name: name.to_string(),
        expected,
        task,
        took,
        outcome,
        text,
    });
    done
}

/// A failed request's answer, judged against what was expected.
enum Judged {
    /// The refusal expected; the row of `pve::texts` its words matched.
    Expected(&'static str),
    /// Anything else: PVE's words (and their row, if any).
    Differs(String, Option<&'static str>),
}

impl From<String> for Judged {
    fn from(got: String) -> Judged {
        Judged::Differs(got, None)
    }
}

fn judge_error(e: &Error, expected: Expect) -> Judged {
    let words = e.pve_message();
    let row = texts::recognise(words).map(|t| t.pattern);
    let Expect::Refused(meaning) = expected else {
        return Judged::Differs(format!("{e}"), row);
    };
    let (Some(pattern), Some(got)) = (row, e.meaning()) else {
        return Judged::Differs(
            format!("{words:?}, words pve::texts does not know (expected {meaning:?})"),
            None,
        );
    };
    if got != meaning {
        return Judged::Differs(format!("{words:?}, which pve::texts reads as {got:?}"), row);
    }
    // The client's classifier must read the words as the table does.
    if let Some(category) = meaning.category()
        && e.category() != category
    {
        return Judged::Differs(
            format!(
                "{words:?}, classified {:?} where pve::texts says {category:?}",
                e.category()
            ),
            row,
        );
    }
    Judged::Expected(pattern)
}

/// Whether a text the suite provoked names the row `pattern` (for [`coverage`]).
pub(crate) fn provoked(report: &Report, pattern: &str) -> bool {
    report
        .steps
        .iter()
        .any(|s| s.text == Some(pattern) && s.outcome == Outcome::AsExpected)
}

#[cfg(test)]
mod tests;
