//! glibc's allocator, tuned for a long-running daemon that holds a steady heap and frees
//! a burst of temporaries every cycle.
//!
//! Measured at 10,000 specs (BENCHMARKS.md, "Memory at 10,000 specs (after)"): the daemon's
//! RSS ran 40-60 MiB above its live heap. glibc gives each thread that allocates an arena of
//! its own, up to 8 per core; the runtime's workers and the threads that parse spec and
//! status files (`par`) spread the long-lived heap and each cycle's temporaries (decoding
//! `/cluster/resources`, reading the records, building statuses) over many arenas, each
//! keeping its own free memory. glibc returns only the top of a heap to the system by itself.

/// At most this many arenas: one, the main heap. The daemon runs one cycle at a time on two
/// runtime workers; with glibc's per-thread caches (tcache) its allocations are not contended
/// enough for more arenas to pay (measured: 2 arenas left 10 MiB more RSS, no CPU gained).
const ARENAS: i32 = 1;

/// Limits glibc's arenas ([`ARENAS`]). Call first thing, before any thread is started.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter under the allocator's own lock.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Gives the pages of freed memory back to the system (`malloc_trim(0)`: every arena, and
/// whole free pages inside the heaps, not only the top). Called after each cycle.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
