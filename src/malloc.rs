//! glibc's allocator, tuned for a long-running daemon that holds a steady heap and frees
//! a burst of temporaries every cycle.
//!
//! Measured at 10,000 specs (BENCHMARKS.md, "Memory at 10,000 specs (after)"): the daemon's
//! RSS ran about 60 MiB above its live heap, free memory glibc kept in its arenas after the
//! cycles' temporaries (decoding `/cluster/resources`, reading the records, rendering status
//! files) were freed. glibc returns only the top of the main heap to the system by itself.

/// Gives the pages of freed memory back to the system (`malloc_trim(0)`: every arena, and
/// whole free pages inside the heaps, not only the top). Called after each cycle; it takes a
/// few milliseconds at 10,000 specs.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
