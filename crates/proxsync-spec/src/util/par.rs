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
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(items.len() / MIN_PER_THREAD)
        .max(1);
    if threads == 1 {
        return items.into_iter().map(f).collect();
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
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<R>>()))
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
}
