//! Text for a terminal: colours, tables, control characters made harmless, durations.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Color {
    Green,
    Red,
    Yellow,
}

/// Paints text when colour is on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Paint(pub(super) bool);

impl Paint {
    pub(super) fn paint(self, color: Color, text: &str) -> String {
        if !self.0 || text.is_empty() {
            return text.to_string();
        }
        let style = match color {
            Color::Green => anstyle::AnsiColor::Green,
            Color::Red => anstyle::AnsiColor::Red,
            Color::Yellow => anstyle::AnsiColor::Yellow,
        }
        .on_default();
        format!("{style}{text}{style:#}")
    }
}

/// The colour of a condition where True is good (Ready, NodeHealthy, Provisioned).
pub(super) fn positive(s: ConditionStatus) -> Color {
    match s {
        ConditionStatus::True => Color::Green,
        ConditionStatus::False => Color::Red,
        ConditionStatus::Unknown => Color::Yellow,
    }
}

/// A condition's colour by its polarity: Stalled and RebootPending are bad when True,
/// Reconciling is work in progress when True, the others are good when True.
pub(super) fn condition_color(kind: &str, s: ConditionStatus) -> Color {
    match (kind, s) {
        (_, ConditionStatus::Unknown) => Color::Yellow,
        (kinds::STALLED, ConditionStatus::True) => Color::Red,
        (kinds::REBOOT_PENDING | kinds::RECONCILING, ConditionStatus::True) => Color::Yellow,
        (kinds::STALLED | kinds::REBOOT_PENDING | kinds::RECONCILING, _) => Color::Green,
        _ => positive(s),
    }
}

pub(super) struct Cell {
    pub(super) text: String,
    pub(super) color: Option<Color>,
}

impl Cell {
    pub(super) fn plain(text: String) -> Cell {
        Cell { text, color: None }
    }
}

/// Lays out a table with two spaces between columns. The last column is not padded; with
/// `width`, it is cut so lines fit in `width` columns (but never below
/// [`MIN_MESSAGE_WIDTH`]). Widths count characters.
pub(super) fn table(
    indent: &str,
    headers: &[&str],
    rows: &[Vec<Cell>],
    width: Option<usize>,
    p: Paint,
) -> String {
    let n = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.text.chars().count());
        }
    }
    let last_max = width.map(|total| {
        let fixed: usize = indent.len()
            + widths
                .iter()
                .take(n.saturating_sub(1))
                .map(|w| w + 2)
                .sum::<usize>();
        total.saturating_sub(fixed).max(MIN_MESSAGE_WIDTH)
    });
    let mut out = String::new();
    let mut line = |cells: Vec<(String, Option<Color>)>| {
        let mut l = String::from(indent);
        for (i, (text, color)) in cells.into_iter().enumerate() {
            let is_last = i + 1 == n;
            let text = match (is_last, last_max) {
                (true, Some(max)) => cut(&text, max),
                _ => text,
            };
            let pad = if is_last {
                0
            } else {
                (widths.get(i).copied().unwrap_or(0) + 2).saturating_sub(text.chars().count())
            };
            match color {
                Some(c) => l.push_str(&p.paint(c, &text)),
                None => l.push_str(&text),
            }
            l.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.iter().map(|h| (h.to_string(), None)).collect());
    for row in rows {
        line(
            (0..n)
                .map(|i| match row.get(i) {
                    Some(c) => (c.text.clone(), c.color),
                    None => (String::new(), None),
                })
                .collect(),
        );
    }
    out
}

/// Replaces control characters (and bidi overrides) so file content cannot drive the
/// terminal: line breaks and tabs become spaces, the rest `?`.
pub(crate) fn clean(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' | '\u{2028}' | '\u{2029}' => ' ',
            c if is_unsafe(c) => '?',
            c => c,
        })
        .collect()
}

/// Control characters (C0, DEL, C1), line/paragraph separators and bidi controls.
pub(crate) fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// serde_json leaves DEL, C1 controls (U+0080-U+009F, which some terminals obey) and bidi
/// overrides raw; escape them as `\uXXXX`, which is the same JSON. They can only occur inside
/// strings, and every one of them is in the BMP. Adds the final newline.
pub(crate) fn json_for_terminal(json: String) -> String {
    let mut out = String::with_capacity(json.len() + 1);
    for c in json.chars() {
        if c != '\n' && is_unsafe(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    out
}

/// Cuts to at most `max` characters, ending with `…` when cut.
/// [`cut`] to a line's width, or whole when lines are not cut (`None`).
pub(super) fn cut_to(s: &str, width: Option<usize>) -> String {
    match width {
        Some(max) => cut(s, max),
        None => s.to_string(),
    }
}

pub(super) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

pub(super) fn or_dash(s: &str) -> String {
    let s = clean(s);
    if s.trim().is_empty() {
        "-".to_string()
    } else {
        s
    }
}

pub(super) fn site_node(site: &str, node: &str) -> String {
    format!("{}/{}", or_dash(site), or_dash(node))
}

/// The first 7 characters of a commit id (the whole value when it is not a hex id).
pub(super) fn short_commit(c: &str) -> String {
    if c.len() > 7 && c.bytes().all(|b| b.is_ascii_hexdigit()) {
        c.get(..7).unwrap_or(c).to_string()
    } else {
        c.to_string()
    }
}

pub(crate) use crate::util::time::human;

/// The age of an RFC 3339 time (`5m`); `0s` for a time in the future (clock skew), `?`
/// when it cannot be parsed.
pub(super) fn age(now: SystemTime, ts: &str) -> String {
    match parse_rfc3339(ts) {
        Some(t) => human(now.duration_since(t).unwrap_or_default()),
        None => "?".to_string(),
    }
}

/// `5m ago` (or `in 3s` for a time ahead of this host's clock).
pub(super) fn ago(now: SystemTime, t: SystemTime) -> String {
    match now.duration_since(t) {
        Ok(d) => format!("{} ago", human(d)),
        Err(e) => format!("in {} (clock skew?)", human(e.duration())),
    }
}

/// `in 4m`, or `due now` once the time has passed.
pub(super) fn until(now: SystemTime, t: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(d) if d.as_secs() > 0 => format!("in {}", human(d)),
        _ => "due now".to_string(),
    }
}

/// `2025-03-01T12:00:00Z (5m ago)`, or `-`.
pub(super) fn when(now: SystemTime, ts: &str) -> String {
    match parse_rfc3339(ts) {
        Some(t) => format!("{} ({})", clean(ts), ago(now, t)),
        None => or_dash(ts),
    }
}
