//! How changes reach an existing VM: `forProvider.rebootPolicy`, `.maintenanceWindow`,
//! `.shutdownTimeout`, `.forceStopAfter` (whether proxsync may reboot a running VM to apply
//! changes PVE keeps pending until its next start, and when) and
//! `.allowRecreateOnSiteChange` (whether a spec moved to another site gets a new VM there
//! while the old one stays). Pure: the window is judged against a given instant, with the time zone
//! database compiled in (jiff's bundled tzdb), so validation reads nothing from the machine.

use serde::Serialize;

use super::diag::Pos;
use super::fields::{Ctx, Obj, enum_field, string};
use super::yaml::{Node, Value};

/// Default `shutdownTimeout`: how long a guest gets to power off cleanly (PVE's `timeout`).
pub const DEFAULT_SHUTDOWN_TIMEOUT_SECS: u32 = 180;

/// Whether and when a running VM with changes pending may be rebooted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RebootPolicy {
    /// `rebootPolicy`; default `Never`.
    pub mode: RebootMode,
    /// Required with `Window`.
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Boxed: most specs have none, and every spec holds its policy.
    pub window: Option<Box<MaintenanceWindow>>,
    /// Seconds the guest gets to shut down (ACPI) before the reboot is given up; default
    /// [`DEFAULT_SHUTDOWN_TIMEOUT_SECS`].
    pub shutdown_timeout_secs: u32,
    /// When set, a guest that has not powered off after this many seconds is stopped hard
    /// (PVE's `forceStop`). Never without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub force_stop_after_secs: Option<u32>,
}

/// `rebootPolicy`: when a running guest with changes pending may be rebooted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub enum RebootMode {
    /// Report `RebootPending` only (the default): a person reboots.
    #[default]
    Never,
    /// Reboot as soon as a change is pending.
    IfNeeded,
    /// Reboot only inside `maintenanceWindow`.
    Window,
}

impl Default for RebootPolicy {
    fn default() -> Self {
        RebootPolicy {
            mode: RebootMode::Never,
            window: None,
            shutdown_timeout_secs: DEFAULT_SHUTDOWN_TIMEOUT_SECS,
            force_stop_after_secs: None,
        }
    }
}

impl RebootPolicy {
    /// Whether a reboot may start at `now_ms` (unix milliseconds).
    pub fn allows_at(&self, now_ms: u64) -> bool {
        match self.mode {
            RebootMode::Never => false,
            RebootMode::IfNeeded => true,
            RebootMode::Window => self.window.as_ref().is_some_and(|w| w.contains(now_ms)),
        }
    }
}

/// `maintenanceWindow`: `<days> <HH:MM>-<HH:MM> <time zone>`, e.g. `Sun 02:00-04:00
/// Europe/Berlin`, `Mon-Fri 22:00-02:00 UTC` (an end before the start runs past midnight into
/// the next day), `* 03:00-04:00 America/New_York` (every day).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MaintenanceWindow {
    /// As written.
    pub text: String,
    /// Monday = 0 .. Sunday = 6.
    #[serde(skip)]
    days: [bool; 7],
    #[serde(skip)]
    start_min: u16,
    #[serde(skip)]
    end_min: u16,
    #[serde(skip)]
    tz: String,
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const WINDOW_FORMAT: &str = "write <days> <HH:MM>-<HH:MM> <time zone>, e.g. \"Sun 02:00-04:00 Europe/Berlin\", \
     \"Mon-Fri 22:00-02:00 UTC\" or \"* 03:00-04:00 UTC\" (days: Mon..Sun, ranges and lists such as Sat,Sun; * for every day)";

impl MaintenanceWindow {
    /// Reads a `maintenanceWindow` as written; the error says what is wrong and the form.
    pub fn parse(text: &str) -> Result<MaintenanceWindow, String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [days, times, tz] = parts[..] else {
            return Err(format!(
                "maintenanceWindow {text:?} is not valid; {WINDOW_FORMAT}"
            ));
        };
        let days = parse_days(days)?;
        let (start, end) = times
            .split_once('-')
            .ok_or_else(|| format!("{times:?} is not a time range; {WINDOW_FORMAT}"))?;
        let (start_min, end_min) = (parse_time(start)?, parse_time(end)?);
        if start_min == end_min {
            return Err(format!(
                "maintenanceWindow {text:?} is empty (it starts when it ends)"
            ));
        }
        jiff::tz::TimeZone::get(tz).map_err(|_| {
            format!(
                "time zone {tz:?} is not known; write an IANA name such as Europe/Berlin or America/New_York, or UTC"
            )
        })?;
        Ok(MaintenanceWindow {
            text: text.to_string(),
            days,
            start_min,
            end_min,
            tz: tz.to_string(),
        })
    }

    /// Whether the instant `now_ms` (unix milliseconds) falls inside the window, in its time
    /// zone (so a window keeps its local hours across daylight saving changes).
    pub(crate) fn contains(&self, now_ms: u64) -> bool {
        let Ok(tz) = jiff::tz::TimeZone::get(&self.tz) else {
            return false;
        };
        let Ok(ts) = jiff::Timestamp::from_millisecond(now_ms.min(i64::MAX as u64) as i64) else {
            return false;
        };
        let local = ts.to_zoned(tz);
        let day = usize::from(local.weekday().to_monday_zero_offset() as u8);
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        if self.start_min < self.end_min {
            self.days[day] && (self.start_min..self.end_min).contains(&minute)
        } else {
            // Past midnight: the evening part belongs to the listed day, the early part to
            // the day after it.
            let yesterday = (day + 6) % 7;
            (self.days[day] && minute >= self.start_min)
                || (self.days[yesterday] && minute < self.end_min)
        }
    }

    /// The first instant after `now_ms` at which [`contains`](Self::contains) may answer
    /// otherwise (the planner's plan holds until then): the next time the local clock reads
    /// the window's start or end, or the time zone's next offset change (the local clock
    /// jumps), whichever comes first. `None` when `contains` cannot change (an unknown zone).
    pub fn next_edge(&self, now_ms: u64) -> Option<u64> {
        let tz = jiff::tz::TimeZone::get(&self.tz).ok()?;
        let now = jiff::Timestamp::from_millisecond(now_ms.min(i64::MAX as u64) as i64).ok()?;
        let today = now.to_zoned(tz.clone()).date();
        let shift = tz.following(now).next().map(|t| t.timestamp());
        // The start or end on the local day of now and the two after it (24:00 is the next
        // day's 00:00); a clock time a jump skips maps past the jump, which `shift` precedes.
        let edges = (0..=2i64).flat_map(|d| [self.start_min, self.end_min].map(move |m| (d, m)));
        let at = |(d, m): (i64, u16)| {
            let day = today
                .checked_add(jiff::Span::new().days(d + i64::from(m / 1440)))
                .ok()?;
            let (h, m) = ((m % 1440) / 60, m % 60);
            let local = day.at(h as i8, m as i8, 0, 0).to_zoned(tz.clone()).ok()?;
            Some(local.timestamp())
        };
        edges
            .filter_map(at)
            .chain(shift)
            .filter(|t| *t > now)
            .min()
            .map(|t| t.as_millisecond().max(0) as u64)
    }
}

fn parse_days(text: &str) -> Result<[bool; 7], String> {
    if text == "*" {
        return Ok([true; 7]);
    }
    let index = |d: &str| {
        DAYS.iter().position(|x| *x == d).ok_or_else(|| {
            format!(
                "{d:?} is not a day; write one of {} (or *)",
                DAYS.join(", ")
            )
        })
    };
    let mut days = [false; 7];
    for item in text.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (index(a)?, index(b)?);
                let mut d = a;
                loop {
                    days[d] = true;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
            None => days[index(item)?] = true,
        }
    }
    Ok(days)
}

fn parse_time(text: &str) -> Result<u16, String> {
    let bad = || format!("{text:?} is not a time; write HH:MM from 00:00 to 24:00");
    let (h, m) = text.split_once(':').ok_or_else(bad)?;
    if h.len() != 2 || m.len() != 2 {
        return Err(bad());
    }
    let (h, m): (u16, u16) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if m > 59 || h > 24 || (h == 24 && m != 0) {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// The four fields, from `forProvider`; `None` after an error (reported in `ctx`).
pub(super) fn reboot_policy(ctx: &mut Ctx, fp: &Obj) -> Option<RebootPolicy> {
    let mode = match fp.get("rebootPolicy") {
        None => Some(RebootMode::Never),
        Some(n) => enum_field(
            ctx,
            n,
            "spec.forProvider.rebootPolicy",
            &[
                ("Never", RebootMode::Never),
                ("IfNeeded", RebootMode::IfNeeded),
                ("Window", RebootMode::Window),
            ],
        ),
    }?;
    let window = match fp.get("maintenanceWindow") {
        None => None,
        Some(n) => {
            let s = string(
                ctx,
                n,
                "spec.forProvider.maintenanceWindow",
                "\"Sun 02:00-04:00 UTC\"",
            )?;
            Some(Box::new(ctx.check(n.pos, MaintenanceWindow::parse(s))?))
        }
    };
    match (mode, &window) {
        (RebootMode::Window, None) => {
            ctx.error(
                fp.pos,
                "rebootPolicy: Window needs spec.forProvider.maintenanceWindow, e.g. \"Sun 02:00-04:00 Europe/Berlin\"",
            );
            return None;
        }
        (RebootMode::Never | RebootMode::IfNeeded, Some(_)) => {
            let pos = fp.get("maintenanceWindow").map_or(fp.pos, |n| n.pos);
            ctx.error(
                pos,
                "maintenanceWindow is used only with rebootPolicy: Window; set that, or remove the window",
            );
            return None;
        }
        _ => {}
    }
    let shutdown_timeout_secs = match fp.get("shutdownTimeout") {
        None => DEFAULT_SHUTDOWN_TIMEOUT_SECS,
        Some(n) => duration_secs(ctx, n, "spec.forProvider.shutdownTimeout")?,
    };
    let force_stop_after_secs = match fp.get("forceStopAfter") {
        None => None,
        Some(n) => Some(duration_secs(ctx, n, "spec.forProvider.forceStopAfter")?),
    };
    Some(RebootPolicy {
        mode,
        window,
        shutdown_timeout_secs,
        force_stop_after_secs,
    })
}

/// `allowRecreateOnSiteChange`: a boolean, default false.
pub(super) fn allow_recreate_on_site_change(ctx: &mut Ctx, fp: &Obj) -> Option<bool> {
    let Some(n) = fp.get("allowRecreateOnSiteChange") else {
        return Some(false);
    };
    match n.value {
        Value::Bool(b) => Some(b),
        ref other => {
            ctx.error(
                n.pos,
                format!(
                    "spec.forProvider.allowRecreateOnSiteChange must be true or false; found {}",
                    other.describe()
                ),
            );
            None
        }
    }
}

/// A duration of at most a day (`30s`, `5m`), in seconds.
fn duration_secs(ctx: &mut Ctx, n: &Node, path: &str) -> Option<u32> {
    if let Value::Int(i) = n.value {
        ctx.error(
            n.pos,
            format!("{path} must be a duration with a unit, e.g. \"{i}s\" or \"{i}m\"; found the number {i}"),
        );
        return None;
    }
    let s = string(ctx, n, path, "\"3m\"")?;
    let d = ctx.check(
        n.pos,
        crate::util::duration::parse_duration(s).map_err(|e| format!("{path} {s:?}: {e}")),
    )?;
    if d.as_secs() > 86_400 {
        let pos: Pos = n.pos;
        ctx.error(pos, format!("{path} {s:?} is longer than a day"));
        return None;
    }
    Some(d.as_secs() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> u64 {
        rfc3339.parse::<jiff::Timestamp>().unwrap().as_millisecond() as u64
    }

    #[test]
    fn windows_are_judged_in_their_time_zone() {
        let w = MaintenanceWindow::parse("Sun 02:00-04:00 Europe/Berlin").unwrap();
        // Sunday 2026-11-22, 02:30 in Berlin (CET, UTC+1) is 01:30 UTC.
        assert!(w.contains(at("2026-11-22T01:30:00Z")));
        assert!(!w.contains(at("2026-11-22T03:30:00Z")), "04:30 local");
        assert!(!w.contains(at("2026-11-21T01:30:00Z")), "a Saturday");
        // Summer time (CEST, UTC+2): 02:30 local is 00:30 UTC.
        assert!(w.contains(at("2026-07-05T00:30:00Z")));
    }

    #[test]
    fn a_window_past_midnight_belongs_to_its_first_day() {
        let w = MaintenanceWindow::parse("Fri 22:00-02:00 UTC").unwrap();
        assert!(w.contains(at("2026-11-20T23:00:00Z")), "Friday 23:00");
        assert!(w.contains(at("2026-11-21T01:00:00Z")), "Saturday 01:00");
        assert!(!w.contains(at("2026-11-22T01:00:00Z")), "Sunday 01:00");
        assert!(!w.contains(at("2026-11-20T01:00:00Z")), "Friday 01:00");
        let every = MaintenanceWindow::parse("* 03:00-04:00 UTC").unwrap();
        assert!(every.contains(at("2026-11-18T03:59:00Z")));
        let weekend = MaintenanceWindow::parse("Sat,Sun 00:00-24:00 UTC").unwrap();
        assert!(weekend.contains(at("2026-11-22T23:59:00Z")));
        assert!(!weekend.contains(at("2026-11-23T00:00:00Z")));
        let range = MaintenanceWindow::parse("Fri-Mon 10:00-11:00 UTC").unwrap();
        assert!(range.contains(at("2026-11-23T10:30:00Z")), "Monday");
        assert!(!range.contains(at("2026-11-24T10:30:00Z")), "Tuesday");
    }

    #[test]
    fn bad_windows_say_what_to_write() {
        for (text, want) in [
            ("Sun 02:00-04:00", "<days> <HH:MM>-<HH:MM> <time zone>"),
            ("Sunday 02:00-04:00 UTC", "is not a day"),
            ("Sun 2:00-04:00 UTC", "is not a time"),
            ("Sun 02:00-04:61 UTC", "is not a time"),
            ("Sun 02:00-02:00 UTC", "is empty"),
            (
                "Sun 02:00-04:00 Mars/Olympus",
                "time zone \"Mars/Olympus\" is not known",
            ),
            ("Sun 02:00 UTC", "not a time range"),
        ] {
            let e = MaintenanceWindow::parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn spec_fields_parse_and_errors_name_file_and_line() {
        let (specs, diags) = crate::spec::parse_test_spec(
            "    rebootPolicy: Window\n    maintenanceWindow: \"Sat,Sun 01:00-05:00 Europe/Berlin\"\n    \
             shutdownTimeout: 5m\n    forceStopAfter: 10m\n",
        );
        assert!(diags.is_empty(), "{diags:?}");
        let r = &specs[0].reboot;
        assert_eq!(r.mode, RebootMode::Window);
        assert_eq!(
            (r.shutdown_timeout_secs, r.force_stop_after_secs),
            (300, Some(600))
        );
        assert_eq!(
            crate::spec::parse_test_spec("").0[0].reboot,
            RebootPolicy::default()
        );

        for (extra, want) in [
            (
                "    rebootPolicy: ifneeded\n",
                "web.yaml:9:19: error: spec.forProvider.rebootPolicy \"ifneeded\" is not valid (did you mean \"IfNeeded\"?)",
            ),
            (
                "    rebootPolicy: Window\n",
                "rebootPolicy: Window needs spec.forProvider.maintenanceWindow",
            ),
            (
                "    maintenanceWindow: \"Sun 02:00-04:00 UTC\"\n",
                "web.yaml:9:24: error: maintenanceWindow is used only with rebootPolicy: Window",
            ),
            (
                "    rebootPolicy: Window\n    maintenanceWindow: \"Sun 02:00-04:00 CEST\"\n",
                "web.yaml:10:24: error: time zone \"CEST\" is not known",
            ),
            (
                "    forceStopAfter: 2d\n",
                "web.yaml:9:21: error: spec.forProvider.forceStopAfter \"2d\" is longer than a day",
            ),
            (
                "    shutdownTimeout: 5\n",
                "web.yaml:9:22: error: spec.forProvider.shutdownTimeout must be a duration with a unit, e.g. \"5s\"",
            ),
            (
                "    shutdownTimeout: \"5\"\n",
                "spec.forProvider.shutdownTimeout \"5\": a number without a unit",
            ),
        ] {
            let (specs, diags) = crate::spec::parse_test_spec(extra);
            assert!(specs.is_empty(), "{extra}");
            assert!(diags.iter().any(|d| d.contains(want)), "{extra}: {diags:?}");
        }
    }

    #[test]
    fn next_edge_is_where_the_window_opens_or_closes() {
        let w = MaintenanceWindow::parse("Sun 02:00-04:00 Europe/Berlin").unwrap();
        // Saturday noon: Sunday's 02:00 in Berlin (CET), then 04:00.
        let sat = at("2026-11-21T12:00:00Z");
        assert_eq!(w.next_edge(sat), Some(at("2026-11-22T01:00:00Z")));
        assert_eq!(
            w.next_edge(at("2026-11-22T01:30:00Z")),
            Some(at("2026-11-22T03:00:00Z"))
        );
        // A clock jump comes first: Berlin leaves summer time on 2026-10-25 at 01:00 UTC.
        let w = MaintenanceWindow::parse("Mon 05:00-06:00 Europe/Berlin").unwrap();
        assert_eq!(
            w.next_edge(at("2026-10-24T23:00:00Z")),
            Some(at("2026-10-25T01:00:00Z"))
        );
        assert_eq!(
            MaintenanceWindow::parse("* 22:00-02:00 UTC")
                .unwrap()
                .next_edge(sat),
            Some(at("2026-11-21T22:00:00Z"))
        );
    }

    proptest::proptest! {
        /// Between an instant and its next edge, `contains` answers as at the instant: the plan
        /// made at `now` holds until then.
        #[test]
        fn contains_holds_until_the_next_edge(
            days in "(\\*|Mon|Sat,Sun|Mon-Fri|Fri-Mon)",
            start in 0u16..1440,
            len in 1u16..1440,
            tz in "(UTC|Europe/Berlin|America/New_York|Asia/Kathmandu|Australia/Lord_Howe)",
            now in 1_700_000_000_000u64..1_800_000_000_000,
            steps in proptest::collection::vec(0u64..1_000, 1..40),
        ) {
            let end = (start + len) % 1440;
            let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
            let w = MaintenanceWindow::parse(&format!("{days} {}-{} {tz}", hm(start), hm(end))).unwrap();
            let edge = w.next_edge(now).unwrap();
            proptest::prop_assert!(edge > now);
            let inside = w.contains(now);
            // Instants spread from now to just before the edge, and the last one before it.
            let span = edge - now;
            for s in steps.iter().map(|s| s * span / 1_000).chain([span - 1]) {
                proptest::prop_assert_eq!(w.contains(now + s), inside, "at now + {} ms (edge {})", s, edge);
            }
        }
    }

    #[test]
    fn policies() {
        let w = MaintenanceWindow::parse("Sun 02:00-04:00 UTC").unwrap();
        let sunday = at("2026-11-22T02:30:00Z");
        let monday = at("2026-11-23T02:30:00Z");
        let p = |mode, window: Option<MaintenanceWindow>| RebootPolicy {
            mode,
            window: window.map(Box::new),
            ..Default::default()
        };
        assert!(!p(RebootMode::Never, None).allows_at(sunday));
        assert!(p(RebootMode::IfNeeded, None).allows_at(monday));
        assert!(p(RebootMode::Window, Some(w.clone())).allows_at(sunday));
        assert!(!p(RebootMode::Window, Some(w)).allows_at(monday));
    }
}
