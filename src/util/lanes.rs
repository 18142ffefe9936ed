//! Running many async jobs with at most a few at once per key (per node), where only the jobs
//! that run exist as tasks.
//!
//! A semaphore per node with one spawned task per job keeps every waiting job alive as a task
//! (its future, and what it was given to work on): an adoption of 10,000 VMs held 10,000 of
//! them at once. Here the waiting jobs are plain items in their key's queue, and a job's task
//! (and whatever `start` builds for it) is made only when its key has room. A key's limit is
//! asked again whenever a job ends (it may change while jobs run), and a job may hand its item
//! back to the end of its key's queue ([`Next::Again`]) to run again when there is room.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;

use tokio::task::{Id, JoinSet};

/// What a job of [`run_again`] ends with: its result, or its item to run again later.
pub(crate) enum Next<T, R> {
    Done(R),
    Again(T),
}

/// Runs `start(item)` for every item, at most `limit(key)` at once per key, each key's items
/// in their order. Returns the results in the order the jobs ended; a job that panicked is
/// logged and has no result.
pub(crate) async fn run<K, T, R, Fut>(
    items: impl IntoIterator<Item = (K, T)>,
    limit: impl Fn(&K) -> usize,
    mut start: impl FnMut(T) -> Fut,
) -> Vec<R>
where
    K: Eq + Hash + Clone,
    T: Send + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    run_again(items, limit, |item| {
        let job = start(item);
        async move { Next::<T, R>::Done(job.await) }
    })
    .await
}

/// As [`run`], where a job may end with [`Next::Again`]: its item goes to the end of its key's
/// queue and is started again when the key has room.
pub(crate) async fn run_again<K, T, R, Fut>(
    items: impl IntoIterator<Item = (K, T)>,
    limit: impl Fn(&K) -> usize,
    mut start: impl FnMut(T) -> Fut,
) -> Vec<R>
where
    K: Eq + Hash + Clone,
    T: Send + 'static,
    Fut: Future<Output = Next<T, R>> + Send + 'static,
    R: Send + 'static,
{
    // Per key: the items waiting, and how many of its jobs run.
    let mut lanes: HashMap<K, (VecDeque<T>, usize)> = HashMap::new();
    let mut count = 0;
    for (key, item) in items {
        lanes.entry(key).or_default().0.push_back(item);
        count += 1;
    }
    let mut set = JoinSet::new();
    let mut running: HashMap<Id, K> = HashMap::new();
    // A result per job, sized at once: grown by doubling, 10,000 results (an adoption) took
    // a block for 16,384 and, while it moved, the one for 8,192 beside it.
    let mut out = Vec::with_capacity(count);
    loop {
        for (key, (waiting, busy)) in lanes.iter_mut() {
            while *busy < limit(key).max(1)
                && let Some(item) = waiting.pop_front()
            {
                *busy += 1;
                let id = set.spawn(start(item)).id();
                running.insert(id, key.clone());
            }
        }
        let Some(joined) = set.join_next_with_id().await else {
            break;
        };
        let (id, again) = match joined {
            Ok((id, Next::Done(r))) => {
                out.push(r);
                (id, None)
            }
            Ok((id, Next::Again(item))) => (id, Some(item)),
            Err(e) => {
                tracing::error!(error = %e, "a job panicked or was cancelled");
                (e.id(), None)
            }
        };
        if let Some(key) = running.remove(&id)
            && let Some((waiting, busy)) = lanes.get_mut(&key)
        {
            *busy -= 1;
            if let Some(item) = again {
                waiting.push_back(item);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Per key: the jobs running now, the most at once, and the jobs started, in order.
    #[derive(Default)]
    struct Seen {
        now: AtomicUsize,
        most: AtomicUsize,
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_the_limit_per_key_and_every_item_once_in_order() {
        let seen: Arc<HashMap<&str, Seen>> =
            Arc::new(["a", "b", "free"].map(|k| (k, Seen::default())).into());
        let started = Arc::new(std::sync::Mutex::new(Vec::new()));
        let items = (0..60).map(|i| (["a", "b", "free"][i % 3], i));
        let limit = |k: &&str| if *k == "free" { usize::MAX } else { 2 };
        let alive = Arc::new(AtomicUsize::new(0));
        let most_alive = Arc::new(AtomicUsize::new(0));
        let out = run(items, limit, |i| {
            // What `start` builds exists only for a job that runs.
            let now = alive.fetch_add(1, Ordering::SeqCst) + 1;
            most_alive.fetch_max(now, Ordering::SeqCst);
            let (seen, started, alive) = (seen.clone(), started.clone(), alive.clone());
            async move {
                let key = ["a", "b", "free"][i % 3];
                started.lock().unwrap().push(i);
                let s = &seen[key];
                let now = s.now.fetch_add(1, Ordering::SeqCst) + 1;
                s.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10 + (i % 7) as u64)).await;
                s.now.fetch_sub(1, Ordering::SeqCst);
                alive.fetch_sub(1, Ordering::SeqCst);
                i
            }
        })
        .await;
        // One result per item, in a Vec sized at once (not doubled up to 64).
        assert_eq!(out.capacity(), 60);
        let mut out = out;
        out.sort();
        assert_eq!(out, (0..60).collect::<Vec<_>>(), "every item ran once");
        assert_eq!(seen["a"].most.load(Ordering::SeqCst), 2);
        assert_eq!(seen["b"].most.load(Ordering::SeqCst), 2);
        assert_eq!(seen["free"].most.load(Ordering::SeqCst), 20);
        // 2 + 2 + 20: the waiting items of "a" and "b" were not started ahead of their turn.
        assert_eq!(most_alive.load(Ordering::SeqCst), 24);
        let started = started.lock().unwrap();
        for key in 0..2 {
            let order: Vec<_> = started.iter().filter(|i| *i % 3 == key).collect();
            assert!(order.is_sorted(), "each key's items start in their order");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_handed_back_runs_again_after_the_others_and_a_limit_is_asked_again() {
        use std::sync::Mutex;
        // Key "a" has room for 3, then for 1 once the first job has ended.
        let limit_now = Arc::new(AtomicUsize::new(3));
        let started = Arc::new(Mutex::new(Vec::new()));
        let now = Arc::new(AtomicUsize::new(0));
        let most_after_cut = Arc::new(AtomicUsize::new(0));
        let items = (0..6).map(|i| ("a", (i, 0)));
        let out = run_again(
            items,
            |_| limit_now.load(Ordering::SeqCst),
            |(i, tries): (usize, u32)| {
                let (limit_now, started, now, most) = (
                    limit_now.clone(),
                    started.clone(),
                    now.clone(),
                    most_after_cut.clone(),
                );
                async move {
                    started.lock().unwrap().push((i, tries));
                    let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                    if limit_now.load(Ordering::SeqCst) == 1 {
                        most.fetch_max(running, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10 * (i as u64 + 1))).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    limit_now.store(1, Ordering::SeqCst);
                    // Item 1 is handed back once.
                    if i == 1 && tries == 0 {
                        Next::Again((i, tries + 1))
                    } else {
                        Next::Done(i)
                    }
                }
            },
        )
        .await;
        let mut done = out.clone();
        done.sort();
        assert_eq!(
            done,
            [0, 1, 2, 3, 4, 5],
            "every item once, item 1 after its second run"
        );
        let started = started.lock().unwrap().clone();
        assert_eq!(started.len(), 7);
        assert_eq!(started[..3], [(0, 0), (1, 0), (2, 0)], "3 at once at first");
        assert_eq!(
            *started.last().unwrap(),
            (1, 1),
            "handed back: after the others"
        );
        // Once the limit fell to 1, new jobs started only when the others had ended.
        assert_eq!(most_after_cut.load(Ordering::SeqCst), 1);
    }
}
