//! `proxsync wait`: until the given specs (or every spec of the applied commit) are Ready, or
//! gone, read from the status files the daemon writes (as `status` reads them), polled once a
//! second. No Proxmox VE call, nothing written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::*;
use crate::shell::status_view::{self, clean};
use crate::status::{ConditionStatus, SpecFile, kinds};

/// The exit status when a spec waited for is Stalled, invalid or suspended: it will not become
/// what is waited for without a person.
pub(crate) const EXIT_STALLED: u8 = 3;

/// The exit status when the timeout ran out first, as timeout(1)'s.
pub(crate) const EXIT_TIMEOUT: u8 = 124;

/// How often the status files are read again.
const POLL: Duration = Duration::from_secs(1);

/// What is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum For {
    /// `Ready` is True.
    Ready,
    /// The spec's status file is gone: its guest deleted (or released) after its spec left git.
    Deleted,
}

/// `proxsync wait`'s arguments.
pub(crate) struct Args {
    pub names: Vec<String>,
    pub until: For,
    pub timeout: Duration,
    /// A commit (7 to 40 hex digits) the daemon must have applied first.
    pub commit: Option<String>,
}

/// Where one spec stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stand {
    /// What is waited for holds.
    Done(String),
    /// Not yet: why.
    Pending(String),
    /// Never without a person: why.
    Failed(String),
}

pub(crate) fn wait_cmd(config_path: Option<PathBuf>, args: Args) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let names = match names(&config, &args) {
        Ok(n) => n,
        Err(code) => return code,
    };
    let daemon = daemon_state(&config);
    if !daemon.running {
        eprintln!(
            "warning: the daemon is not running ({}): nothing changes until it runs",
            clean(daemon.reason.as_deref().unwrap_or("it did not answer"))
        );
    }
    let start = Instant::now();
    let mut shown: BTreeMap<String, Stand> = BTreeMap::new();
    let mut applied = AppliedCheck::default();
    loop {
        let (gate, stands) = look(&config, &args, &names, &mut applied);
        let elapsed = status_view::human(start.elapsed());
        let mut changed = |key: &str, stand: &Stand, line: String| {
            if shown.get(key) != Some(stand) {
                println!("{elapsed:>4}  {line}");
                shown.insert(key.to_string(), stand.clone());
            }
        };
        match &gate {
            Some(line) => changed("", &Stand::Pending(line.clone()), line.clone()),
            None => {
                for (name, stand) in &stands {
                    let (Stand::Done(w) | Stand::Pending(w) | Stand::Failed(w)) = stand;
                    changed(name, stand, format!("{name}: {w}"));
                }
                if let Some(code) = verdict(&stands, args.until, start) {
                    return code;
                }
            }
        }
        if start.elapsed() >= args.timeout {
            timed_out(gate.as_deref(), &stands, args.timeout);
            return ExitCode::from(EXIT_TIMEOUT);
        }
        let left = args.timeout.saturating_sub(start.elapsed());
        std::thread::sleep(POLL.min(left).max(Duration::from_millis(10)));
    }
}

/// The specs waited for: the names given, checked against the source (read once; when it
/// cannot be read here, the status files tell), or every spec of the source this install
/// reconciles. Empty: every spec status file but a removed spec's.
fn names(config: &Config, args: &Args) -> Result<Vec<String>, ExitCode> {
    if let Some(c) = &args.commit
        && (c.len() < 7 || c.len() > 40 || !c.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        eprintln!(
            "error: {:?} is not a commit id: name the commit by its id (7 to 40 hex digits)",
            clean(c)
        );
        return Err(ExitCode::FAILURE);
    }
    if args.until == For::Deleted && args.names.is_empty() {
        eprintln!("error: --for deleted needs the names of the specs waited for");
        return Err(ExitCode::FAILURE);
    }
    let read = crate::source::read_configured(config, crate::source::Use::Inspect).ok();
    let mut names: Vec<String> = Vec::new();
    for name in &args.names {
        if names.contains(name) {
            continue;
        }
        // A spec waited to be deleted is no spec of the source any more.
        if args.until == For::Ready
            && let Some(read) = &read
            && let Err(e) = spec_of(config, read, name)
        {
            eprintln!("error: {}", clean(&e));
            return Err(ExitCode::FAILURE);
        }
        names.push(name.clone());
    }
    if names.is_empty()
        && let Some(read) = &read
    {
        let set = &read.specs;
        let valid = (set.specs.iter())
            .filter(|s| config.selects(&s.labels))
            .map(|s| s.name.to_string());
        names = valid
            .chain(set.invalid_names().into_iter().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
    }
    Ok(names)
}

/// The exit once every spec is done, or one failed; `None` while some are pending.
fn verdict(stands: &[(String, Stand)], until: For, start: Instant) -> Option<ExitCode> {
    let failed: Vec<(&String, &String)> = (stands.iter())
        .filter_map(|(n, s)| match s {
            Stand::Failed(why) => Some((n, why)),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        for (name, why) in &failed {
            eprintln!("error: {name}: {why}");
        }
        eprintln!(
            "error: {} spec(s) will not be {} without a person: exit {EXIT_STALLED}",
            failed.len(),
            word(until)
        );
        return Some(ExitCode::from(EXIT_STALLED));
    }
    if stands.iter().all(|(_, s)| matches!(s, Stand::Done(_))) {
        println!(
            "{} spec(s) {} after {}",
            stands.len(),
            word(until),
            status_view::human(start.elapsed())
        );
        return Some(ExitCode::SUCCESS);
    }
    None
}

/// Says on stderr what was still awaited when the timeout ran out.
fn timed_out(gate: Option<&str>, stands: &[(String, Stand)], timeout: Duration) {
    eprintln!(
        "error: timed out after {}; still waiting for:",
        status_view::human(timeout)
    );
    if let Some(line) = gate {
        eprintln!("  {line}");
        return;
    }
    for (name, stand) in stands {
        if let Stand::Pending(why) = stand {
            eprintln!("  {name}: {why}");
        }
    }
}

fn word(until: For) -> &'static str {
    match until {
        For::Ready => "Ready",
        For::Deleted => "deleted",
    }
}

/// The last answer of [`crate::source::applied_includes`], by the applied commit it was for.
#[derive(Default)]
struct AppliedCheck {
    last: Option<(String, Option<bool>)>,
}

/// One read: a line when the daemon has not applied the commit waited for yet (nothing else is
/// judged then), else each spec's stand, by name.
fn look(
    config: &Config,
    args: &Args,
    names: &[String],
    applied: &mut AppliedCheck,
) -> (Option<String>, Vec<(String, Stand)>) {
    let dir = &config.status_dir;
    let summary = status_view::summary_file(dir).ok().flatten();
    if let Some(wanted) = &args.commit {
        let commit = summary.as_ref().and_then(|s| s.commit.clone());
        let Some(commit) = commit else {
            return (
                Some(format!(
                    "waiting for commit {wanted}: the daemon has applied no commit yet"
                )),
                Vec::new(),
            );
        };
        let answer = match &applied.last {
            Some((c, answer)) if *c == commit => *answer,
            _ => {
                let answer = match crate::source::applied_includes(config, &commit, wanted) {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot tell whether the commit is applied");
                        None
                    }
                };
                applied.last = Some((commit.clone(), answer));
                answer
            }
        };
        if answer != Some(true) {
            return (
                Some(format!(
                    "waiting for commit {wanted} to be applied (the daemon applied {})",
                    clean(commit.get(..12).unwrap_or(&commit))
                )),
                Vec::new(),
            );
        }
    }
    if names.is_empty() {
        if summary.is_none() {
            return (
                Some("waiting for the daemon's first cycle (no _summary.yaml yet)".into()),
                Vec::new(),
            );
        }
        let files = match status_view::spec_files(dir) {
            Ok((files, _)) => files,
            Err(e) => return (Some(clean(&e.to_string())), Vec::new()),
        };
        let stands = files
            .iter()
            // A removed spec's file stays while its guest is deleted: no spec of the commit.
            .filter(|f| {
                args.until == For::Deleted
                    || f.condition(kinds::READY)
                        .is_none_or(|c| c.reason != crate::status::Reason::Deleting.as_str())
            })
            .map(|f| (f.name.clone(), judge(Some(f), args.until)))
            .collect();
        return (None, stands);
    }
    let stands = names
        .iter()
        .map(|name| {
            let stand = match status_view::spec_file(dir, name) {
                Ok(f) => judge(f.as_ref(), args.until),
                Err(e) => Stand::Pending(clean(&e.to_string())),
            };
            (name.clone(), stand)
        })
        .collect();
    (None, stands)
}

/// Where a spec stands by its status file (`None`: it has none).
fn judge(file: Option<&SpecFile>, until: For) -> Stand {
    let Some(f) = file else {
        return match until {
            For::Ready => Stand::Pending("no status yet (the daemon has not seen the spec)".into()),
            For::Deleted => Stand::Done("deleted".into()),
        };
    };
    let is_true = |kind: &str| {
        f.condition(kind)
            .filter(|c| c.status == ConditionStatus::True)
    };
    let said = |c: &crate::status::Condition| {
        if c.message.is_empty() {
            clean(&c.reason)
        } else {
            format!("{}: {}", clean(&c.reason), clean(&c.message))
        }
    };
    if until == For::Ready && is_true(kinds::READY).is_some() {
        return Stand::Done("Ready".into());
    }
    // Waiting for a deletion, only the deletion's own stall counts: a spec's file keeps what
    // was true of it before it left git until the daemon gets to it.
    let deleting = f
        .condition(kinds::READY)
        .is_some_and(|c| c.reason == crate::status::Reason::Deleting.as_str());
    if let Some(c) = is_true(kinds::STALLED).filter(|_| until == For::Ready || deleting) {
        return Stand::Failed(format!("Stalled ({})", said(c)));
    }
    if let Some(c) = is_true(kinds::SUSPENDED).filter(|_| until == For::Ready || deleting) {
        return Stand::Failed(format!(
            "suspended ({}): nothing is done until `proxsync resume`",
            said(c)
        ));
    }
    let ready = f.condition(kinds::READY);
    let why = match ready {
        Some(c) => format!("not Ready ({})", said(c)),
        None => "not Ready (no Ready condition yet)".into(),
    };
    match until {
        For::Ready => Stand::Pending(why),
        For::Deleted => Stand::Pending(format!("still there, {why}")),
    }
}
