//! How long one node's tasks of one kind usually take, learnt from the waits that saw such
//! tasks end, so that a wait reads its task first when it has most likely ended: a 2 s clone
//! is read at about 2 s and costs one read, where reading it young and then at a pace set by
//! its age cost several and noticed its end up to a quarter of its age late.
//!
//! The estimate follows the duration by which most tasks have ended (about [`HIT_PERMILLE`] of
//! them, a quantile tracked by steps): tasks first read at the estimate and found ended move it
//! down a little, by a step that doubles while they keep doing so (up to [`MAX_DOWN_STEPS`]
//! steps); one still running moves it up at once to [`STEP_PERMILLE`] above the estimate it was
//! read at (at least to the middle of the two reads around its end). Waits read at the same
//! estimate are one observation (they started together and saw the same thing: five creates
//! in step must not raise it five times). Tasks of one length settle the estimate a few percent
//! above that length; tasks that suddenly take longer raise it at once. The first estimate is
//! the middle of the two reads around the first end seen (the waits before it read more often,
//! see `tasks`), and a wait that was not read at the estimate only moves it when its two reads
//! show it wrong. Pure: no clock, no I/O; the offsets are counted from the wait's start.

use std::time::Duration;

/// The share (per mille) of tasks the first read at the estimate should find ended.
pub(crate) const HIT_PERMILLE: u64 = 900;

/// How far a task still running at its first read moves the estimate up (per mille of the
/// estimate it was read at); tasks found ended move it down by `STEP * (1000 - HIT) / HIT`
/// (doubled while they go on doing so), so that most first reads find their task ended.
const STEP_PERMILLE: u64 = 40;

/// The most steps down one observation makes (after a run of tasks found ended).
pub(crate) const MAX_DOWN_STEPS: u64 = 4;

/// The reads after a first read at the estimate that found the task running, before the wait
/// goes on at the pace of the overrun: at 1, 2 and 4 steps after the previous read.
pub(crate) const FOLLOW_UPS: u32 = 3;

/// The shortest pause before a follow-up read.
const MIN_FOLLOW_UP: Duration = Duration::from_millis(20);

/// The smallest estimate: a task is never read before this (a read sent together with the
/// request's answer finds most tasks still forking).
const MIN_ESTIMATE: Duration = Duration::from_millis(5);

/// The learnt duration of one node's tasks of one kind (none until a wait saw one end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pace {
    estimate: Option<Duration>,
    /// Steps of the next move down (1, 2, 4, ... [`MAX_DOWN_STEPS`]); back to 1 after a rise.
    down_steps: u64,
    /// The estimate the last move down was made for: more waits read at it move nothing.
    lowered_from: Option<Duration>,
}

/// What one wait saw of a task that ended well, as offsets from the wait's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The last read that found the task running; `None`: the first read found it ended.
    pub running: Option<Duration>,
    /// The read that found it ended.
    pub ended: Duration,
}

impl Pace {
    /// When to read a task of this kind first, counted from the wait's start: at the estimate;
    /// `None` while nothing was learnt.
    pub(crate) fn first_read(&self) -> Option<Duration> {
        self.estimate
    }

    /// Learns from one wait that saw its task end well; `planned`: the estimate its first read
    /// was made at (`None`: it was not read at an estimate).
    pub(crate) fn learn(&mut self, seen: Seen, planned: Option<Duration>) {
        let lo = seen.running.unwrap_or_default();
        let middle = lo + seen.ended.saturating_sub(lo) / 2;
        let Some(est) = self.estimate else {
            self.set(middle);
            return;
        };
        match (planned, seen.running) {
            // Not read at the estimate: only a task that ended before it or ran past it tells.
            (None, _) if est > seen.ended || est <= lo => self.set(middle),
            (None, _) => {}
            // Found ended, read at an estimate not raised since and not yet moved down for.
            (Some(at), None) if est <= at && self.lowered_from != Some(at) => {
                // at * (1 - steps * STEP * (1 - HIT) / HIT), in parts per million.
                let steps = self.down_steps.clamp(1, MAX_DOWN_STEPS);
                let down = steps * STEP_PERMILLE * (1000 - HIT_PERMILLE) * 1000 / HIT_PERMILLE;
                self.set(est.min(ratio(at, 1_000_000u64.saturating_sub(down), 1_000_000)));
                self.down_steps = (steps * 2).min(MAX_DOWN_STEPS);
                self.lowered_from = Some(at);
            }
            (Some(_), None) => {}
            (Some(at), Some(_)) => {
                self.set(est.max(scale(at, 1000 + STEP_PERMILLE)).max(middle));
                self.down_steps = 1;
                self.lowered_from = None;
            }
        }
    }

    fn set(&mut self, estimate: Duration) {
        self.estimate = Some(estimate.max(MIN_ESTIMATE));
    }
}

/// The pause before follow-up read `k` (1-based) of a task first read at `planned` and found
/// running: 1, 2, then 4 steps of [`STEP_PERMILLE`] of the plan (at least [`MIN_FOLLOW_UP`]);
/// `None` past [`FOLLOW_UPS`].
pub(crate) fn follow_up(planned: Duration, k: u32) -> Option<Duration> {
    if k == 0 || k > FOLLOW_UPS {
        return None;
    }
    let step = scale(planned, STEP_PERMILLE).max(MIN_FOLLOW_UP);
    Some(step * (1 << (k - 1)))
}

fn scale(d: Duration, permille: u64) -> Duration {
    ratio(d, permille, 1000)
}

fn ratio(d: Duration, num: u64, den: u64) -> Duration {
    let nanos = d.as_nanos().saturating_mul(u128::from(num)) / u128::from(den.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A wait of a task lasting `took`, first read at `first` then every `every`.
    fn wait(first: Duration, every: Duration, took: Duration) -> Seen {
        if first >= took {
            return Seen {
                running: None,
                ended: first,
            };
        }
        let mut at = first;
        while at + every < took {
            at += every;
        }
        Seen {
            running: Some(at),
            ended: at + every,
        }
    }

    #[test]
    fn nothing_is_known_until_a_task_ended_then_the_middle_of_its_end() {
        let mut p = Pace::default();
        assert_eq!(p.first_read(), None);
        // A 2 s clone read young, then every 250 ms: running at 1.85 s, ended at 2.1 s.
        p.learn(wait(ms(100), ms(250), ms(2000)), None);
        assert_eq!(p.first_read(), Some(Duration::from_micros(1_975_000)));
        // A quick task found ended at its first read: at most that long.
        let mut q = Pace::default();
        q.learn(
            Seen {
                running: None,
                ended: ms(100),
            },
            None,
        );
        assert_eq!(q.first_read(), Some(ms(50)));
    }

    #[test]
    fn a_wait_not_read_at_the_estimate_moves_it_only_when_it_shows_it_wrong() {
        let mut p = Pace::default();
        p.learn(
            Seen {
                running: Some(ms(1800)),
                ended: ms(2200),
            },
            None,
        );
        assert_eq!(p.first_read(), Some(ms(2000)));
        // Other waits of the same first round: around the estimate, nothing changes...
        for _ in 0..5 {
            p.learn(
                Seen {
                    running: Some(ms(1900)),
                    ended: ms(2150),
                },
                None,
            );
        }
        assert_eq!(p.first_read(), Some(ms(2000)), "not 4 % up per wait");
        // ...but one that ended before it, or ran past it, does.
        p.learn(
            Seen {
                running: Some(ms(1700)),
                ended: ms(1900),
            },
            None,
        );
        assert_eq!(p.first_read(), Some(ms(1800)));
        p.learn(
            Seen {
                running: Some(ms(2500)),
                ended: ms(2700),
            },
            None,
        );
        assert_eq!(p.first_read(), Some(ms(2600)));
    }

    #[test]
    fn tasks_of_one_length_are_read_a_little_after_they_end_most_of_the_time() {
        for took in [ms(1000), ms(2000), ms(30_000)] {
            let mut p = Pace::default();
            p.learn(wait(ms(100), ms(250), took), None);
            let (mut hits, mut late) = (0, Duration::ZERO);
            for _ in 0..200 {
                let first = p.first_read().unwrap();
                let step = follow_up(first, 1).unwrap();
                let seen = wait(first, step, took);
                hits += u32::from(seen.running.is_none());
                late += seen.ended - took;
                p.learn(seen, Some(first));
            }
            let est = p.first_read().unwrap();
            assert!(
                est >= scale(took, 980) && est <= scale(took, 1050),
                "{took:?}: settled at {est:?}"
            );
            assert!(hits >= 140, "{took:?}: {hits} of 200 read once");
            assert!(
                late / 200 <= scale(took, 40),
                "{took:?}: noticed {:?} late on average",
                late / 200
            );
        }
    }

    #[test]
    fn a_longer_task_raises_the_estimate_at_once_a_shorter_one_slowly() {
        let mut p = Pace::default();
        p.learn(
            Seen {
                running: Some(ms(1900)),
                ended: ms(2100),
            },
            None,
        );
        assert_eq!(p.first_read(), Some(ms(2000)));
        // Now one takes 10 s: read at 2 s and on, seen running at 8 s, ended at 12 s.
        p.learn(
            Seen {
                running: Some(ms(8000)),
                ended: ms(12_000),
            },
            Some(ms(2000)),
        );
        assert_eq!(p.first_read(), Some(ms(10_000)), "the middle of its end");
        // A quicker one, found ended at the first read, lowers it by 0.44 %.
        p.learn(
            Seen {
                running: None,
                ended: ms(10_000),
            },
            Some(ms(10_000)),
        );
        assert_eq!(p.first_read(), Some(Duration::from_micros(9_955_560)));
    }

    #[test]
    fn never_read_before_the_floor() {
        let mut p = Pace::default();
        p.learn(
            Seen {
                running: None,
                ended: ms(1),
            },
            None,
        );
        for _ in 0..1000 {
            let at = p.first_read();
            p.learn(
                Seen {
                    running: None,
                    ended: ms(5),
                },
                at,
            );
        }
        assert_eq!(p.first_read(), Some(MIN_ESTIMATE));
    }

    #[test]
    fn waits_read_at_one_estimate_are_one_observation_and_steps_down_double() {
        let p0 = {
            let mut p = Pace::default();
            p.learn(
                Seen {
                    running: Some(ms(900)),
                    ended: ms(1100),
                },
                None,
            );
            p
        };
        assert_eq!(p0.first_read(), Some(ms(1000)));
        let at = Some(ms(1000));
        let running = Seen {
            running: Some(ms(1000)),
            ended: ms(1040),
        };
        let ended = Seen {
            running: None,
            ended: ms(1000),
        };
        // Five creates in step, all still running at 1 s: up 4 % once, not five times.
        let mut p = p0;
        for _ in 0..5 {
            p.learn(running, at);
        }
        assert_eq!(p.first_read(), Some(ms(1040)));
        // A wait of that round found ended after one found running moves nothing back down.
        p.learn(ended, at);
        assert_eq!(p.first_read(), Some(ms(1040)));
        // Five found ended: one step down (0.44 %); the next rounds, each read at the estimate
        // the last left, two steps, then four at most.
        let mut p = p0;
        for _ in 0..5 {
            p.learn(ended, at);
        }
        let mut seen = vec![p.first_read().unwrap()];
        for _ in 0..5 {
            let at = p.first_read();
            p.learn(ended, at);
            p.learn(ended, at);
            seen.push(p.first_read().unwrap());
        }
        let micros: Vec<u128> = seen.iter().map(Duration::as_micros).collect();
        assert_eq!(micros[0], 995_556);
        // Each round's drop, in parts per ten thousand: 0.89 %, then 1.78 % at most.
        let drops: Vec<u128> = micros
            .windows(2)
            .map(|w| ((w[0] - w[1]) * 10_000 + w[0] / 2) / w[0])
            .collect();
        assert_eq!(drops, [89, 178, 178, 178, 178], "{micros:?}");
    }

    #[test]
    fn follow_ups_double_from_a_step_of_the_plan() {
        assert_eq!(follow_up(ms(2000), 0), None);
        assert_eq!(follow_up(ms(2000), 1), Some(ms(80)));
        assert_eq!(follow_up(ms(2000), 2), Some(ms(160)));
        assert_eq!(follow_up(ms(2000), 3), Some(ms(320)));
        assert_eq!(follow_up(ms(2000), 4), None);
        assert_eq!(follow_up(ms(50), 1), Some(MIN_FOLLOW_UP), "at least 20 ms");
    }
}
