//! Giving the heap's free memory back to the system (glibc's `malloc_trim`). Most buffers an
//! ingest or a load frees lie below glibc's mmap threshold (raised, as glibc does, to the size
//! of each mapped block freed before), in the arenas of the threads that made them, and stay
//! resident until a trim. Where that happens:
//! - the importer's working buffers, once a GB-scale trace is read (the pipeline, before the
//!   analyses);
//! - the lifetimes' working maps, once they are built ([`crate::report`]);
//! - a stored report's parts loaded or leaving the server's cache (the server's
//!   `loaded_file.rs` and `parquet_object.rs`), so that its resident memory follows the cache's
//!   bound instead of its high-water mark.

/// Freed buffers smaller than this in all are not worth a trim.
pub const TRIM_ABOVE: u64 = 64 << 20;

/// Returns the free memory of every glibc arena to the system (nothing elsewhere).
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of glibc's arenas to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// [`give_back`] after a stage that freed about `freed` bytes, when they are worth a trim.
pub fn give_back_after(freed: u64) {
    if freed > TRIM_ABOVE {
        give_back();
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Resident bytes of this process (`/proc/self/statm`'s second field, in pages).
    fn resident_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("resident pages");
        pages * 4096
    }

    #[test]
    fn freed_small_buffers_leave_resident_memory_once_given_back() {
        const BLOCK: usize = 64 << 10;
        const FREED: usize = 160 << 20;
        // Blocks below the mmap threshold, each touched, then a block after them that stays,
        // so that freeing them leaves the heap's top in use and nothing is trimmed on its own.
        let blocks: Vec<Vec<u8>> = (0..FREED / BLOCK).map(|i| vec![i as u8 | 1; BLOCK]).collect();
        let kept = vec![1u8; BLOCK];
        drop(blocks);
        let before = resident_bytes();
        give_back_after(FREED as u64);
        let after = resident_bytes();
        assert!(
            before.saturating_sub(after) > (FREED / 2) as u64,
            "resident {before} -> {after} bytes after {FREED} bytes freed and given back"
        );
        assert_eq!(kept[BLOCK - 1], 1);
    }
}
