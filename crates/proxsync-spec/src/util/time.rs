//! RFC 3339 timestamps, as the status files write them: the strict syntax here, the
//! calendar (dates, leap years, the epoch) jiff's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 0000-01-01T00:00:00Z in Unix seconds: the start of the range RFC 3339 can express;
/// [`rfc3339`] clamps to it.
pub const MIN_UNIX: i64 = -62_167_219_200;
/// 9999-12-31T23:59:59Z in Unix seconds: the end of the range RFC 3339 can express;
/// [`rfc3339`] clamps to it.
pub const MAX_UNIX: i64 = 253_402_300_799;

/// RFC 3339 in UTC with whole seconds (`2025-03-01T12:00:00Z`), as Kubernetes writes
/// `lastTransitionTime`. Sub-seconds are dropped; times outside years 0000-9999 are clamped.
pub fn rfc3339(t: SystemTime) -> String {
    rfc3339_secs(unix_secs(t))
}

/// Whole seconds since the Unix epoch, floored towards the past (what [`rfc3339`] writes).
pub fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            // floor towards the past
            whole
                .saturating_neg()
                .saturating_sub(i64::from(d.subsec_nanos() > 0))
        }
    }
}

/// The Unix epoch as a civil date-time in UTC: jiff's civil type spans years 0000-9999 whole,
/// where its `Timestamp` stops short of 9999-12-31 (an offset must fit).
const EPOCH: jiff::civil::DateTime = jiff::civil::date(1970, 1, 1).at(0, 0, 0, 0);

/// [`rfc3339`] of whole seconds since the Unix epoch.
pub fn rfc3339_secs(secs: i64) -> String {
    // In range by the clamp, so the fallback is never taken.
    EPOCH
        .checked_add(jiff::SignedDuration::from_secs(
            secs.clamp(MIN_UNIX, MAX_UNIX),
        ))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Parses an RFC 3339 date-time (`2025-03-01T12:00:00Z`, `…T12:00:00.5+02:00`, `t`/`z` in
/// lower case too). `None` for anything else, including impossible dates.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let digits = b.get(from..from + len)?;
        digits.iter().try_fold(0i64, |acc, c| {
            c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
        })
    };
    let sep = |at: usize, want: &[u8]| b.get(at).is_some_and(|c| want.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    // jiff refuses an impossible date (2025-02-29) and hour; a leap second (60) is the next
    // second's start, as before.
    let date = jiff::civil::Date::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
    )
    .ok()?;
    if second > 60 {
        return None;
    }
    let leap = second == 60;
    let time = jiff::civil::Time::new(
        i8::try_from(hour).ok()?,
        i8::try_from(minute).ok()?,
        i8::try_from(if leap { 59 } else { second }).ok()?,
        0,
    )
    .ok()?;
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..9 {
            nanos *= 10;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' => {
            i += 1;
            0
        }
        sign @ (b'+' | b'-') => {
            if !sep(i + 3, b":") {
                return None;
            }
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            i += 6;
            let off = oh * 3600 + om * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    if i != b.len() {
        return None;
    }
    let secs = date.to_datetime(time).duration_since(EPOCH).as_secs() + i64::from(leap) - offset;
    let base = if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(secs.unsigned_abs()))?
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))?
    };
    base.checked_add(Duration::from_nanos(u64::from(nanos)))
}
/// `42s`, `5m`, `3h`, `2d`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `14:20:23 UTC (in 5m)`, with the date when it is not today.
pub fn clock_time(at_ms: u64, now_ms: u64) -> String {
    let ts = |ms: u64| jiff::Timestamp::from_millisecond(ms as i64).ok();
    let (Some(at), Some(now)) = (ts(at_ms), ts(now_ms)) else {
        return format!("{at_ms} ms after the epoch");
    };
    let (at, now) = (
        at.to_zoned(jiff::tz::TimeZone::UTC),
        now.to_zoned(jiff::tz::TimeZone::UTC),
    );
    let when = if at.date() == now.date() {
        at.strftime("%H:%M:%S UTC").to_string()
    } else {
        at.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
    };
    let until = std::time::Duration::from_millis(at_ms.saturating_sub(now_ms));
    if at_ms > now_ms {
        format!("{when} (in {})", human(until))
    } else {
        when
    }
}
