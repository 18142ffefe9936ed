//! `proxsync events`: what the daemon did and what changed, one line each, from the status
//! files (as `status` reads them): each spec's attempts (its `history`, with the PVE task each
//! ran), its last task, and its conditions' transitions. With `--follow` the files are read
//! again every second and what is new is printed: a condition whose status or reason changed
//! since the last read, a new attempt or task, a spec whose file appeared or went away. No
//! Proxmox VE call, nothing written.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use super::*;
use crate::shell::status_view::{self, clean};
use crate::status::{ConditionStatus, SpecFile};

/// How often `--follow` reads the status files again.
const POLL: Duration = Duration::from_secs(1);

/// `proxsync events`'s arguments.
pub(crate) struct Args {
    pub follow: bool,
    /// Only events this recent (of the first read; later ones are new).
    pub since: Option<Duration>,
    /// Only these specs (none: every spec).
    pub specs: Vec<String>,
    pub json: bool,
}

/// One event, as `--json` prints it (one object per line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Event {
    /// RFC 3339.
    time: String,
    spec: String,
    /// `action`, `task`, `condition` or `removed`.
    kind: &'static str,
    message: String,
    /// The UPIDs of the PVE tasks an attempt ran, or of the last task.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tasks: Vec<String>,
    /// A condition's type, status and reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    condition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl Event {
    fn new(time: &str, spec: &str, kind: &'static str, message: String) -> Event {
        Event {
            time: time.to_string(),
            spec: spec.to_string(),
            kind,
            message,
            tasks: Vec::new(),
            condition: None,
            status: None,
            reason: None,
        }
    }

    /// One line for a terminal: every string from a file cleaned of what could drive it.
    fn line(&self) -> String {
        let mut line = format!(
            "{}  {}  {:<9}  {}",
            clean(&self.time),
            clean(&self.spec),
            self.kind,
            clean(&self.message)
        );
        match self.tasks.as_slice() {
            [] => {}
            [task] => line.push_str(&format!("  (task {})", clean(task))),
            tasks => {
                let tasks: Vec<String> = tasks.iter().map(|t| clean(t)).collect();
                line.push_str(&format!("  (tasks {})", tasks.join(", ")));
            }
        }
        line
    }

    /// One line of JSON, escaped for a terminal as `status --json` is.
    fn json(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        status_view::json_for_terminal(text)
    }
}

/// What has been printed, to tell what is new at the next read.
#[derive(Default)]
struct Seen {
    /// Attempts and tasks, by their own identity.
    keys: BTreeSet<String>,
    /// Each spec's conditions: type -> (status, reason).
    conditions: BTreeMap<String, BTreeMap<String, (ConditionStatus, String)>>,
}

pub(crate) fn events_cmd(config_path: Option<PathBuf>, args: Args) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let since = args
        .since
        .and_then(|d| crate::util::clock::system_now().checked_sub(d));
    let mut seen = Seen::default();
    let mut first = true;
    loop {
        let files = match status_view::spec_files(&config.status_dir) {
            Ok((files, _)) => files,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let files: Vec<SpecFile> = files
            .into_iter()
            .filter(|f| args.specs.is_empty() || args.specs.contains(&f.name))
            .collect();
        let mut events = new_events(&files, &mut seen, first);
        if first {
            events.retain(|e| {
                since.is_none_or(|since| {
                    crate::status::parse_rfc3339(&e.time).is_none_or(|t| t >= since)
                })
            });
        }
        events.sort_by(|a, b| a.time.cmp(&b.time).then_with(|| a.spec.cmp(&b.spec)));
        let mut out = std::io::stdout().lock();
        for e in &events {
            let text = if args.json { e.json() } else { e.line() + "\n" };
            // A reader that stops (`| head`) ends the command.
            if out.write_all(text.as_bytes()).is_err() {
                return ExitCode::SUCCESS;
            }
        }
        if out.flush().is_err() || !args.follow {
            return ExitCode::SUCCESS;
        }
        drop(out);
        first = false;
        std::thread::sleep(POLL);
    }
}

/// The events of `files` not seen before; the first read gives each condition's last
/// transition, a later one each condition whose status or reason changed since.
fn new_events(files: &[SpecFile], seen: &mut Seen, first: bool) -> Vec<Event> {
    let mut events = Vec::new();
    let now = crate::status::rfc3339(crate::util::clock::system_now());
    for f in files {
        let name = &f.name;
        let tasks_named: BTreeSet<&str> = (f.history.iter())
            .flat_map(|h| h.tasks.iter().map(String::as_str))
            .collect();
        for h in f.history.iter().rev() {
            let key = format!("a\0{name}\0{}\0{}\0{}", h.at, h.action, h.outcome);
            if seen.keys.insert(key) {
                let mut e = Event::new(
                    &h.at,
                    name,
                    "action",
                    format!("{}: {}", h.action, h.outcome),
                );
                e.tasks = h.tasks.clone();
                events.push(e);
            }
        }
        // The last task, unless an attempt above names it (one still running, or one an
        // attempt of an older release ran).
        if let Some(t) = f
            .last_task
            .as_ref()
            .filter(|t| !tasks_named.contains(t.upid.as_str()))
        {
            let key = format!("t\0{name}\0{}\0{}", t.upid, t.status);
            if seen.keys.insert(key) {
                let mut e = Event::new(&t.at, name, "task", format!("{} {}", t.kind, t.status));
                e.tasks = vec![t.upid.clone()];
                events.push(e);
            }
        }
        let before = seen.conditions.entry(name.clone()).or_default();
        for c in &f.conditions {
            let now_is = (c.status, c.reason.clone());
            let was = before.insert(c.kind.clone(), now_is.clone());
            if was.as_ref() == Some(&now_is) {
                continue;
            }
            // Not yet known is no transition.
            if was.is_none() && c.status == ConditionStatus::Unknown {
                continue;
            }
            // A new reason under the same status keeps lastTransitionTime: when the file says
            // it changed is the time then.
            let status_changed = was.as_ref().is_none_or(|(s, _)| *s != c.status);
            let time = if first || status_changed {
                c.last_transition_time.clone()
            } else {
                f.updated_at.clone().unwrap_or_else(|| now.clone())
            };
            let mut message = format!("{}={} {}", c.kind, c.status.as_str(), c.reason);
            if !c.message.is_empty() {
                message.push_str(": ");
                message.push_str(&c.message);
            }
            let mut e = Event::new(&time, name, "condition", message);
            e.condition = Some(c.kind.clone());
            e.status = Some(c.status.as_str());
            e.reason = Some(c.reason.clone());
            events.push(e);
        }
    }
    // A spec whose file went away: its guest deleted or released after it left git.
    let names: BTreeSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
    let gone: Vec<String> = (seen.conditions.keys())
        .filter(|n| !names.contains(n.as_str()))
        .cloned()
        .collect();
    for name in gone {
        seen.conditions.remove(&name);
        if !first {
            events.push(Event::new(
                &now,
                &name,
                "removed",
                "status file removed: the spec left git and its guest was deleted or released"
                    .into(),
            ));
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{AttemptRecord, Condition, TaskRecord};

    fn file(message: &str) -> SpecFile {
        SpecFile {
            name: "web-01".into(),
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: ConditionStatus::False,
                reason: "Failed".into(),
                message: message.into(),
                last_transition_time: "2025-03-01T12:00:00Z".into(),
            }],
            last_task: Some(TaskRecord {
                upid: "UPID:pve1:1:2:3:qmclone:9000:x:".into(),
                kind: "qmclone".into(),
                status: "OK".into(),
                at: "2025-03-01T11:59:00Z".into(),
            }),
            history: vec![AttemptRecord {
                at: "2025-03-01T11:59:30Z".into(),
                action: "create".into(),
                outcome: message.into(),
                tasks: vec!["UPID:pve1:1:2:3:qmclone:9000:x:".into()],
                took_ms: None,
            }],
            ..SpecFile::default()
        }
    }

    /// A guest's or PVE's words cannot drive the terminal: no control character, bidi
    /// override or C1 control reaches it, in text or JSON.
    #[test]
    fn hostile_text_stays_text() {
        let hostile = "boom\u{1b}]0;owned\u{7}\u{1b}[2J\r\nforged line\u{9b}31m\u{202e}";
        let events = new_events(&[file(hostile)], &mut Seen::default(), true);
        assert_eq!(events.len(), 2, "{events:?}");
        for e in &events {
            let line = e.line();
            assert!(!line.chars().any(status_view::is_unsafe), "{line:?}");
            let json = e.json();
            assert!(
                json.ends_with('\n') && json.matches('\n').count() == 1,
                "{json:?}"
            );
            assert!(
                !json.trim_end().chars().any(status_view::is_unsafe),
                "{json:?}"
            );
            assert!(json.contains("\\u001b"), "{json}");
        }
        // The task an attempt names is not told twice.
        assert!(events.iter().all(|e| e.kind != "task"));
        let action = events.iter().find(|e| e.kind == "action").unwrap();
        assert!(
            action
                .line()
                .contains("(task UPID:pve1:1:2:3:qmclone:9000:x:)"),
            "{action:?}"
        );
    }

    /// A later read tells only what changed: a new reason under the same status, a spec gone.
    #[test]
    fn a_later_read_tells_what_changed() {
        let mut seen = Seen::default();
        let mut f = file("no");
        assert_eq!(
            new_events(std::slice::from_ref(&f), &mut seen, true).len(),
            2
        );
        assert!(new_events(std::slice::from_ref(&f), &mut seen, false).is_empty());
        f.conditions[0].reason = "Creating".into();
        f.updated_at = Some("2025-03-01T12:05:00Z".into());
        let events = new_events(std::slice::from_ref(&f), &mut seen, false);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].time, "2025-03-01T12:05:00Z");
        assert!(
            events[0].message.starts_with("Ready=False Creating"),
            "{events:?}"
        );
        let events = new_events(&[], &mut seen, false);
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].kind, events[0].spec.as_str()),
            ("removed", "web-01")
        );
    }
}
