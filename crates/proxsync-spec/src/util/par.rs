//! Running a pure function over many items on every core, results in the items' order.
//!
//! Parsing is what `proxsync status` (one YAML status file per spec) and reading the specs
//! of a commit (one YAML file per spec) spend their time on at 10,000 specs; the files are
//! independent, so they are parsed side by side on plain scoped threads.

/// Below this many items a single thread is used: starting threads costs more.
const MIN_PER_THREAD: usize = 64;

/// `items.map(f)`, split into one contiguous chunk per available core; the output keeps the
/// order of `items`. A panic in `f` is propagated as if `f` had run on this thread.
pub fn map<T, R, F>(items: Vec<T>, f: F) -> Vec<R>
where
    T: Send,
    R: Send,
    F: Fn(T) -> R + Sync,
{
    map_init(items, || (), |_, item| f(item))
}

/// [`map`], each thread with a state of its own that `init` makes once on that thread (a
/// handle that may not be shared between threads, such as a git repository's).
pub fn map_init<T, R, S, I, F>(items: Vec<T>, init: I, f: F) -> Vec<R>
where
    T: Send,
    R: Send,
    I: Fn() -> S + Sync,
    F: Fn(&mut S, T) -> R + Sync,
{
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(items.len() / MIN_PER_THREAD)
        .max(1);
    if threads == 1 {
        let mut state = init();
        return items.into_iter().map(|item| f(&mut state, item)).collect();
    }
    let per = items.len().div_ceil(threads);
    let mut chunks: Vec<Vec<T>> = Vec::with_capacity(threads);
    let mut items = items.into_iter();
    loop {
        let chunk: Vec<T> = items.by_ref().take(per).collect();
        if chunk.is_empty() {
            break;
        }
        chunks.push(chunk);
    }
    let (init, f) = (&init, &f);
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    let mut state = init();
                    (chunk.into_iter())
                        .map(|item| f(&mut state, item))
                        .collect::<Vec<R>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_the_order_of_the_items() {
        for n in [0, 1, 63, 64, 65, 129, 1000, 1001] {
            let items: Vec<usize> = (0..n).collect();
            let out = super::map(items, |i| i * 2);
            assert_eq!(out, (0..n).map(|i| i * 2).collect::<Vec<_>>(), "n = {n}");
        }
    }

    #[test]
    fn each_thread_makes_its_state_once() {
        let inits = std::sync::atomic::AtomicUsize::new(0);
        let items: Vec<usize> = (0..1000).collect();
        let out = super::map_init(
            items,
            || {
                inits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::current().id()
            },
            |made_on, i| (*made_on == std::thread::current().id(), i),
        );
        assert!(out.iter().all(|(same_thread, _)| *same_thread));
        assert_eq!(
            out.iter().map(|(_, i)| *i).collect::<Vec<_>>(),
            (0..1000).collect::<Vec<_>>()
        );
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(1000 / 64);
        assert_eq!(inits.into_inner(), threads.max(1), "one state per thread");
    }
}
