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

/// Blocks of at least this many bytes are mapped on their own and unmapped when freed. glibc
/// starts at 128 KiB and raises the threshold to the size of each mapped block freed (up to
/// 32 MiB): after the first cycle freed a listing's body or a Vec of 10,000 records, such
/// temporaries came from the heap, where what the cycle kept around them held their pages.
/// Setting it fixes it (and turns the raise off); BENCHMARKS.md, "Memory at 10,000 specs",
/// has the figures.
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Limits glibc's arenas ([`ARENAS`]) and fixes its mmap threshold ([`MMAP_THRESHOLD`]). Call
/// first thing, before any thread is started.
pub(crate) fn tune_for_daemon() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter under the allocator's own lock.
    #[allow(unsafe_code)]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// Gives the pages of freed memory back to the system (`malloc_trim(0)`: every arena, and
/// whole free pages inside the heaps, not only the top). Called after each cycle.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is thread-safe.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
