//! A file read by the importer while a thread of its own asks the kernel for the megabytes
//! after the importer's position (`posix_fadvise(POSIX_FADV_WILLNEED)`). The decoder is one
//! thread and the machine's other core idles while it runs; on a file not in the page cache
//! the kernel's work of reading it in (pages allocated, reads submitted) was done on the
//! decoder's thread, as system time, a large share of a cold GB-scale decode. Bytes are still
//! read by the importer's own `read` calls,
//! so a file already cached reads exactly as before (a thread handing over copies of the
//! bytes instead was measured slower: one more copy, and across cores).

use std::fs::File;
use std::io::Read;

/// Files shorter than this are read without a prefetching thread.
pub const PREFETCH_FROM: u64 = 4 << 20;
/// How far past the importer's position the thread asks for (less in tests, so that a small
/// file has the thread wait for its reader).
#[cfg(not(test))]
const AHEAD: u64 = 64 << 20;
#[cfg(test)]
const AHEAD: u64 = 4 << 20;
/// The size of each request; the importer wakes the thread each time it has read this much.
#[cfg(not(test))]
const STEP: u64 = 8 << 20;
#[cfg(test)]
const STEP: u64 = 1 << 20;

/// `file` (of `len` bytes) as the importer's reader: prefetched on unix from
/// [`PREFETCH_FROM`] on, else read as it is.
pub fn reader(file: File, len: u64) -> Box<dyn Read + Send> {
    #[cfg(unix)]
    if len >= PREFETCH_FROM {
        if let Some(p) = unix::Prefetched::new(file.try_clone().ok(), len) {
            return Box::new(p.reading(file));
        }
    }
    let _ = len;
    Box::new(file)
}

#[cfg(unix)]
mod unix {
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;

    use super::{AHEAD, STEP};

    /// What the importer's reader and the prefetching thread share.
    #[derive(Default)]
    struct Position {
        /// Bytes the importer has read.
        read: AtomicU64,
        stop: AtomicBool,
    }

    /// The prefetching thread, before it is given the file it follows.
    pub struct Prefetched {
        position: Arc<Position>,
        thread: JoinHandle<()>,
    }

    impl Prefetched {
        /// Starts the thread on `handle` (a second handle on the importer's file); `None`
        /// when there is no handle or no thread, and the file is read without one.
        pub fn new(handle: Option<File>, len: u64) -> Option<Prefetched> {
            let handle = handle?;
            let position = Arc::new(Position::default());
            let shared = position.clone();
            let thread = std::thread::Builder::new()
                .name("memlens-ahead".into())
                .spawn(move || prefetch(&handle, len, &shared))
                .ok()?;
            Some(Prefetched { position, thread })
        }

        /// The importer's reader of `file`.
        pub fn reading(self, file: File) -> PrefetchedFile {
            PrefetchedFile {
                file,
                read: 0,
                wake_at: STEP,
                position: self.position,
                thread: Some(self.thread),
            }
        }
    }

    /// Asks for `[0, len)` of `file` a step at a time, at most [`AHEAD`] past what the
    /// importer has read, sleeping between; returns at the end or when told to stop.
    fn prefetch(file: &File, len: u64, position: &Position) {
        let mut asked = 0u64;
        while asked < len && !position.stop.load(Ordering::Acquire) {
            let until = (position.read.load(Ordering::Acquire) + AHEAD).min(len);
            if asked >= until {
                std::thread::park();
                continue;
            }
            let n = STEP.min(until - asked);
            // SAFETY: posix_fadvise reads its arguments only; the descriptor is open for as
            // long as `file` lives. Advice is a hint: its result changes nothing here.
            unsafe {
                libc::posix_fadvise(
                    file.as_raw_fd(),
                    asked as libc::off_t,
                    n as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                );
            }
            asked += n;
        }
    }

    /// The file the importer reads, waking the prefetching thread every [`STEP`] bytes.
    pub struct PrefetchedFile {
        file: File,
        read: u64,
        wake_at: u64,
        position: Arc<Position>,
        /// `None` only once dropped.
        thread: Option<JoinHandle<()>>,
    }

    impl Read for PrefetchedFile {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.file.read(buf)?;
            self.read += n as u64;
            if self.read >= self.wake_at {
                self.wake_at = self.read + STEP;
                self.position.read.store(self.read, Ordering::Release);
                if let Some(t) = &self.thread {
                    t.thread().unpark();
                }
            }
            Ok(n)
        }
    }

    impl Drop for PrefetchedFile {
        fn drop(&mut self) {
            self.position.stop.store(true, Ordering::Release);
            if let Some(t) = self.thread.take() {
                t.thread().unpark();
                // At most one request in flight: asking is quick, the reads it starts are
                // the kernel's.
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    fn prefetch_threads() -> usize {
        crate::infra::testing::threads_named("memlens-ahead")
    }

    #[test]
    fn a_prefetched_file_reads_its_bytes_and_its_thread_ends_with_it() {
        // Past the threshold and three times what the thread asks ahead, a part step at the end.
        let data: Vec<u8> = (0..(3 * AHEAD as u32) + 12_345).map(|i| (i % 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(&data).expect("write");
        let len = data.len() as u64;

        let mut whole = reader(f.reopen().expect("reopen"), len);
        // (A new thread names itself once it runs.)
        let started = std::time::Instant::now();
        while prefetch_threads() == 0 && started.elapsed().as_secs() < 5 {
            std::thread::yield_now();
        }
        assert_eq!(prefetch_threads(), 1, "it waits for the reader to come near");
        let mut back = Vec::new();
        whole.read_to_end(&mut back).expect("read");
        assert!(back == data, "the file's bytes, in order");
        drop(whole);
        assert_eq!(prefetch_threads(), 0);

        // Dropped part-way, with the thread waiting for the reader: it ends with it.
        let mut part = reader(f.reopen().expect("reopen"), len);
        part.read_exact(&mut [0u8; 1000]).expect("read");
        drop(part);
        assert_eq!(prefetch_threads(), 0, "the reader waited for its thread");

        // A small file has none.
        let small = reader(f.reopen().expect("reopen"), PREFETCH_FROM - 1);
        assert_eq!(prefetch_threads(), 0);
        drop(small);
    }
}
