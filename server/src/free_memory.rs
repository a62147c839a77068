//! Giving the heap's free memory back to the system (glibc's `malloc_trim`). Loading a large
//! part of a report frees as many buffers as it keeps (Parquet pages, the row-group chunks
//! that rechunking copies), and a file leaving memory frees all of its own; most of them lie
//! below glibc's mmap threshold, in the arenas of the threads that decoded them, so without
//! this the server's resident memory stays at its high-water mark however small the cache is.

/// Freed buffers smaller than this in all are not worth a trim.
pub const TRIM_ABOVE: u64 = 64 << 20;

/// Returns the free memory of every glibc arena to the system.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of glibc's arenas to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}
