//! Giving the heap's free memory back to the system (glibc's `malloc_trim`). Most buffers an
//! ingest or a load frees lie below glibc's mmap threshold (raised, as glibc does, to the size
//! of each mapped block freed before), in the arenas of the threads that made them, and stay
//! resident until a trim. Where that happens:
//! - the importer's working buffers, once a GB-scale trace is read (the pipeline, before the
//!   analyses);
//! - the lifetimes' working maps, once they are built ([`crate::report`]);
//! - a stored report's parts loaded or leaving the server's cache (the server's
//!   `loaded_file.rs` and `parquet_object/decode.rs`), so that its resident memory follows the cache's
//!   bound instead of its high-water mark.
//!
//! And every binary starts with one arena per CPU ([`one_arena_per_cpu`]).

/// Freed buffers smaller than this in all are not worth a trim.
pub const TRIM_ABOVE: u64 = 64 << 20;

/// Has glibc keep one arena per CPU instead of eight (its default): called first thing by every
/// binary, before it starts a thread. An ingest's threads (the analyses, the replay beside
/// them, polars' pool, the encoders, the server's own) each took an arena of their own, and
/// what one thread freed stayed resident there, unused by the others: a GB-scale ingest peaks
/// lower with one arena per CPU, as fast (`memlens-bench-ingest`, `memlens-bench`). A
/// `MALLOC_ARENA_MAX` set in the environment is left to rule.
pub fn one_arena_per_cpu() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = libc::c_int::try_from(cpus).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets a parameter of glibc's allocator; M_ARENA_MAX bounds the
        // arenas made from now on.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

/// Returns the free memory of every glibc arena to the system (nothing elsewhere).
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of glibc's arenas to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// [`trim_heap`] after a stage that freed about `freed` bytes, when they are worth a trim.
pub fn trim_heap_after(freed: u64) {
    if freed > TRIM_ABOVE {
        trim_heap();
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

    /// The arenas glibc has made so far (`malloc_info`'s heaps).
    fn arenas() -> usize {
        let mut buffer: *mut libc::c_char = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        // SAFETY: a stream into a buffer glibc allocates, read once closed, then freed.
        unsafe {
            let stream = libc::open_memstream(&mut buffer, &mut size);
            assert!(!stream.is_null(), "open_memstream");
            assert_eq!(libc::malloc_info(0, stream), 0, "malloc_info");
            libc::fclose(stream);
            let xml = std::slice::from_raw_parts(buffer as *const u8, size);
            let heaps = String::from_utf8_lossy(xml).matches("<heap nr=").count();
            libc::free(buffer.cast());
            heaps
        }
    }

    #[test]
    fn threads_beyond_the_cpus_make_no_arena_of_their_own() {
        one_arena_per_cpu();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let before = arenas();
        // Threads that allocate at once: each would have had an arena of its own.
        let threads = 4 * cpus + 4;
        let start = std::sync::Barrier::new(threads);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    start.wait();
                    let blocks: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 4096]).collect();
                    start.wait();
                    drop(blocks);
                });
            }
        });
        let after = arenas();
        assert!(
            after <= before.max(cpus),
            "{after} arenas ({before} before, {cpus} CPUs)"
        );
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
        trim_heap_after(FREED as u64);
        let after = resident_bytes();
        assert!(
            before.saturating_sub(after) > (FREED / 2) as u64,
            "resident {before} -> {after} bytes after {FREED} bytes freed and given back"
        );
        assert_eq!(kept[BLOCK - 1], 1);
    }
}
