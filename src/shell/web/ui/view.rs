//! What each page shows, read from the status files and rendered by the askama templates in
//! `templates/web/` (HTML auto-escaping on: every string from a spec, a guest or PVE is
//! escaped where it is written; none is ever put in a URL but a spec's file name, a checked
//! DNS label).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use askama::Template;
use hyper::StatusCode;

use crate::status::{
    Condition, ConditionStatus, CycleRecord, OrphanRecord, SpecFile, StatusDir, SummaryFile, kinds,
    parse_rfc3339, valid_name,
};

/// `42s`, `5m`, `3h`, `2d` before `now`; `?` for a time that does not parse.
fn age(now: SystemTime, ts: &str) -> String {
    let Some(t) = parse_rfc3339(ts) else {
        return "?".into();
    };
    crate::util::time::human(now.duration_since(t).unwrap_or_default())
}

/// The first 12 characters of a commit id.
fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

/// `VM` or `container`, from a status file's `kind`.
fn kind_word(kind: Option<&str>) -> &'static str {
    match kind {
        Some("ProxmoxLXC") => "container",
        Some("ProxmoxTemplate") => "template",
        _ => "VM",
    }
}

/// The header facts of every page, from `_summary.yaml`.
pub(super) struct Facts {
    /// There is a summary (the daemon finished a cycle).
    pub known: bool,
    pub last_cycle: String,
    pub last_cycle_age: String,
    pub cycle_ms: u64,
    pub commit: String,
    pub specs: u64,
    pub ready: u64,
    pub stalled: u64,
    pub backing_off: u64,
    pub invalid: u64,
    pub source_error: Option<String>,
    pub orphans: usize,
}

impl Facts {
    fn of(summary: Option<&SummaryFile>, orphans: usize, now: SystemTime) -> Facts {
        let Some(s) = summary else {
            return Facts {
                known: false,
                last_cycle: String::new(),
                last_cycle_age: String::new(),
                cycle_ms: 0,
                commit: String::new(),
                specs: 0,
                ready: 0,
                stalled: 0,
                backing_off: 0,
                invalid: 0,
                source_error: None,
                orphans,
            };
        };
        Facts {
            known: true,
            last_cycle: s.last_cycle.clone(),
            last_cycle_age: age(now, &s.last_cycle),
            cycle_ms: s.cycle_ms,
            commit: s.commit.as_deref().map(short).unwrap_or_else(|| "—".into()),
            specs: s.specs,
            ready: s.ready,
            stalled: s.stalled,
            backing_off: s.backing_off,
            invalid: s.invalid,
            source_error: s.source_error.clone(),
            orphans,
        }
    }
}

/// One condition in a table cell: its status word, a class for its colour, and its reason
/// and message as the cell's title.
pub(super) struct Cell {
    pub text: &'static str,
    pub class: &'static str,
    pub title: String,
}

impl Cell {
    /// `file`'s condition `kind`; `good` is the status that is good news (True for Ready,
    /// False for Stalled). An absent condition is an empty cell.
    fn of(file: &SpecFile, kind: &str, good: ConditionStatus) -> Cell {
        let Some(c) = file.condition(kind) else {
            return Cell {
                text: "",
                class: "none",
                title: String::new(),
            };
        };
        let class = match c.status {
            ConditionStatus::Unknown => "unknown",
            s if s == good => "good",
            _ => "bad",
        };
        Cell {
            text: c.status.as_str(),
            class,
            title: title(c),
        }
    }
}

fn title(c: &Condition) -> String {
    if c.message.is_empty() {
        c.reason.clone()
    } else {
        format!("{}: {}", c.reason, c.message)
    }
}

/// One spec in the fleet table.
pub(super) struct Row {
    /// The file's stem: a checked DNS label (the link's path).
    pub name: String,
    pub kind: &'static str,
    pub vm_id: String,
    pub state: String,
    pub ready: Cell,
    pub synced: Cell,
    pub stalled: Cell,
    pub suspended: Cell,
    /// `observe-only` for a spec under `managementPolicy: Observe` (it has `Synced`).
    pub observed: &'static str,
    pub reboot: Cell,
    /// Why it is not Ready (Ready's reason and message), empty when it is.
    pub why: String,
}

impl Row {
    fn of(name: String, f: &SpecFile) -> Row {
        let why = match f.condition(kinds::READY) {
            Some(c) if c.status != ConditionStatus::True => title(c),
            _ => String::new(),
        };
        Row {
            name,
            kind: kind_word(f.kind.as_deref()),
            vm_id: f.vm_id.map(|v| v.to_string()).unwrap_or_else(|| "—".into()),
            state: f.state.clone(),
            ready: Cell::of(f, kinds::READY, ConditionStatus::True),
            synced: Cell::of(f, kinds::SYNCED, ConditionStatus::True),
            stalled: Cell::of(f, kinds::STALLED, ConditionStatus::False),
            suspended: Cell::of(f, kinds::SUSPENDED, ConditionStatus::False),
            observed: if f.condition(kinds::SYNCED).is_some() {
                "observe-only"
            } else {
                ""
            },
            reboot: Cell::of(f, kinds::REBOOT_PENDING, ConditionStatus::False),
            why,
        }
    }
}

pub(super) struct NodeGroup {
    pub node: String,
    pub rows: Vec<Row>,
}

pub(super) struct SiteGroup {
    pub site: String,
    /// From the summary: `reachable, quorate`, or what is wrong.
    pub health: String,
    pub nodes: Vec<NodeGroup>,
}

/// The last cycles (`_summary.yaml`'s `recentCycles`) as bars of an inline SVG: every
/// attribute a number or one of three class names, every word in a `<title>` (escaped).
pub(super) struct Timeline {
    pub width: u32,
    pub height: u32,
    pub bar_width: u32,
    pub bars: Vec<Bar>,
    /// `30 cycle(s) since 29m ago: 12 action(s), 1 failed; the longest took 840 ms`.
    pub caption: String,
}

/// One cycle's bar: its height is its duration on a log scale against the longest shown.
pub(super) struct Bar {
    pub x: u32,
    pub y: u32,
    pub height: u32,
    /// `idle`, `acted` or `failed` (an action failed or a site could not be read).
    pub class: &'static str,
    pub title: String,
}

/// The SVG's drawing height and a bar's width and step, in pixels.
const TIMELINE_HEIGHT: u32 = 48;
const BAR_WIDTH: u32 = 10;
const BAR_STEP: u32 = 14;

impl Timeline {
    fn of(cycles: &[CycleRecord], now: SystemTime) -> Timeline {
        let longest = cycles.iter().map(|c| c.ms).max().unwrap_or(0);
        let scale = |ms: u64| (ms as f64).ln_1p() / (longest.max(1) as f64).ln_1p();
        let bars = (cycles.iter().enumerate())
            .map(|(i, c)| {
                // At least 3 px, so that an instant cycle is still seen.
                let height = 3 + (scale(c.ms) * f64::from(TIMELINE_HEIGHT - 3)).round() as u32;
                let class = match (c.failed > 0 || c.sites_down > 0, c.actions > 0) {
                    (true, _) => "failed",
                    (false, true) => "acted",
                    (false, false) => "idle",
                };
                let mut title = format!(
                    "{} ({} ago): {} ms, {} action(s)",
                    c.at,
                    age(now, &c.at),
                    c.ms,
                    c.actions
                );
                if c.failed > 0 {
                    title.push_str(&format!(", {} failed", c.failed));
                }
                if c.sites_down > 0 {
                    title.push_str(&format!(", {} site(s) unreadable", c.sites_down));
                }
                Bar {
                    x: i as u32 * BAR_STEP,
                    y: TIMELINE_HEIGHT.saturating_sub(height.min(TIMELINE_HEIGHT)),
                    height: height.min(TIMELINE_HEIGHT),
                    class,
                    title,
                }
            })
            .collect();
        let actions: u64 = cycles.iter().map(|c| u64::from(c.actions)).sum();
        let failed: u64 = cycles.iter().map(|c| u64::from(c.failed)).sum();
        let span = (cycles.first())
            .filter(|_| cycles.len() > 1)
            .map(|first| format!(" since {} ago", age(now, &first.at)))
            .unwrap_or_default();
        Timeline {
            width: (cycles.len() as u32 * BAR_STEP).max(BAR_STEP),
            height: TIMELINE_HEIGHT,
            bar_width: BAR_WIDTH,
            bars,
            caption: format!(
                "{} cycle(s){span}: {actions} action(s), {failed} failed; the longest took {longest} ms",
                cycles.len()
            ),
        }
    }
}

#[derive(Template)]
#[template(path = "web/fleet.html")]
pub(super) struct FleetPage {
    pub facts: Facts,
    pub timeline: Timeline,
    pub summary: SummaryFile,
    pub sites: Vec<SiteGroup>,
    /// Status files that could not be read, by name.
    pub unreadable: Vec<String>,
}

/// One attempt in a spec's history, as the page shows it.
pub(super) struct HistoryRow {
    pub at: String,
    pub action: String,
    pub outcome: String,
    pub tasks: Vec<String>,
    /// `420 ms`, `12.3 s`, `4m`; empty when not known.
    pub took: String,
}

impl HistoryRow {
    fn of(h: &crate::status::AttemptRecord) -> HistoryRow {
        let took = match h.took_ms {
            None => String::new(),
            Some(ms @ 0..1000) => format!("{ms} ms"),
            Some(ms @ 1000..60_000) => format!("{:.1} s", ms as f64 / 1000.0),
            Some(ms) => crate::util::time::human(std::time::Duration::from_millis(ms)),
        };
        HistoryRow {
            at: h.at.clone(),
            action: h.action.clone(),
            outcome: h.outcome.clone(),
            tasks: h.tasks.clone(),
            took,
        }
    }
}

#[derive(Template)]
#[template(path = "web/spec.html")]
pub(super) struct SpecPage {
    pub history: Vec<HistoryRow>,
    pub facts: Facts,
    /// The spec's file at its commit on the forge (`[web] file_url`).
    pub file_link: Option<String>,
    /// The spec as applied: its document at its commit with the defaults merged in.
    pub effective: Option<String>,
    /// Why it is not shown, when it cannot be.
    pub effective_note: String,
    pub name: String,
    pub kind: &'static str,
    pub file: SpecFile,
    pub labels: Vec<(String, String)>,
    pub next_attempt_in: String,
    pub updated_age: String,
}

#[derive(Template)]
#[template(path = "web/orphans.html")]
pub(super) struct OrphansPage {
    pub facts: Facts,
    pub summary: SummaryFile,
    pub orphans: Vec<OrphanView>,
}

pub(super) struct OrphanView {
    pub o: OrphanRecord,
    pub kind: &'static str,
    pub first_seen_age: String,
}

#[derive(Template)]
#[template(path = "web/message.html")]
pub(super) struct MessagePage {
    pub facts: Facts,
    pub heading: String,
    pub message: String,
}

/// What a page is built from, read once.
struct Read {
    sd: StatusDir,
    summary: Option<SummaryFile>,
    orphans: Vec<OrphanRecord>,
}

impl Read {
    fn new(dir: &Path) -> Read {
        let sd = StatusDir::reader(dir);
        let summary = sd.read_summary().ok().flatten();
        let orphans = sd
            .read_orphans()
            .ok()
            .flatten()
            .map(|o| o.orphans)
            .unwrap_or_default();
        Read {
            sd,
            summary,
            orphans,
        }
    }

    fn facts(&self, now: SystemTime) -> Facts {
        Facts::of(self.summary.as_ref(), self.orphans.len(), now)
    }
}

fn render(page: &impl Template, status: StatusCode) -> (StatusCode, String) {
    match page.render() {
        Ok(html) => (status, html),
        Err(e) => failed(&format!("the page could not be rendered: {e}")),
    }
}

/// A 500 page without facts (rendering itself failed).
pub(super) fn failed(message: &str) -> (StatusCode, String) {
    message_page(
        Facts::of(None, 0, SystemTime::UNIX_EPOCH),
        StatusCode::INTERNAL_SERVER_ERROR,
        "Error",
        message,
    )
}

fn message_page(
    facts: Facts,
    status: StatusCode,
    heading: &str,
    message: &str,
) -> (StatusCode, String) {
    let page = MessagePage {
        facts,
        heading: heading.into(),
        message: message.into(),
    };
    match page.render() {
        Ok(html) => (status, html),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
    }
}

/// `/`: every spec by site and node.
pub(super) fn fleet(dir: &Path, now: SystemTime) -> (StatusCode, String) {
    let read = Read::new(dir);
    let facts = read.facts(now);
    let names = match read.sd.spec_names() {
        Ok(names) => names,
        Err(e) => {
            return message_page(
                facts,
                StatusCode::SERVICE_UNAVAILABLE,
                "No status yet",
                &format!("the status directory cannot be read: {e}"),
            );
        }
    };
    let mut unreadable = Vec::new();
    let mut groups: BTreeMap<String, BTreeMap<String, Vec<Row>>> = BTreeMap::new();
    // Parsing the spec files is nearly all of the page at 10,000 specs: side by side, as
    // `proxsync status` does.
    let files = crate::util::par::map(names, |name| {
        let file = read.sd.read_spec(&name);
        (name, file)
    });
    for (name, file) in files {
        match file {
            Ok(Some(f)) => groups
                .entry(f.site.clone())
                .or_default()
                .entry(f.node.clone())
                .or_default()
                .push(Row::of(name, &f)),
            _ => unreadable.push(name),
        }
    }
    let summary = read.summary.clone().unwrap_or_default();
    let sites = groups
        .into_iter()
        .map(|(site, nodes)| SiteGroup {
            health: site_health(&summary, &site),
            site,
            nodes: nodes
                .into_iter()
                .map(|(node, rows)| NodeGroup { node, rows })
                .collect(),
        })
        .collect();
    render(
        &FleetPage {
            facts,
            timeline: Timeline::of(&summary.recent_cycles, now),
            summary,
            sites,
            unreadable,
        },
        StatusCode::OK,
    )
}

fn site_health(summary: &SummaryFile, site: &str) -> String {
    let Some(s) = summary.sites.iter().find(|s| s.name == site) else {
        return String::new();
    };
    if let Some(e) = &s.error {
        return format!("unhealthy: {e}");
    }
    let mut words = vec![if s.reachable {
        "reachable"
    } else {
        "unreachable"
    }];
    words.push(if s.quorate { "quorate" } else { "not quorate" });
    let mut text = words.join(", ");
    if !s.nodes_offline.is_empty() {
        text.push_str(&format!("; offline: {}", s.nodes_offline.join(", ")));
    }
    text
}

/// `file_url` (a checked `[web] file_url`) with `{commit}` and `{path}` filled in: `None` when
/// it names the commit and there is none, or when either is not what the daemon writes (a
/// commit id of hex digits; a relative path of plain segments, each %-encoded but for the
/// unreserved characters).
fn file_link(file_url: &str, commit: Option<&str>, path: &str) -> Option<String> {
    let plain = |seg: &str| !seg.is_empty() && seg != "." && seg != "..";
    if !path.split('/').all(plain) {
        return None;
    }
    let mut encoded = String::with_capacity(path.len());
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                encoded.push(char::from(b))
            }
            _ => encoded.push_str(&format!("%{b:02X}")),
        }
    }
    let mut link = file_url.replace("{path}", &encoded);
    if link.contains("{commit}") {
        let commit = commit
            .filter(|c| matches!(c.len(), 40 | 64) && c.bytes().all(|b| b.is_ascii_hexdigit()))?;
        link = link.replace("{commit}", commit);
    }
    Some(link)
}

/// `/spec/<name>`: one spec; 404 for a name that is not a DNS label or has no status file.
/// What a spec's page reads beyond its status file: its file on the forge and in git.
pub(super) struct Links {
    /// `[web] file_url`.
    pub file_url: Option<String>,
    /// The repository the daemon reads.
    pub source: Option<crate::source::SpecSource>,
}

pub(super) fn spec(dir: &Path, name: &str, now: SystemTime, links: &Links) -> (StatusCode, String) {
    let read = Read::new(dir);
    let facts = read.facts(now);
    let file = if valid_name(name) {
        read.sd.read_spec(name).ok().flatten()
    } else {
        None
    };
    let Some(file) = file else {
        return message_page(
            facts,
            StatusCode::NOT_FOUND,
            "Not found",
            "no spec of that name has a status file",
        );
    };
    let next_attempt_in = file
        .backoff
        .as_ref()
        .and_then(|b| parse_rfc3339(&b.next_attempt))
        .map(|t| match t.duration_since(now) {
            Ok(d) if d.as_secs() > 0 => format!("in {}s", d.as_secs()),
            _ => "due now".into(),
        })
        .unwrap_or_default();
    let updated_age = file
        .updated_at
        .as_deref()
        .map(|t| age(now, t))
        .unwrap_or_default();
    let file_link = links
        .file_url
        .as_deref()
        .and_then(|url| file_link(url, file.commit.as_deref(), file.spec_file.as_deref()?));
    let (effective, effective_note) = match (&links.source, &file.commit, &file.spec_file) {
        (Some(source), Some(commit), Some(path)) => match source.effective(commit, path, name) {
            Ok(Some(text)) => (Some(text), String::new()),
            Ok(None) => (None, format!("{path} holds no spec {name} at that commit")),
            Err(e) => (None, format!("cannot be read from git: {e}")),
        },
        _ => (None, String::new()),
    };
    render(
        &SpecPage {
            history: file.history.iter().map(HistoryRow::of).collect(),
            facts,
            file_link,
            effective,
            effective_note,
            name: name.to_string(),
            kind: kind_word(file.kind.as_deref()),
            labels: file
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            file,
            next_attempt_in,
            updated_age,
        },
        StatusCode::OK,
    )
}

/// `/orphans`: the orphans and what will happen to them, and what the summary refused.
pub(super) fn orphans(dir: &Path, now: SystemTime) -> (StatusCode, String) {
    let read = Read::new(dir);
    let facts = read.facts(now);
    let orphans = read
        .orphans
        .iter()
        .map(|o| OrphanView {
            kind: kind_word(o.kind.as_deref()),
            first_seen_age: age(now, &o.first_seen),
            o: o.clone(),
        })
        .collect();
    render(
        &OrphansPage {
            facts,
            summary: read.summary.unwrap_or_default(),
            orphans,
        },
        StatusCode::OK,
    )
}
