//! Durations as people write them in the config and the specs: `30s`, `5m`, `1h30m`, `1h 30m`.

use std::time::Duration;

/// Parses durations written like `30s`, `5m`, `1h`, `1h30m`, `2d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const VALID: &str = "write a number with a unit s, m, h or d, for example \"30s\", \"5m\", \
                         \"1h30m\" or \"1h 30m\"";
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("empty duration; {VALID}"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("a number without a unit; {VALID}"));
    }
    // jiff's friendly format (`1h30m`, `1h 30m`, `2 days`); a day is 24 hours here.
    let span: jiff::Span = text.parse().map_err(|e| format!("{e}; {VALID}"))?;
    let d = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| format!("{e}; {VALID}"))?;
    if d.is_negative() || d.is_zero() {
        return Err(format!("must be longer than zero; {VALID}"));
    }
    if d.as_secs() > 365 * 86400 {
        return Err("longer than a year".to_string());
    }
    Duration::try_from(d).map_err(|e| e.to_string())
}
