//! The retry schedule of a failing spec (docs/concepts.md, "Backoff"): 30s, 1m, 2m, 5m, then
//! every 10m, each with up to ±10% jitter so specs failing together spread out. Errors that need
//! a human wait the full cap at once. Nothing is terminal: the cap is retried for ever, and a
//! change of the spec or the config resets the count.
//!
//! The jitter is derived from the spec name and the attempt number, not from a clock or a
//! random source, so planning stays a pure function.

use std::time::Duration;

/// The schedule, by number of consecutive failures.
pub(crate) const SCHEDULE: [Duration; 5] = [
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(120),
    Duration::from_secs(300),
    Duration::from_secs(600),
];

/// The longest wait.
pub(crate) const CAP: Duration = SCHEDULE[4];

/// The delay before the next attempt after `attempts` consecutive failures (1 = first).
pub(crate) fn delay(spec: &str, attempts: u32, needs_human: bool) -> Duration {
    let base = if needs_human {
        CAP
    } else {
        let i = attempts.saturating_sub(1).min(SCHEDULE.len() as u32 - 1) as usize;
        SCHEDULE[i]
    };
    jitter(base, spec, attempts)
}

/// ±10% of `base`, from a hash of the name and attempt.
fn jitter(base: Duration, spec: &str, attempts: u32) -> Duration {
    // FNV-1a: tiny, stable across builds and platforms.
    let h = crate::util::fnv::fnv(spec.bytes().chain(attempts.to_le_bytes()));
    let permille = (h % 201) as i64 - 100; // -100..=100 -> ±10.0%
    let ms = base.as_millis() as i64;
    Duration::from_millis((ms + ms * permille / 1000).max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_schedule_within_jitter() {
        for (attempt, want) in [
            (1, 30),
            (2, 60),
            (3, 120),
            (4, 300),
            (5, 600),
            (6, 600),
            (50, 600),
        ] {
            let d = delay("web-01", attempt, false).as_secs_f64();
            let want = want as f64;
            assert!(
                d >= want * 0.9 && d <= want * 1.1,
                "attempt {attempt}: {d} vs {want}"
            );
        }
    }

    #[test]
    fn human_errors_wait_the_cap() {
        let d = delay("web-01", 1, true).as_secs_f64();
        assert!(d >= 540.0, "{d}");
    }

    #[test]
    fn jitter_is_deterministic_and_spreads() {
        assert_eq!(delay("a", 1, false), delay("a", 1, false));
        let distinct: std::collections::BTreeSet<_> = (0..20)
            .map(|i| delay(&format!("spec-{i}"), 1, false))
            .collect();
        assert!(distinct.len() > 10, "{distinct:?}");
    }
}
