//! How many actions proxsync runs at once on one node: found by itself, up to
//! `max_parallel_per_node` (the cap), instead of one fixed number.
//!
//! No fixed number suits every cluster: what a node's storage takes at once decides, and too
//! many clones at once end in PVE's `can't lock file '/var/lock/pve-manager/pve-storage-ID' -
//! got timeout` (see `pve::is_lock_timeout`). So each node's limit starts at `START` and
//! grows while the node's tasks end in their usual time and nothing fails: by one per task
//! until the first cut (a doubling per round of tasks), by one per round after it. It is cut
//! to `CUT_PERMILLE` of itself when a task of the node takes much longer than usual
//! (`climbing`), or PVE says it is overloaded: lock contention, a gateway's 5xx or one
//! whose text is no answer `pve::texts` knows (a plain `die` of a refusal is HTTP 500 too, and
//! not load), a request that timed out (`pve::Error::is_overload`). One cut per burst: a
//! signal from work begun before the last cut was caused by the limit already cut.
//!
//! Pure: no I/O, no clock (every instant is passed in). [`NodeLimits`] holds one
//! [`Concurrency`] per node of a site; `pve::Client` feeds it from its requests and task waits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The limit a node starts with (proxsync's fixed default before it adapted).
pub(crate) const START: u32 = 2;

/// A cut keeps this share of the limit (per mille), at least 1.
pub(crate) const CUT_PERMILLE: u32 = 700;

/// A task took "much longer than usual" past this share of its kind's baseline (per mille)...
const CLIMB_PERMILLE: u32 = 1500;
/// ...plus this much (the pace of the polls that notice an end).
const CLIMB_SLACK: Duration = Duration::from_millis(500);

/// The task types whose duration tells how busy the node is (a shutdown's tells how its guest
/// behaves, a migration's how big the VM is: neither raises nor cuts).
/// A container's create, clone and start (pve-container's `vz*`) tell it as a VM's do.
const LOAD_TASKS: [&str; 8] = [
    "qmclone", "qmcreate", "qmconfig", "qmstart", "resize", "vzcreate", "vzclone", "vzstart",
];

/// One node's limit.
#[derive(Debug, Clone)]
pub(crate) struct Concurrency {
    /// The limit before rounding down: it grows by fractions in the steady state.
    window: f64,
    /// Below it the window grows by one per task (slow start), above by one per round.
    threshold: f64,
    cap: u32,
    /// When the window was last cut.
    last_cut: Option<Instant>,
    /// Per task type, the duration its tasks take here when the node is not busy: the shortest
    /// seen, drifting up slowly toward what they take now.
    baselines: HashMap<String, Duration>,
}

impl Concurrency {
    /// A node's limit before anything was seen there: [`START`], at most `cap` (at least 1).
    pub(crate) fn new(cap: u32) -> Concurrency {
        let cap = cap.max(1);
        Concurrency {
            window: f64::from(START.min(cap)),
            threshold: f64::from(cap),
            cap,
            last_cut: None,
            baselines: HashMap::new(),
        }
    }

    /// [`Concurrency::new`], each task type in `baselines` taken to last that long when the
    /// node is not busy (what `doctor --exercise` measured) until its own tasks say otherwise:
    /// the first task that takes much longer cuts the limit, as a later one would.
    pub(crate) fn with_baselines(cap: u32, baselines: &HashMap<String, Duration>) -> Concurrency {
        let mut c = Concurrency::new(cap);
        c.baselines.extend(
            baselines
                .iter()
                .filter(|(kind, _)| LOAD_TASKS.contains(&kind.as_str()))
                .map(|(k, d)| (k.clone(), *d)),
        );
        c
    }

    /// How many actions may run at once now.
    pub(crate) fn limit(&self) -> u32 {
        (self.window.floor() as u32).clamp(1, self.cap)
    }

    /// A task of type `kind`, begun at `began`, ended well after `took`: raises the limit, or
    /// cuts it when the task took much longer than its kind usually does here.
    pub(crate) fn task_ended(&mut self, kind: &str, began: Instant, took: Duration, now: Instant) {
        if !LOAD_TASKS.contains(&kind) {
            return;
        }
        let base = self.baselines.get(kind).copied();
        let climbed = base.is_some_and(|b| climbing(b, took));
        self.baselines
            .insert(kind.to_string(), next_baseline(base, took, climbed));
        if climbed {
            self.overloaded(began, now);
        } else {
            self.raise();
        }
    }

    /// PVE said the node is overloaded, about work begun at `began`: cut the limit, unless
    /// the last cut came after that work began.
    pub(crate) fn overloaded(&mut self, began: Instant, now: Instant) {
        if self.last_cut.is_some_and(|cut| began < cut) {
            return;
        }
        self.window = (self.window * f64::from(CUT_PERMILLE) / 1000.0).max(1.0);
        self.threshold = self.window;
        self.last_cut = Some(now);
    }

    fn raise(&mut self) {
        self.window += if self.window < self.threshold {
            1.0
        } else {
            1.0 / self.window
        };
        self.window = self.window.min(f64::from(self.cap));
    }
}

/// Whether a task that took `took` took much longer than its kind's `baseline`.
pub(crate) fn climbing(baseline: Duration, took: Duration) -> bool {
    took > baseline * CLIMB_PERMILLE / 1000 + CLIMB_SLACK
}

/// The baseline after a task that took `took`: the shortest yet, else an eighth of the way
/// toward it after a climb (so a lasting change, bigger disks, stops cutting after a few tasks)
/// and a thirty-second otherwise.
fn next_baseline(base: Option<Duration>, took: Duration, climbed: bool) -> Duration {
    match base {
        None => took,
        Some(b) if took <= b => took,
        Some(b) => b + (took - b) / if climbed { 8 } else { 32 },
    }
}

/// Per node of one site: its [`Concurrency`] (adaptive), or always the cap (fixed).
#[derive(Debug)]
pub struct NodeLimits {
    adaptive: bool,
    cap: u32,
    nodes: Mutex<HashMap<String, Concurrency>>,
    /// Each node's first estimates of its task types ([`Concurrency::with_baselines`]).
    seeds: HashMap<String, Duration>,
}

impl NodeLimits {
    /// The limits of one site's nodes, at most `cap` each (a `cap` of 0 counts as 1): when
    /// `adaptive`, each node's starts at 2 and is found from there; else it is always `cap`.
    pub fn new(adaptive: bool, cap: u32) -> NodeLimits {
        NodeLimits {
            adaptive,
            cap: cap.max(1),
            nodes: Mutex::new(HashMap::new()),
            seeds: HashMap::new(),
        }
    }

    /// Every node's first estimate of how long each task type takes (by its type:
    /// `qmclone`, ...), before any of its tasks was seen.
    pub fn seeded(mut self, seeds: HashMap<String, Duration>) -> NodeLimits {
        self.seeds = seeds;
        self
    }

    /// How many actions may run at once on `node` now.
    pub fn limit(&self, node: &str) -> u32 {
        if !self.adaptive {
            return self.cap;
        }
        self.lock()
            .get(node)
            .map_or(START.min(self.cap), Concurrency::limit)
    }

    /// See [`Concurrency::task_ended`]; the node's limit after it.
    pub fn task_ended(
        &self,
        node: &str,
        kind: &str,
        began: Instant,
        took: Duration,
        now: Instant,
    ) -> u32 {
        self.update(node, |c| c.task_ended(kind, began, took, now))
    }

    /// See [`Concurrency::overloaded`]; the node's limit after it.
    pub fn overloaded(&self, node: &str, began: Instant, now: Instant) -> u32 {
        self.update(node, |c| c.overloaded(began, now))
    }

    /// Each node something was learnt about, with its limit now.
    pub fn limits(&self) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = self
            .lock()
            .iter()
            .map(|(node, c)| {
                (
                    node.clone(),
                    if self.adaptive { c.limit() } else { self.cap },
                )
            })
            .collect();
        out.sort();
        out
    }

    fn update(&self, node: &str, f: impl FnOnce(&mut Concurrency)) -> u32 {
        if node.is_empty() {
            return self.limit(node);
        }
        let mut nodes = self.lock();
        let c = nodes
            .entry(node.to_string())
            .or_insert_with(|| Concurrency::with_baselines(self.cap, &self.seeds));
        if self.adaptive {
            f(c);
            c.limit()
        } else {
            self.cap
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Concurrency>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A node whose clones take 2 s, `n` of them ending flat, each begun at `t0`.
    fn flat(c: &mut Concurrency, n: usize, t0: Instant, now: Instant) {
        for _ in 0..n {
            c.task_ended("qmclone", t0, ms(2000), now);
        }
    }

    #[test]
    fn starts_low_and_doubles_per_round_while_tasks_stay_flat_up_to_the_cap() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(10);
        assert_eq!(c.limit(), START);
        // A round: as many flat tasks as the limit, each raising it by one.
        let mut seen = vec![c.limit()];
        for round in 1..=4 {
            let n = c.limit() as usize;
            flat(&mut c, n, t0, t0 + ms(2000 * round));
            seen.push(c.limit());
        }
        assert_eq!(seen, [2, 4, 8, 10, 10], "doubling, held at the cap");
        assert_eq!(Concurrency::new(1).limit(), 1, "a cap below the start");
        assert_eq!(Concurrency::new(0).limit(), 1, "never 0");
    }

    #[test]
    fn an_overload_cuts_multiplicatively_once_per_burst_then_grows_by_one_per_round() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(16);
        flat(&mut c, 8, t0, t0 + ms(2000));
        assert_eq!(c.limit(), 10);
        // A lock timeout of a clone begun at 3 s, seen at 13 s: 10 -> 7.
        c.overloaded(t0 + ms(3000), t0 + ms(13_000));
        assert_eq!(c.limit(), 7);
        // More of the same burst (begun before the cut) do not cut again.
        c.overloaded(t0 + ms(4000), t0 + ms(13_500));
        c.overloaded(t0 + ms(12_900), t0 + ms(14_000));
        assert_eq!(c.limit(), 7);
        // After a cut: one more per round of flat tasks (about as many tasks as the limit),
        // not one per task.
        let mut tasks = 0;
        while c.limit() == 7 {
            flat(&mut c, 1, t0 + ms(14_000), t0 + ms(16_000));
            tasks += 1;
        }
        assert_eq!((c.limit(), tasks), (8, 8));
        // Work begun after the cut cuts again (8.x -> 5.x), and down to 1 at the least.
        c.overloaded(t0 + ms(14_000), t0 + ms(20_000));
        assert_eq!(c.limit(), 5);
        for k in 0..10 {
            let at = t0 + ms(21_000 + 1000 * k);
            c.overloaded(at, at);
        }
        assert_eq!(c.limit(), 1);
    }

    #[test]
    fn a_task_taking_much_longer_than_usual_cuts_and_the_baseline_follows_a_lasting_change() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(16);
        flat(&mut c, 6, t0, t0 + ms(2000));
        assert_eq!(c.limit(), 8);
        // Up to 1.5 times the usual plus 0.5 s is flat: 3.5 s raises.
        c.task_ended("qmclone", t0, ms(3500), t0 + ms(3500));
        assert_eq!(c.limit(), 9);
        // 3.6 s climbs: cut.
        c.task_ended("qmclone", t0 + ms(1000), ms(3600), t0 + ms(4600));
        assert_eq!(c.limit(), 6);
        // Another kind has its own baseline: a 1 s start is flat for starts (a fraction of a
        // round more).
        c.task_ended("qmstart", t0 + ms(5000), ms(1000), t0 + ms(6000));
        assert_eq!(c.limit(), 6);
        assert!(c.window > 6.3);
        // Clones that now always take 8 s: each cut (begun after the last), until the
        // baseline has caught up with them; then they raise again.
        let mut at = t0 + ms(7000);
        let mut cuts = 0;
        let mut before = c.limit();
        for _ in 0..40 {
            c.task_ended("qmclone", at, ms(8000), at + ms(8000));
            cuts += u32::from(c.limit() < before);
            before = c.limit();
            at += ms(8001);
        }
        assert!((2..=20).contains(&cuts), "{cuts} cuts");
        let settled = c.limit();
        c.task_ended("qmclone", at, ms(8000), at + ms(8000));
        assert!(c.limit() >= settled, "8 s clones are flat now");
    }

    /// A container's create and start say how busy the node is as a VM's do (the bench's 50
    /// containers held 2 at once while they did not).
    #[test]
    fn container_tasks_raise_the_limit_as_vm_tasks_do() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(16);
        for kind in ["vzcreate", "vzclone", "vzstart"] {
            c.task_ended(kind, t0, ms(2000), t0 + ms(2000));
        }
        assert!(c.limit() > START, "{}", c.limit());
    }

    #[test]
    fn durations_of_guest_or_size_bound_tasks_neither_raise_nor_cut() {
        let t0 = Instant::now();
        let mut c = Concurrency::new(16);
        for kind in ["qmshutdown", "qmigrate", "vzdump", "qmreboot"] {
            c.task_ended(kind, t0, ms(1000), t0);
            c.task_ended(kind, t0, ms(600_000), t0 + ms(600_000));
        }
        assert_eq!(c.limit(), START);
    }

    #[test]
    fn climbing_is_half_again_the_baseline_and_half_a_second() {
        assert!(!climbing(ms(2000), ms(3500)));
        assert!(climbing(ms(2000), ms(3501)));
        assert!(!climbing(ms(10), ms(515)));
        assert!(climbing(ms(10), ms(516)));
    }

    #[test]
    fn node_limits_are_per_node_and_fixed_means_the_cap() {
        let t0 = Instant::now();
        let adaptive = NodeLimits::new(true, 10);
        assert_eq!(adaptive.limit("pve1"), START);
        assert_eq!(adaptive.task_ended("pve1", "qmclone", t0, ms(2000), t0), 3);
        assert_eq!(adaptive.limit("pve1"), 3);
        assert_eq!(adaptive.limit("pve2"), START, "another node's own");
        assert_eq!(adaptive.overloaded("pve2", t0, t0), 1);
        assert_eq!(
            adaptive.limits(),
            [("pve1".to_string(), 3), ("pve2".to_string(), 1)]
        );
        assert_eq!(
            adaptive.overloaded("", t0, t0),
            START,
            "no node: nothing learnt"
        );
        assert_eq!(NodeLimits::new(true, 1).limit("pve1"), 1);

        let fixed = NodeLimits::new(false, 5);
        assert_eq!(fixed.limit("pve1"), 5);
        assert_eq!(fixed.overloaded("pve1", t0, t0), 5);
        assert_eq!(fixed.task_ended("pve1", "qmclone", t0, ms(9), t0), 5);
        assert_eq!(fixed.limits(), [("pve1".to_string(), 5)]);
    }

    #[test]
    fn seeded_estimates_judge_a_nodes_first_tasks() {
        let t0 = Instant::now();
        let seeds = HashMap::from([
            ("qmclone".to_string(), ms(2000)),
            ("qmshutdown".to_string(), ms(1)),
        ]);
        // Unseeded, a first clone of 10 s only sets the baseline and raises the limit.
        let plain = NodeLimits::new(true, 10);
        assert_eq!(plain.task_ended("pve1", "qmclone", t0, ms(10_000), t0), 3);
        // Seeded with the exercise's 2 s, the same clone is much longer than usual: a cut.
        let seeded = NodeLimits::new(true, 10).seeded(seeds);
        assert_eq!(seeded.task_ended("pve1", "qmclone", t0, ms(10_000), t0), 1);
        // A clone in the usual time raises it; a type that tells no load is not seeded.
        let seeded =
            NodeLimits::new(true, 10).seeded(HashMap::from([("qmclone".to_string(), ms(2000))]));
        assert_eq!(seeded.task_ended("pve2", "qmclone", t0, ms(2100), t0), 3);
        let c = Concurrency::with_baselines(10, &HashMap::from([("qmshutdown".into(), ms(1))]));
        assert!(c.baselines.is_empty());
    }
}
