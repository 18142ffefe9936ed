//! `proxsync status [NAME] [--json]`: the status files (`docs/status.md`) rendered for a human
//! or a script.
//!
//! - Without a name: a summary of `_summary.yaml` (commit, counts, sites, last cycle), one row
//!   per spec file sorted by name, then the VMs of `_orphans.yaml`.
//! - With a name: every field of `<status_dir>/<name>.yaml`: conditions, last task, backoff,
//!   history.
//! - `--json`: the parsed files as JSON. For the list, `{"version": 2, "summary": {...} |
//!   null, "specs": [...], "orphans": [...], "skipped": [...]}` where `specs` holds the spec
//!   files sorted by name, `orphans` the entries of `_orphans.yaml` and `skipped` the files
//!   that could not be parsed (`{"file": path, "reason": text}`); for one spec, the spec file
//!   itself. Field names are those of the YAML files (camelCase).
//!
//! This module only reads: it never creates the status directory and never writes a file. A
//! file that cannot be parsed is skipped with a note (the daemon rewrites it at its next
//! cycle); nothing in here panics on any file content. Every free-text value is stripped of
//! control characters before it reaches the terminal, so a hostile message cannot move the
//! cursor or change colours. Colour (ANSI) is used only when [`ViewOptions::color`] is set.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

mod detail;
mod list;
mod text;

use detail::*;
use list::*;
pub(crate) use text::human;
use text::*;
pub(crate) use text::{clean, is_unsafe, json_for_terminal};

use crate::status::{
    BackoffRecord, Condition, ConditionStatus, ORPHANS_FILE, OrphanRecord, OrphansFile,
    SUMMARY_FILE, SpecFile, StatusDir, SummaryFile, kinds, parse_rfc3339,
};

/// The width the list view fits its lines into on a terminal whose width is not known (the
/// message column is cut).
pub(crate) const TARGET_WIDTH: usize = 120;

/// The message column is never cut below this many characters.
const MIN_MESSAGE_WIDTH: usize = 20;

/// Status files larger than this are not read (ours are a few KiB); as in `status.rs`.
const MAX_READ_BYTES: u64 = 1024 * 1024;

/// How much of a parse error a note repeats.
const MAX_NOTE_CHARS: usize = 200;

const HINT: &str = "is the daemon running? check status_dir in the config";

/// What to show and how.
#[derive(Debug, Clone)]
pub(crate) struct ViewOptions {
    /// One spec's details instead of the list.
    pub name: Option<String>,
    /// JSON instead of text.
    pub json: bool,
    /// ANSI colours (the CLI sets it when stdout is a terminal).
    pub color: bool,
    /// The time ages are computed against.
    pub now: SystemTime,
    /// Which specs the list shows (`--site`, `--node`, `--not-ready`).
    pub only: Only,
    /// The columns a line may take (a terminal's width); `None`: lines are never cut (not a
    /// terminal: a file or a pipe keeps every word).
    pub width: Option<usize>,
    /// The daemon's state, for the `--json` list (the text view's caller prints its line).
    pub daemon: Option<DaemonState>,
}

/// Which specs the list shows; every spec when all are unset.
#[derive(Debug, Clone, Default)]
pub(crate) struct Only {
    /// Only the specs of this site.
    pub site: Option<String>,
    /// Only the specs on this node.
    pub node: Option<String>,
    /// Only the specs whose Ready is not True.
    pub not_ready: bool,
}

impl Only {
    fn keeps(&self, site: &str, node: &str, conditions: &[Condition]) -> bool {
        let ready = (conditions.iter())
            .any(|c| c.kind == kinds::READY && c.status == ConditionStatus::True);
        self.site.as_deref().is_none_or(|s| s == site)
            && self.node.as_deref().is_none_or(|n| n == node)
            && !(self.not_ready && ready)
    }

    fn is_all(&self) -> bool {
        self.site.is_none() && self.node.is_none() && !self.not_ready
    }
}

/// The daemon as `status` finds it (its control socket): running since when with which PID,
/// or not running and why. In the `--json` list as `daemon`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DaemonState {
    /// Whether it answered on its control socket.
    pub running: bool,
    /// Its PID, when it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// When it started (RFC 3339), when it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Why it is taken as not running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why the status could not be shown.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ViewError {
    /// The status directory does not exist.
    #[error("status directory {} does not exist: {HINT}", path.display())]
    NoStatusDir { path: PathBuf },
    /// The status directory is something else.
    #[error("{} is not a directory: check status_dir in the config", path.display())]
    NotADirectory { path: PathBuf },
    /// Reading a file or the directory failed.
    #[error("{}: {source}{}", path.display(), io_hint(source))]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// NAME is not a spec name, so it cannot have a status file.
    #[error(
        "{name:?} is not a spec name (1-63 characters of a-z, 0-9 and '-', starting and \
         ending with a letter or digit); `proxsync status` lists the specs"
    )]
    InvalidName { name: String },
    /// No status file for NAME.
    #[error(
        "no status file {} for spec {name:?}: the daemon has not seen a spec of that name \
         (spelling? `proxsync status` lists the specs; {HINT})",
        path.display()
    )]
    NoSuchSpec { name: String, path: PathBuf },
    /// NAME's status file cannot be parsed.
    #[error(
        "{} cannot be read: {reason} (the daemon rewrites it at its next cycle; \
         `proxsync reconcile {name}` asks for one now)",
        path.display()
    )]
    Corrupt {
        name: String,
        path: PathBuf,
        reason: String,
    },
    /// Rendering JSON failed (not expected).
    #[error("could not render JSON: {0}")]
    Json(#[from] serde_json::Error),
}

fn io_hint(e: &io::Error) -> &'static str {
    if e.kind() == io::ErrorKind::PermissionDenied {
        " (run as root, or as a member of the proxsync group)"
    } else {
        ""
    }
}

/// Renders the status files of `status_dir` as `opts` asks. The text ends with a newline.
pub(crate) fn render(status_dir: &Path, opts: &ViewOptions) -> Result<String, ViewError> {
    check_dir(status_dir)?;
    match &opts.name {
        Some(name) => render_one(status_dir, name, opts),
        None => render_list(status_dir, opts),
    }
}

/// The spec status files of `status_dir`, parsed as the `--json` list reads them (sorted by
/// name), and a note for each file left out or renamed (for stderr). What `proxsync inventory`
/// is built from.
pub(crate) fn spec_files(status_dir: &Path) -> Result<(Vec<SpecFile>, Vec<String>), ViewError> {
    check_dir(status_dir)?;
    let listing = load_listing::<SpecFile>(status_dir, &Only::default())?;
    Ok((listing.specs, listing.notes))
}

/// One spec's status file, `None` when there is none (yet, or no more); a damaged one is
/// [`ViewError::Corrupt`]. What `proxsync wait NAME` polls: one file, not the directory.
pub(crate) fn spec_file(status_dir: &Path, name: &str) -> Result<Option<SpecFile>, ViewError> {
    check_dir(status_dir)?;
    // No file of ours has another name (nor a path in it).
    if !is_spec_name(name) {
        return Ok(None);
    }
    let path = status_dir.join(format!("{name}.yaml"));
    match load::<SpecFile>(&path)? {
        Loaded::Parsed(f) => Ok(Some(f)),
        Loaded::Missing => Ok(None),
        Loaded::Corrupt(reason) => Err(ViewError::Corrupt {
            name: name.to_string(),
            path,
            reason,
        }),
    }
}

/// `_summary.yaml`, `None` until the daemon finished a cycle (or while it cannot be parsed).
pub(crate) fn summary_file(status_dir: &Path) -> Result<Option<SummaryFile>, ViewError> {
    check_dir(status_dir)?;
    match load::<SummaryFile>(&status_dir.join(SUMMARY_FILE))? {
        Loaded::Parsed(s) => Ok(Some(s)),
        Loaded::Missing | Loaded::Corrupt(_) => Ok(None),
    }
}

/// The status directory exists and is a directory; it is never created (StatusDir::open would).
fn check_dir(status_dir: &Path) -> Result<(), ViewError> {
    match std::fs::metadata(status_dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(ViewError::NotADirectory {
                path: status_dir.to_path_buf(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ViewError::NoStatusDir {
                path: status_dir.to_path_buf(),
            });
        }
        Err(source) => {
            return Err(ViewError::Io {
                path: status_dir.to_path_buf(),
                source,
            });
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Loading
// ------------------------------------------------------------------------------------------

/// A file that could not be parsed and was left out.
#[derive(Debug, Clone, Serialize)]
struct Skipped {
    file: String,
    reason: String,
}

enum Loaded<T> {
    Missing,
    Parsed(T),
    Corrupt(String),
}

/// Reads and parses one status file; parse problems are [`Loaded::Corrupt`], only I/O errors
/// other than "not found" are errors.
fn load<T: DeserializeOwned>(path: &Path) -> Result<Loaded<T>, ViewError> {
    let io_err = |source| ViewError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(e) => return Err(io_err(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_READ_BYTES {
        return Ok(Loaded::Corrupt("larger than 1 MiB".to_string()));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(Loaded::Corrupt("not UTF-8".to_string()));
    };
    match serde_saphyr::from_str::<T>(&text) {
        Ok(v) => Ok(Loaded::Parsed(v)),
        Err(e) => {
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("").trim();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            Ok(Loaded::Corrupt(cut(
                &clean(&format!("not a valid status file: {first}")),
                MAX_NOTE_CHARS,
            )))
        }
    }
}

/// A spec name is a lowercase DNS label (the status file's stem).
fn is_spec_name(name: &str) -> bool {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(inner)
        && b.last().is_some_and(inner)
        && b.iter().all(|c| inner(c) || *c == b'-')
}

/// What one row of the text list shows of a spec's status file. The rest of the file (last
/// task, history, addresses, ...) is skipped by the parser without being built: at 10,000 specs
/// parsing is nearly all of `proxsync status`, and building the whole [`SpecFile`] about
/// a fifth of it. A value of an unprinted field that [`SpecFile`] would refuse (a damaged
/// file) does not hide the row; the `--json` list, which prints every field, still reads the
/// whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SpecRow {
    name: String,
    site: String,
    node: String,
    vm_id: Option<u32>,
    state: String,
    conditions: Vec<Condition>,
    backoff: Option<BackoffRecord>,
}

impl SpecRow {
    fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

/// A parsed spec status file as the list holds it: [`SpecRow`] or the whole [`SpecFile`].
trait Named: DeserializeOwned + Send {
    /// Whether `_index.jsonl` holds what the list needs of this (its rows, not whole files).
    const IN_INDEX: bool;
    fn name(&self) -> &str;
    fn name_mut(&mut self) -> &mut String;
    /// Whether the list shows it (`--site`, `--node`, `--not-ready`).
    fn shown(&self, only: &Only) -> bool;
}

impl Named for SpecRow {
    const IN_INDEX: bool = true;
    fn name(&self) -> &str {
        &self.name
    }
    fn name_mut(&mut self) -> &mut String {
        &mut self.name
    }
    fn shown(&self, only: &Only) -> bool {
        only.keeps(&self.site, &self.node, &self.conditions)
    }
}

impl Named for SpecFile {
    const IN_INDEX: bool = false;
    fn name(&self) -> &str {
        &self.name
    }
    fn name_mut(&mut self) -> &mut String {
        &mut self.name
    }
    fn shown(&self, only: &Only) -> bool {
        only.keeps(&self.site, &self.node, &self.conditions)
    }
}

/// Everything the list view shows; `T` is what is kept of each spec file.
struct Listing<T> {
    summary: Option<SummaryFile>,
    specs: Vec<T>,
    orphans: Vec<OrphanRecord>,
    skipped: Vec<Skipped>,
    notes: Vec<String>,
}

fn load_listing<T: Named>(dir: &Path, only: &Only) -> Result<Listing<T>, ViewError> {
    let sd = StatusDir::open(dir).map_err(|source| ViewError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let names = sd.spec_names().map_err(|e| match e {
        crate::status::StatusError::Io { path, source } => ViewError::Io { path, source },
        other => ViewError::Io {
            path: dir.to_path_buf(),
            source: io::Error::other(other.to_string()),
        },
    })?;
    let mut listing = Listing {
        summary: None,
        specs: Vec::new(),
        orphans: Vec::new(),
        skipped: Vec::new(),
        notes: Vec::new(),
    };
    let skip = |listing: &mut Listing<T>, path: &Path, reason: String| {
        listing.notes.push(format!(
            "skipped {}: {reason} (the daemon rewrites it at its next cycle)",
            clean(&path.display().to_string())
        ));
        listing.skipped.push(Skipped {
            file: path.display().to_string(),
            reason,
        });
    };

    let path = dir.join(SUMMARY_FILE);
    match load::<SummaryFile>(&path)? {
        Loaded::Parsed(s) => listing.summary = Some(s),
        Loaded::Missing => listing.notes.push(format!(
            "no {SUMMARY_FILE} yet: the daemon has not finished a cycle ({HINT})"
        )),
        Loaded::Corrupt(reason) => skip(&mut listing, &path, reason),
    }

    // The daemon's index, when it is as new as the directory: one file instead of one per spec.
    let indexed = T::IN_INDEX
        .then(|| crate::status::index::read_rows::<T>(dir, T::name))
        .flatten();
    if let Some(rows) = indexed {
        listing
            .specs
            .extend(rows.into_values().filter(|r| r.shown(only)));
        listing.orphans = load_orphans(dir, &mut listing, skip)?;
        return Ok(listing);
    }

    // Parsing 10,000 status files is nearly all of `proxsync status`: side by side.
    let loaded = crate::util::par::map(names, |name| {
        let path = dir.join(format!("{name}.yaml"));
        let file = load::<T>(&path);
        (name, path, file)
    });
    for (name, path, file) in loaded {
        match file? {
            Loaded::Parsed(mut f) => {
                let named = f.name_mut();
                if *named != name {
                    listing.notes.push(format!(
                        "{} names spec {:?}; shown as {name}",
                        clean(&path.display().to_string()),
                        clean(named)
                    ));
                    *named = name;
                }
                if f.shown(only) {
                    listing.specs.push(f);
                }
            }
            // Removed between the listing and the read: the spec is gone.
            Loaded::Missing => {}
            Loaded::Corrupt(reason) => skip(&mut listing, &path, reason),
        }
    }

    listing.orphans = load_orphans(dir, &mut listing, skip)?;
    Ok(listing)
}

/// `_orphans.yaml`'s entries (none when it is missing; skipped when corrupt).
fn load_orphans<T>(
    dir: &Path,
    listing: &mut Listing<T>,
    skip: impl Fn(&mut Listing<T>, &Path, String),
) -> Result<Vec<OrphanRecord>, ViewError> {
    let path = dir.join(ORPHANS_FILE);
    Ok(match load::<OrphansFile>(&path)? {
        Loaded::Parsed(o) => o.orphans,
        Loaded::Missing => Vec::new(),
        Loaded::Corrupt(reason) => {
            skip(listing, &path, reason);
            Vec::new()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{
        BackoffSummary, ConditionInput, OrphanEntry, Reason, SiteSummary, SpecStatus,
        SummaryStatus, TaskSummary,
    };
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    const T0: u64 = 1_740_830_400; // 2025-03-01T12:00:00Z
    const COMMIT: &str = "3f2c9a1e0b7d4c6a8e5f1a2b3c4d5e6f7a8b9c0d";

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn now() -> SystemTime {
        t(T0 + 300)
    }

    fn opts(name: Option<&str>, json: bool, color: bool) -> ViewOptions {
        ViewOptions {
            name: name.map(str::to_string),
            json,
            color,
            now: now(),
            only: Only::default(),
            width: Some(TARGET_WIDTH),
            daemon: None,
        }
    }

    fn c(
        kind: &'static str,
        status: ConditionStatus,
        reason: Reason,
        message: &str,
    ) -> ConditionInput {
        ConditionInput::new(kind, status, reason, message)
    }

    use ConditionStatus::{False as F, True as T, Unknown as U};

    fn healthy(name: &str, site: &str, node: &str, vm_id: u32) -> SpecStatus {
        SpecStatus {
            name: name.to_string(),
            kind: Default::default(),
            template: false,
            site: site.into(),
            node: node.into(),
            vm_id: Some(vm_id),
            vm_name: name.into(),
            state: "running".into(),
            ip_addresses: vec!["10.0.0.5".into()],
            tags: vec![],
            labels: Default::default(),
            commit: Some(COMMIT.into()),
            spec_file: Some(format!("{site}/{name}.yaml")),
            provisioned: true,
            conditions: vec![
                c(kinds::READY, T, Reason::Available, ""),
                c(kinds::RECONCILING, F, Reason::UpToDate, ""),
                c(kinds::STALLED, F, Reason::NotStalled, ""),
                c(kinds::NODE_HEALTHY, T, Reason::NodeOnline, ""),
                c(kinds::PROVISIONED, T, Reason::Created, ""),
            ],
            last_task: Some(TaskSummary {
                upid: "UPID:pve1:000A1B2C:0B3C4D5E:67C2F0AA:qmstart:101:proxsync@pve!gitops:"
                    .into(),
                kind: "qmstart".into(),
                status: "OK".into(),
                at: t(T0 - 2 * 86_400),
            }),
            backoff: None,
            history: vec![crate::status::AttemptSummary {
                at: t(T0 - 2 * 86_400),
                action: "start".into(),
                outcome: "OK".into(),
                tasks: Vec::new(),
                took_ms: None,
            }],
            observed_generation: Some("sha256:9b1f".into()),
            drift: vec![],
        }
    }

    fn set(s: &mut SpecStatus, cond: ConditionInput) {
        s.conditions.retain(|x| x.kind != cond.kind);
        s.conditions.push(cond);
    }

    /// A status dir with one spec of each kind, a summary, orphans and a corrupt file.
    fn fixture() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("status");
        let mut sd = StatusDir::open(&dir).unwrap();

        // Ready for two days.
        let web = healthy("web-01", "us-sfvalley", "pve1", 101);
        sd.write_spec(&web, t(T0 - 2 * 86_400)).unwrap();

        // Stalled: the token lacks a privilege; failing for 3 hours.
        let mut db = healthy("db-01", "us-sfvalley", "pve2", 102);
        db.state = "absent".into();
        db.provisioned = false;
        set(&mut db, c(kinds::PROVISIONED, F, Reason::NotCreated, ""));
        set(&mut db, c(kinds::READY, F, Reason::Failed, "clone failed"));
        set(
            &mut db,
            c(
                kinds::STALLED,
                T,
                Reason::PermissionDenied,
                "403 Forbidden: Permission check failed (/vms/102, VM.Allocate)",
            ),
        );
        set(&mut db, c(kinds::RECONCILING, T, Reason::BackingOff, ""));
        db.backoff = Some(BackoffSummary {
            attempts: 7,
            next_attempt: t(T0 + 900),
            category: "PermissionDenied".into(),
            message: "403 Forbidden".into(),
        });
        db.last_task = None;
        db.history = vec![];
        sd.write_spec(&db, t(T0 - 3 * 3600)).unwrap();

        // Backing off, not stalled: the next attempt in 4 minutes.
        let mut cache = healthy("cache-fra-01", "eu-fra", "fra1", 201);
        set(
            &mut cache,
            c(kinds::READY, F, Reason::Failed, "connect timed out"),
        );
        set(
            &mut cache,
            c(kinds::RECONCILING, T, Reason::BackingOff, "retrying"),
        );
        cache.backoff = Some(BackoffSummary {
            attempts: 2,
            next_attempt: t(T0 + 300 + 240),
            category: "NetworkError".into(),
            message: "connect timed out".into(),
        });
        cache.history = vec![
            crate::status::AttemptSummary {
                at: t(T0 + 240),
                action: "configure".into(),
                outcome: "NetworkError: connect timed out".into(),
                tasks: Vec::new(),
                took_ms: None,
            },
            crate::status::AttemptSummary {
                at: t(T0 + 180),
                action: "configure".into(),
                outcome: "NetworkError: connect timed out".into(),
                tasks: Vec::new(),
                took_ms: None,
            },
        ];
        cache.drift = vec![
            crate::status::DriftRecord {
                field: "memory".into(),
                spec: "4096 MiB".into(),
                guest: "2048 MiB".into(),
                at_next_start: true,
            },
            crate::status::DriftRecord {
                field: "tags".into(),
                spec: "web".into(),
                guest: "\x1b]0;owned\x07web-old".into(),
                at_next_start: false,
            },
        ];
        sd.write_spec(&cache, t(T0 + 240)).unwrap();

        // Never observed: every condition Unknown.
        let new = SpecStatus {
            name: "new-01".into(),
            site: "eu-fra".into(),
            node: "fra1".into(),
            state: "unknown".into(),
            ..SpecStatus::default()
        };
        sd.write_spec(&new, t(T0 + 290)).unwrap();

        // An invalid spec.
        let mut bad = healthy("bad-01", "us-sfvalley", "pve1", 103);
        set(
            &mut bad,
            c(
                kinds::READY,
                F,
                Reason::InvalidSpec,
                "us-sfvalley/bad-01.yaml:9:13: error: cpu: expected an integer",
            ),
        );
        set(
            &mut bad,
            c(
                kinds::STALLED,
                T,
                Reason::ValidationFailed,
                "us-sfvalley/bad-01.yaml:9:13: error: cpu: expected an integer; run proxsync validate",
            ),
        );
        sd.write_spec(&bad, t(T0 - 60)).unwrap();

        sd.write_summary(&SummaryStatus {
            commit: Some(COMMIT.into()),
            source_error: None,
            refused_commit: None,
            specs: 5,
            ready: 1,
            stalled: 2,
            backing_off: 2,
            invalid: 1,
            sites: vec![
                SiteSummary {
                    name: "us-sfvalley".into(),
                    reachable: true,
                    quorate: true,
                    nodes_online: vec!["pve1".into(), "pve2".into()],
                    nodes_offline: vec![],
                    error: None,
                    parallel: vec![],
                },
                SiteSummary {
                    name: "eu-fra".into(),
                    reachable: false,
                    quorate: false,
                    nodes_online: vec![],
                    nodes_offline: vec![],
                    error: Some("connection refused".into()),
                    parallel: vec![],
                },
            ],
            last_cycle: t(T0 + 288),
            cycle_ms: 184,
            refused: vec![],
            last_request: None,
            notify_failures: vec![],
            rewind: None,
            sets: Vec::new(),
            images: Vec::new(),
            cycle: Default::default(),
        })
        .unwrap();
        sd.write_orphans(
            &[OrphanEntry {
                site: "us-sfvalley".into(),
                vm_id: 105,
                kind: Default::default(),
                node: "pve2".into(),
                name: Some("old-web".into()),
                state: "stopped".into(),
                first_seen: t(T0 - 3600),
                action: "will delete after 2025-03-01T12:10:00Z".into(),
                duplicate_of: None,
            }],
            t(T0),
        )
        .unwrap();
        // The list as it reads the files; `the_list_reads_the_index_while_it_is_current`
        // covers the daemon's index.
        std::fs::remove_file(dir.join(crate::status::index::INDEX_FILE)).unwrap();
        std::fs::write(dir.join("zz-junk.yaml"), "{{{{ not yaml").unwrap();
        (d, dir)
    }

    /// Sets `dir`'s time `secs` seconds after its index's, as a later write by anything but
    /// the daemon would.
    fn touch_after_index(dir: &Path, secs: u64) {
        let index = std::fs::metadata(dir.join(crate::status::index::INDEX_FILE))
            .and_then(|m| m.modified())
            .unwrap();
        std::fs::File::open(dir)
            .unwrap()
            .set_modified(index + Duration::from_secs(secs))
            .unwrap();
    }

    #[test]
    fn a_hostile_message_read_from_the_index_stays_in_its_row_and_cannot_drive_the_terminal() {
        let (_d, dir) = fixture();
        std::fs::remove_file(dir.join("zz-junk.yaml")).unwrap();
        let mut sd = StatusDir::open(&dir).unwrap();
        let mut web = healthy("web-01", "us-sfvalley", "pve1", 101);
        set(
            &mut web,
            c(
                kinds::READY,
                F,
                Reason::Failed,
                "boom\n{\"removed\":\"db-01\"}\n\u{1b}[2J\u{1b}]0;owned\u{7}",
            ),
        );
        sd.write_spec(&web, t(T0)).unwrap();
        sd.finish_writes();
        let index = std::fs::read_to_string(dir.join(crate::status::index::INDEX_FILE)).unwrap();
        assert!(
            index
                .lines()
                .all(|l| l.starts_with('{') && l.ends_with('}')),
            "one JSON value per line: {index}"
        );
        assert!(
            crate::status::index::is_current(&dir),
            "the list reads the index"
        );
        let text = render(&dir, &opts(None, false, false)).unwrap();
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(
            text.contains("db-01"),
            "a message cannot remove a row: {text}"
        );
        assert!(row(&text, "web-01").contains("boom"), "{text}");
    }

    #[test]
    fn the_list_reads_the_index_while_it_is_current() {
        let (_d, dir) = fixture();
        std::fs::remove_file(dir.join("zz-junk.yaml")).unwrap();
        let from_files = render(&dir, &opts(None, false, false)).unwrap();
        // The daemon's next cycle rebuilds the index (a new process: every file read once).
        let mut sd = StatusDir::open(&dir).unwrap();
        let web = healthy("web-01", "us-sfvalley", "pve1", 101);
        sd.write_spec(&web, t(T0 - 2 * 86_400)).unwrap();
        sd.finish_writes();
        assert!(dir.join(crate::status::index::INDEX_FILE).exists());
        assert_eq!(
            render(&dir, &opts(None, false, false)).unwrap(),
            from_files,
            "the same list from the index"
        );
        let filtered = opts(None, false, false);
        let filtered = ViewOptions {
            only: Only {
                not_ready: true,
                ..filtered.only
            },
            ..filtered
        };
        let from_index = render(&dir, &filtered).unwrap();
        assert!(!from_index.contains("web-01"), "{from_index}");
        assert!(from_index.contains("db-01"), "{from_index}");

        // A file changed in place (never by the daemon) is not seen while the index is current:
        // the list did not open it.
        std::fs::write(dir.join("db-01.yaml"), "{{{{ not yaml").unwrap();
        let text = render(&dir, &opts(None, false, false)).unwrap();
        assert!(
            cols(row(&text, "db-01")).contains(&"PermissionDenied"),
            "{text}"
        );
        // Anything written later makes the directory newer: the files are read again.
        touch_after_index(&dir, 2);
        let text = render(&dir, &opts(None, false, false)).unwrap();
        assert!(
            text.contains("db-01.yaml: not a valid status file"),
            "{text}"
        );
    }

    fn cols(line: &str) -> Vec<&str> {
        line.split_whitespace().collect()
    }

    fn row<'a>(text: &'a str, name: &str) -> &'a str {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name} in\n{text}"))
    }

    #[test]
    fn the_summary_says_how_many_actions_each_node_takes_at_once() {
        let site = |name: &str, parallel: &[(&str, u32)]| crate::status::SiteRecord {
            name: name.into(),
            parallel_per_node: parallel.iter().map(|(n, k)| (n.to_string(), *k)).collect(),
            ..Default::default()
        };
        assert_eq!(parallel_line(&[site("lab", &[])], Some(TARGET_WIDTH)), None);
        assert_eq!(
            parallel_line(
                &[
                    site("lab", &[("pve2", 2), ("pve1", 8)]),
                    site("edge", &[("e1", 1)])
                ],
                Some(TARGET_WIDTH)
            )
            .as_deref(),
            Some("lab/pve1 8, lab/pve2 2, edge/e1 1 (actions per node)")
        );
    }

    /// The summary's images: each with its version and state, a failure's words below, every
    /// value cleaned for the terminal (a name or PVE's message could hold escapes).
    #[test]
    fn list_shows_images_cleaned_for_the_terminal() {
        let (_d, dir) = fixture();
        let path = dir.join("_summary.yaml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(
            "images:\n- name: noble-cloud\n  version: 5f0c1a2b3c4d\n  volume: local:import/x.qcow2\n  \
             state: Ready\n- name: \"evil\\e[31m\"\n  version: \"aaaa\\e]8;;x\\a\"\n  volume: v\n  \
             state: Failed\n  message: \"checksum mismatch: got '\\e[2J' != expect 'b'\"\n",
        );
        std::fs::write(&path, text).unwrap();
        let out = render(&dir, &opts(None, false, false)).unwrap();
        assert!(!out.contains('\x1b') && !out.contains('\x07'), "{out:?}");
        let line = out.lines().find(|l| l.starts_with("Images:")).expect(&out);
        assert!(
            line.starts_with("Images:      noble-cloud 5f0c1a2b3c4d Ready; evil"),
            "{line}"
        );
        assert!(out.contains("checksum mismatch: got '"), "{out}");
    }

    #[test]
    fn list_shows_summary_rows_orphans_and_notes() {
        let (_d, dir) = fixture();
        let text = render(&dir, &opts(None, false, false)).unwrap();
        assert!(!text.contains('\x1b'), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Commit:      3f2c9a1", "{text}");
        assert_eq!(
            lines[1],
            "Specs:       5 (1 Ready, 2 Stalled, 2 backing off, 1 invalid)"
        );
        assert_eq!(
            lines[2],
            "Sites:       1/2 healthy (eu-fra: unreachable, connection refused)"
        );
        assert_eq!(lines[3], "Last cycle:  12s ago (took 184 ms)");
        assert_eq!(lines[4], "");
        assert_eq!(
            cols(lines[5]),
            [
                "NAME",
                "SITE/NODE",
                "VMID",
                "STATE",
                "READY",
                "REASON",
                "AGE",
                "MESSAGE"
            ]
        );
        // sorted by name
        let names: Vec<&str> = lines[6..11].iter().map(|l| cols(l)[0]).collect();
        assert_eq!(
            names,
            ["bad-01", "cache-fra-01", "db-01", "new-01", "web-01"]
        );

        assert_eq!(
            cols(row(&text, "web-01")),
            [
                "web-01",
                "us-sfvalley/pve1",
                "101",
                "running",
                "True",
                "Available",
                "2d"
            ]
        );
        assert_eq!(
            cols(row(&text, "new-01")),
            [
                "new-01",
                "eu-fra/fra1",
                "-",
                "unknown",
                "Unknown",
                "NotYetObserved",
                "10s"
            ]
        );
        // Stalled wins over Ready for the reason and message; backoff is shown.
        let db = row(&text, "db-01");
        assert_eq!(
            cols(db)[..7],
            [
                "db-01",
                "us-sfvalley/pve2",
                "102",
                "absent",
                "False",
                "PermissionDenied",
                "3h"
            ]
        );
        assert!(
            db.contains("  retry in 10m: 403 Forbidden: Permission ") && db.ends_with('…'),
            "{db}"
        );
        let cache = row(&text, "cache-fra-01");
        assert_eq!(
            cols(cache)[..7],
            [
                "cache-fra-01",
                "eu-fra/fra1",
                "201",
                "running",
                "False",
                "Failed",
                "1m"
            ]
        );
        assert!(cache.ends_with("retry in 4m: connect timed out"), "{cache}");
        let bad = row(&text, "bad-01");
        assert_eq!(cols(bad)[4..6], ["False", "ValidationFailed"]);
        assert!(bad.contains("bad-01.yaml:9:13: error: cpu"), "{bad}");

        // Columns line up: every row's READY starts where the header's does.
        let at = lines[5].find("READY").unwrap();
        for l in &lines[6..11] {
            assert!(
                ["True", "False", "Unknown"]
                    .iter()
                    .any(|w| l.get(at..).is_some_and(|r| r.starts_with(w))),
                "{l}"
            );
        }
        for l in &lines {
            assert!(
                l.starts_with("note: ") || l.chars().count() <= TARGET_WIDTH,
                "too wide: {l}"
            );
            assert_eq!(*l, l.trim_end());
        }

        assert!(
            text.contains(
                "\nOrphans (1): VMs carrying this install's tag that no spec describes (or a second VM of a spec)\n"
            ),
            "{text}"
        );
        assert_eq!(
            cols(row(&text, "us-sfvalley/pve2")),
            [
                "us-sfvalley/pve2",
                "105",
                "old-web",
                "stopped",
                "1h",
                "will",
                "delete",
                "after",
                "2025-03-01T12:10:00Z"
            ]
        );
        let note = lines.iter().find(|l| l.starts_with("note: ")).unwrap();
        assert!(
            note.contains("zz-junk.yaml: not a valid status file"),
            "{note}"
        );
        assert!(text.ends_with('\n'));
    }

    /// The text list reads only the fields it prints ([`SpecRow`]): a file written another way
    /// (keys in another order, flow style, a field this release does not know, no VMID) shows
    /// the same row as the daemon's own files would, and a damaged field the list does not
    /// print does not hide the row. The `--json` list prints every field, so it still skips
    /// that file.
    #[test]
    fn list_rows_read_only_the_printed_fields() {
        let (_d, dir) = fixture();
        std::fs::write(
            dir.join("odd-01.yaml"),
            r#"conditions: [{type: Stalled, status: "True", reason: QuotaExceeded, message: "no room", lastTransitionTime: "2025-03-01T11:00:00Z"}, {type: Ready, status: "False", reason: Failed, lastTransitionTime: "2025-03-01T11:00:00Z"}]
futureField: {nested: [1, 2]}
history: 7
state: absent
node: pve3
site: eu-fra
name: odd-01
backoff: {attempts: 2, nextAttempt: "2025-03-01T12:10:00Z", message: waiting}
"#,
        )
        .unwrap();
        let text = render(&dir, &opts(None, false, false)).unwrap();
        assert_eq!(
            cols(row(&text, "odd-01")),
            [
                "odd-01",
                "eu-fra/pve3",
                "-",
                "absent",
                "False",
                "QuotaExceeded",
                "1h",
                "retry",
                "in",
                "5m:",
                "no",
                "room"
            ],
            "{text}"
        );
        assert!(!text.contains("odd-01.yaml"), "not skipped: {text}");
        let json = render(&dir, &opts(None, true, false)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(
            v["skipped"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["file"].as_str().unwrap().ends_with("odd-01.yaml")),
            "{json}"
        );
    }

    #[test]
    fn colour_only_when_asked() {
        let (_d, dir) = fixture();
        let text = render(&dir, &opts(None, false, true)).unwrap();
        let web = row(&text, "web-01");
        assert!(web.contains("\x1b[32mTrue\x1b[0m"), "{web:?}");
        let db = row(&text, "db-01");
        assert!(db.contains("\x1b[31mFalse\x1b[0m"), "{db:?}");
        assert!(db.contains("\x1b[31mPermissionDenied\x1b[0m"), "{db:?}");
        let new = row(&text, "new-01");
        assert!(new.contains("\x1b[33mUnknown\x1b[0m"), "{new:?}");
        assert!(text.contains("\x1b[31m2 Stalled\x1b[0m"), "{text:?}");
        assert!(text.contains("\x1b[31m1/2 healthy\x1b[0m"), "{text:?}");
        // the same layout once the colour codes are removed
        let plain = render(&dir, &opts(None, false, false)).unwrap();
        let stripped = text
            .replace("\x1b[31m", "")
            .replace("\x1b[32m", "")
            .replace("\x1b[33m", "")
            .replace("\x1b[0m", "");
        assert_eq!(stripped, plain);
    }

    /// A Ready spec whose changes wait for a restart says so in its row, under the name its
    /// detail gives it; a suspended one is counted; the filters keep what they select.
    #[test]
    fn rows_show_a_pending_restart_and_the_filters_select() {
        let (_d, dir) = fixture();
        let mut sd = StatusDir::open(&dir).unwrap();
        let mut app = healthy("app-01", "eu-fra", "fra1", 202);
        set(
            &mut app,
            c(
                kinds::REBOOT_PENDING,
                T,
                Reason::PendingChanges,
                "memory take effect at the next start of the VM (proxsync does not reboot it)",
            ),
        );
        set(
            &mut app,
            c(kinds::SUSPENDED, T, Reason::Suspended, "by ops"),
        );
        sd.write_spec(&app, t(T0)).unwrap();

        let text = render(&dir, &opts(None, false, false)).unwrap();
        let r = row(&text, "app-01");
        assert_eq!(cols(r)[4..6], ["True", "RebootPending"], "{text}");
        assert!(r.contains("memory take effect at the next start"), "{r}");
        assert!(
            text.contains(
                "Specs:       5 (1 Ready, 2 Stalled, 2 backing off, 1 invalid, 1 suspended)"
            ),
            "{text}"
        );
        let detail = render(&dir, &opts(Some("app-01"), false, false)).unwrap();
        assert!(
            detail.contains("\nReason:       RebootPending\n"),
            "{detail}"
        );

        let only = |only: Only| {
            let o = ViewOptions {
                only,
                ..opts(None, false, false)
            };
            let text = render(&dir, &o).unwrap();
            let names: Vec<String> = (text.lines())
                .skip_while(|l| !l.starts_with("NAME"))
                .skip(1)
                .take_while(|l| !l.is_empty())
                .map(|l| cols(l)[0].to_string())
                .collect();
            names
        };
        let site = Only {
            site: Some("eu-fra".into()),
            ..Only::default()
        };
        assert_eq!(only(site), ["app-01", "cache-fra-01", "new-01"]);
        let node = Only {
            node: Some("pve2".into()),
            ..Only::default()
        };
        assert_eq!(only(node), ["db-01"]);
        let not_ready = Only {
            not_ready: true,
            ..Only::default()
        };
        assert_eq!(
            only(not_ready),
            ["bad-01", "cache-fra-01", "db-01", "new-01"]
        );
        let none = Only {
            site: Some("nowhere".into()),
            ..Only::default()
        };
        let o = ViewOptions {
            only: none,
            ..opts(None, false, false)
        };
        assert!(
            render(&dir, &o)
                .unwrap()
                .contains("No spec matches the filter.")
        );
    }

    /// An invalid spec's reason is named alike in its row and atop its detail.
    #[test]
    fn an_invalid_spec_has_one_reason_in_the_list_and_the_detail() {
        let (_d, dir) = fixture();
        let text = render(&dir, &opts(None, false, false)).unwrap();
        let reason = cols(row(&text, "bad-01"))[5].to_string();
        let detail = render(&dir, &opts(Some("bad-01"), false, false)).unwrap();
        assert!(
            detail.contains(&format!("\nReason:       {reason}\n")),
            "{detail}"
        );
    }

    /// Off a terminal nothing is cut; the JSON list carries the daemon's state.
    #[test]
    fn a_pipe_gets_every_word_and_the_json_the_daemon() {
        let (_d, dir) = fixture();
        let o = ViewOptions {
            width: None,
            ..opts(None, false, false)
        };
        let text = render(&dir, &o).unwrap();
        assert!(!text.contains('…'), "{text}");
        assert!(
            text.lines().any(|l| l.chars().count() > TARGET_WIDTH),
            "{text}"
        );
        let daemon = DaemonState {
            running: true,
            pid: Some(4242),
            since: Some("2025-03-01T11:00:00Z".into()),
            reason: None,
        };
        let o = ViewOptions {
            daemon: Some(daemon),
            ..opts(None, true, false)
        };
        let v: serde_json::Value = serde_json::from_str(&render(&dir, &o).unwrap()).unwrap();
        assert_eq!(v["daemon"]["running"], true);
        assert_eq!(v["daemon"]["pid"], 4242);
        assert_eq!(v["daemon"]["since"], "2025-03-01T11:00:00Z");
    }

    #[test]
    fn list_json_is_the_parsed_files() {
        let (_d, dir) = fixture();
        let text = render(&dir, &opts(None, true, true)).unwrap();
        assert!(!text.contains('\x1b'));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["orphans", "skipped", "specs", "summary", "version"]);
        assert_eq!(v["version"], 3);
        assert_eq!(v["summary"]["commit"], COMMIT);
        assert_eq!(v["summary"]["backingOff"], 2);
        assert_eq!(v["summary"]["lastCycle"], "2025-03-01T12:04:48Z");
        assert_eq!(v["summary"]["sites"][1]["error"], "connection refused");
        let names: Vec<&str> = v["specs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["bad-01", "cache-fra-01", "db-01", "new-01", "web-01"]
        );
        let db = &v["specs"][2];
        assert_eq!(db["vmId"], 102);
        assert_eq!(db["conditions"][2]["type"], "Stalled");
        assert_eq!(db["conditions"][2]["status"], "True");
        assert_eq!(db["conditions"][2]["reason"], "PermissionDenied");
        assert_eq!(db["backoff"]["nextAttempt"], "2025-03-01T12:15:00Z");
        assert!(v["specs"][3].get("vmId").is_none());
        assert_eq!(v["orphans"][0]["vmId"], 105);
        assert_eq!(v["orphans"][0]["kind"], "ProxmoxVM");
        assert_eq!(v["orphans"][0]["firstSeen"], "2025-03-01T11:00:00Z");
        assert!(
            v["skipped"][0]["file"]
                .as_str()
                .unwrap()
                .ends_with("zz-junk.yaml")
        );
        // Every spec equals the file parsed back by the status module.
        let sd = StatusDir::open(&dir).unwrap();
        for (i, name) in names.iter().enumerate() {
            let f = sd.read_spec(name).unwrap().unwrap();
            assert_eq!(v["specs"][i], serde_json::to_value(&f).unwrap(), "{name}");
        }
        // stable: the same files give the same bytes
        assert_eq!(text, render(&dir, &opts(None, true, false)).unwrap());
    }

    #[test]
    fn one_spec_in_detail() {
        let (_d, dir) = fixture();
        let text = render(&dir, &opts(Some("cache-fra-01"), false, false)).unwrap();
        assert!(!text.contains('\x1b'), "{text}");
        for want in [
            "Name:         cache-fra-01\n",
            "Site/Node:    eu-fra/fra1\n",
            "VMID:         201\n",
            "State:        running\n",
            "IP addresses: 10.0.0.5\n",
            "Commit:       3f2c9a1e0b7d4c6a8e5f1a2b3c4d5e6f7a8b9c0d\n",
            "Spec file:    eu-fra/cache-fra-01.yaml\n",
            "Generation:   sha256:9b1f\n",
            "Provisioned:  yes\n",
            "Updated:      2025-03-01T12:04:00Z (1m ago)\n",
            "\nConditions:\n  TYPE         STATUS  REASON      AGE  MESSAGE\n",
            "  Ready        False   Failed      1m   connect timed out\n",
            "  Reconciling  True    BackingOff  1m   retrying\n",
            "  Stalled      False   NotStalled  1m\n",
            "  NodeHealthy  True    NodeOnline  1m\n",
            "  Provisioned  True    Created     1m\n",
            "\nLast task:\n  UPID:         UPID:pve1:000A1B2C:0B3C4D5E:67C2F0AA:qmstart:101:proxsync@pve!gitops:\n",
            "  Type:         qmstart\n",
            "  Status:       OK\n",
            "  Started:      2025-02-27T12:00:00Z (2d ago)\n",
            "\nBackoff:\n  Attempts:     2\n",
            "  Next attempt: 2025-03-01T12:09:00Z (next attempt in 4m)\n",
            "  Category:     NetworkError\n",
            "  Message:      connect timed out\n",
            "\nHistory (most recent first):\n  AT                    AGE  ACTION     OUTCOME\n",
            "  2025-03-01T12:04:00Z  1m   configure  NetworkError: connect timed out\n",
            "  2025-03-01T12:03:00Z  2m   configure  NetworkError: connect timed out\n",
            "\nDrift (the spec against the guest as the cluster lists it):\n  FIELD   SPEC      GUEST",
            "  memory  4096 MiB  2048 MiB",
            "at the next start\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }

        let new = render(&dir, &opts(Some("new-01"), false, false)).unwrap();
        for want in [
            "VMID:         -\n",
            "IP addresses: - (none reported by the guest agent)\n",
            "Provisioned:  no\n",
            "  Ready        Unknown  NotYetObserved  10s\n",
            "\nLast task: none\n",
            "\nBackoff: none\n",
            "\nHistory: none\n",
        ] {
            assert!(new.contains(want), "missing {want:?} in\n{new}");
        }
        assert!(!new.contains("Drift"), "no drift, no section: {new}");

        let coloured = render(&dir, &opts(Some("db-01"), false, true)).unwrap();
        assert!(
            coloured.contains("  Stalled      \x1b[31mTrue\x1b[0m    PermissionDenied"),
            "{coloured:?}"
        );
        assert!(coloured.contains("\x1b[33m2025-03-01T12:15:00Z (next attempt in 10m)\x1b[0m"));
    }

    #[test]
    fn one_spec_json_is_its_file() {
        let (_d, dir) = fixture();
        let text = render(&dir, &opts(Some("db-01"), true, false)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let f = StatusDir::open(&dir)
            .unwrap()
            .read_spec("db-01")
            .unwrap()
            .unwrap();
        assert_eq!(v, serde_json::to_value(&f).unwrap());
        assert_eq!(v["initialization"]["provisioned"], false);
        assert_eq!(
            v["conditions"][0]["lastTransitionTime"],
            "2025-03-01T09:00:00Z"
        );
    }

    #[test]
    fn errors_name_the_path_and_what_to_do() {
        let (d, dir) = fixture();

        let missing = d.path().join("nope");
        let e = render(&missing, &opts(None, false, false)).unwrap_err();
        assert!(matches!(e, ViewError::NoStatusDir { .. }));
        let msg = e.to_string();
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        assert!(msg.contains("is the daemon running? check status_dir in the config"));
        assert!(
            !missing.exists(),
            "the viewer must not create the directory"
        );
        // with a name too
        let e = render(&missing, &opts(Some("web-01"), false, false)).unwrap_err();
        assert!(matches!(e, ViewError::NoStatusDir { .. }));

        let file = dir.join("web-01.yaml");
        let e = render(&file, &opts(None, false, false)).unwrap_err();
        assert!(matches!(e, ViewError::NotADirectory { .. }), "{e}");

        let e = render(&dir, &opts(Some("web-02"), false, false)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ViewError::NoSuchSpec { .. }));
        assert!(
            msg.contains(&dir.join("web-02.yaml").display().to_string()),
            "{msg}"
        );
        assert!(msg.contains("is the daemon running?"), "{msg}");

        for name in ["../etc/passwd", "_summary", "Web-01", "", "a\x1b[2J"] {
            let e = render(&dir, &opts(Some(name), false, false)).unwrap_err();
            assert!(matches!(e, ViewError::InvalidName { .. }), "{name:?}: {e}");
            assert!(!e.to_string().contains('\x1b'));
        }

        let e = render(&dir, &opts(Some("zz-junk"), true, false)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ViewError::Corrupt { .. }));
        assert!(
            msg.contains("zz-junk.yaml cannot be read: not a valid status file"),
            "{msg}"
        );
        assert!(msg.contains("proxsync reconcile zz-junk"), "{msg}");
    }

    #[test]
    fn empty_directory() {
        let d = tempfile::tempdir().unwrap();
        let text = render(d.path(), &opts(None, false, false)).unwrap();
        assert_eq!(
            text,
            format!(
                "No spec status files in {}.\n\nnote: no _summary.yaml yet: the daemon has \
                 not finished a cycle (is the daemon running? check status_dir in the config)\n",
                d.path().display()
            )
        );
        let json = render(d.path(), &opts(None, true, false)).unwrap();
        assert_eq!(
            json,
            "{\n  \"version\": 3,\n  \"summary\": null,\n  \"specs\": [],\n  \"orphans\": [],\n  \"skipped\": []\n}\n"
        );
    }

    #[test]
    fn summary_details() {
        let d = tempfile::tempdir().unwrap();
        let mut sd = StatusDir::open(d.path()).unwrap();
        sd.write_summary(&SummaryStatus {
            commit: None,
            source_error: Some("fetch failed: connection reset\nby peer".into()),
            refused_commit: Some(crate::source::verify::Refusal {
                commit: "0123456789abcdef0123456789abcdef01234567".into(),
                kind: crate::gate::commit::RefusalKind::UnverifiedSignature,
                reason: "signed by a key that is not in the allowed signers file\n(SHA256:x)"
                    .into(),
            }),
            specs: 2,
            ready: 2,
            stalled: 0,
            backing_off: 0,
            invalid: 0,
            sites: vec![SiteSummary {
                name: "lab".into(),
                reachable: true,
                quorate: false,
                nodes_online: vec!["pve1".into()],
                nodes_offline: vec!["pve2".into(), "pve3".into()],
                error: None,
                parallel: vec![],
            }],
            last_cycle: t(T0 - 3 * 86_400),
            cycle_ms: 5,
            refused: vec!["refused to delete 7 of 10 managed VMs (max_delete_fraction 0.5)".into()],
            last_request: Some(crate::status::RequestSummary {
                spec: Some("web-01".into()),
                handled_at: t(T0 + 295),
            }),
            notify_failures: vec![crate::status::NotifyFailure {
                target: "ops".into(),
                kind: "webhook".into(),
                failures: 3,
                last_error: "HTTP 401 Unauthorized".into(),
                since: t(T0 - 120),
            }],
            rewind: Some(crate::status::RewindSummary {
                commit: "89abcdef0123456789abcdef0123456789abcdef".into(),
                from: "fedcba9876543210fedcba9876543210fedcba98".into(),
                since: t(T0 - 600),
            }),
            sets: Vec::new(),
            images: Vec::new(),
            cycle: Default::default(),
        })
        .unwrap();
        let text = render(d.path(), &opts(None, false, false)).unwrap();
        for want in [
            "Notify:      ops (webhook) failing since 7m ago, 3 message(s) given up: HTTP 401 Unauthorized\n",
            "Commit:      none yet\n",
            "Source:      fetch failed: connection reset by peer (the last good commit is kept)\n",
            "Tip refused: 0123456: signed by a key that is not in the allowed signers file \
             (SHA256:x) (not applied; the last verified commit is kept)\n",
            "Specs:       2 (2 Ready, 0 Stalled, 0 backing off, 0 invalid)\n",
            "Sites:       0/1 healthy (lab: no quorum, offline: pve2, pve3)\n",
            "Last cycle:  3d ago (took 5 ms)\n",
            "Refused:     refused to delete 7 of 10 managed VMs (max_delete_fraction 0.5)\n",
            "Request:     reconcile web-01, handled 5s ago\n",
            "Rewound:     89abcde (does not descend from fedcba9, the commit applied before it, \
             applied 15m ago; its deletes count as one batch)\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn a_url_password_an_older_release_wrote_is_not_shown() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("_summary.yaml"),
            "sourceError: \"source https://alice:PASSWORD@git.example/x.git: git fetch failed\"\n\
             lastCycle: \"2025-03-01T12:00:00Z\"\n",
        )
        .unwrap();
        let text = render(d.path(), &opts(None, false, false)).unwrap();
        assert!(!text.contains("PASSWORD"), "{text}");
        assert!(
            text.contains("Source:      source https://***@git.example/x.git: git fetch failed"),
            "{text}"
        );
    }

    #[test]
    fn hostile_text_cannot_drive_the_terminal() {
        let d = tempfile::tempdir().unwrap();
        let mut sd = StatusDir::open(d.path()).unwrap();
        let nasty = "\x1b[2J\x1b]0;pwned\x07line1\nline2\r\u{202e}evil\u{9b}31m";
        let mut s = healthy("web-01", nasty, nasty, 101);
        s.state = nasty.into();
        s.vm_name = nasty.into();
        s.ip_addresses = vec![nasty.into()];
        s.commit = Some(nasty.into());
        // A committer names the file, the tags and labels.
        s.spec_file = Some(nasty.into());
        s.tags = vec![nasty.into()];
        s.labels = [(nasty.to_string(), nasty.to_string())].into();
        set(&mut s, c(kinds::READY, F, Reason::Failed, nasty));
        set(
            &mut s,
            ConditionInput::new("Custom\u{1b}", U, Reason::NotReady, nasty),
        );
        s.backoff = Some(BackoffSummary {
            attempts: 1,
            next_attempt: t(T0),
            category: nasty.into(),
            message: nasty.into(),
        });
        s.history[0].action = nasty.into();
        s.history[0].outcome = nasty.into();
        sd.write_spec(&s, t(T0)).unwrap();
        sd.write_orphans(
            &[OrphanEntry {
                site: nasty.into(),
                vm_id: 1,
                kind: Default::default(),
                node: nasty.into(),
                name: Some(nasty.into()),
                state: nasty.into(),
                first_seen: t(T0),
                action: nasty.into(),
                duplicate_of: None,
            }],
            t(T0),
        )
        .unwrap();
        for o in [
            opts(None, false, false),
            opts(Some("web-01"), false, false),
            opts(None, true, false),
            opts(Some("web-01"), true, false),
        ] {
            let text = render(d.path(), &o).unwrap();
            assert!(
                !text.chars().any(
                    |c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c)
                ),
                "{text:?}"
            );
        }
        let list = render(d.path(), &opts(None, false, false)).unwrap();
        assert!(list.contains("retry due now: "), "{list}");
    }

    #[test]
    fn long_messages_are_cut_to_the_width() {
        let d = tempfile::tempdir().unwrap();
        let mut sd = StatusDir::open(d.path()).unwrap();
        let mut s = healthy("web-01", "us-sfvalley", "pve1", 101);
        set(
            &mut s,
            c(kinds::READY, F, Reason::NotReady, &"é".repeat(900)),
        );
        sd.write_spec(&s, t(T0)).unwrap();
        let text = render(d.path(), &opts(None, false, false)).unwrap();
        let r = row(&text, "web-01");
        assert_eq!(r.chars().count(), TARGET_WIDTH, "{r}");
        assert!(r.ends_with("éé…"), "{r}");
        // the detail view keeps the whole message (as the file has it)
        let detail = render(d.path(), &opts(Some("web-01"), false, false)).unwrap();
        assert!(detail.contains(&"é".repeat(500)));
    }

    /// Damaged files of every shape: the list skips them with a note, the detail view says
    /// why, nothing panics.
    #[test]
    fn damaged_files_never_panic() {
        let (_d, dir) = fixture();
        let good = std::fs::read(dir.join("web-01.yaml")).unwrap();
        let summary = std::fs::read(dir.join(SUMMARY_FILE)).unwrap();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..300 {
            let mut bytes = if round % 2 == 0 {
                good.clone()
            } else {
                summary.clone()
            };
            match round % 5 {
                0 => bytes.truncate((next() as usize) % (bytes.len() + 1)),
                1 => {
                    for _ in 0..(1 + next() % 8) {
                        let i = (next() as usize) % bytes.len();
                        bytes[i] = next() as u8;
                    }
                }
                2 => {
                    let i = (next() as usize) % bytes.len();
                    bytes.insert(i, b"\n- [&a {*a: ]\n"[(next() % 14) as usize]);
                }
                3 => {
                    bytes = (0..(next() % 200)).map(|_| next() as u8).collect();
                }
                _ => {
                    let a = (next() as usize) % bytes.len();
                    let b = (next() as usize) % bytes.len();
                    bytes.swap(a, b);
                }
            }
            std::fs::write(dir.join("web-01.yaml"), &bytes).unwrap();
            std::fs::write(dir.join(SUMMARY_FILE), &bytes).unwrap();
            std::fs::write(dir.join(ORPHANS_FILE), &bytes).unwrap();
            for o in [
                opts(None, false, true),
                opts(None, true, false),
                opts(Some("web-01"), false, true),
                opts(Some("web-01"), true, false),
            ] {
                match render(&dir, &o) {
                    Ok(text) => assert!(text.ends_with('\n')),
                    Err(e) => assert!(matches!(e, ViewError::Corrupt { .. }), "round {round}: {e}"),
                }
            }
        }
        std::fs::write(dir.join("web-01.yaml"), vec![b'#'; 2 * 1024 * 1024]).unwrap();
        let text = render(&dir, &opts(None, false, false)).unwrap();
        assert!(text.contains("web-01.yaml: larger than 1 MiB"), "{text}");
        std::fs::write(dir.join("web-01.yaml"), b"\xff\xfe\x00").unwrap();
        let e = render(&dir, &opts(Some("web-01"), false, false)).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }

    #[test]
    fn durations() {
        let s = Duration::from_secs;
        assert_eq!(human(s(0)), "0s");
        assert_eq!(human(s(59)), "59s");
        assert_eq!(human(s(60)), "1m");
        assert_eq!(human(s(3599)), "59m");
        assert_eq!(human(s(3600)), "1h");
        assert_eq!(human(s(86_399)), "23h");
        assert_eq!(human(s(86_400)), "1d");
        assert_eq!(human(s(u64::MAX)), format!("{}d", u64::MAX / 86_400));
        assert_eq!(age(t(T0), "2025-03-01T12:00:05Z"), "0s");
        assert_eq!(age(t(T0), "garbage"), "?");
        assert_eq!(age(t(T0), "2025-03-01T11:55:00Z"), "5m");
        assert_eq!(until(t(T0), t(T0 + 240)), "in 4m");
        assert_eq!(until(t(T0), t(T0 - 1)), "due now");
        assert_eq!(ago(t(T0), t(T0 + 3)), "in 3s (clock skew?)");
        assert_eq!(short_commit(COMMIT), "3f2c9a1");
        assert_eq!(short_commit("v1.0-tag"), "v1.0-tag");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abcd", 4), "abcd");
        assert_eq!(cut("abcd", 0), "…");
    }
}
