//! Pages of a growing vector faulted in by another thread before its writer reaches them.
//!
//! Decoding a snapshot grows a few vectors — the trace's columns, the pickle memo — to
//! gigabytes, a page at a time, on the decoder's one thread; each first write to a page is a
//! fault the kernel handles on the writing thread (a page taken, zeroed, charged and mapped):
//! a tenth of a GB-scale decode, while the machine's other core idled.
//! A [`FaultAhead`] keeps its vector's capacity [`WINDOW`] elements past its length and asks
//! one process-wide thread to fault in the pages of that window
//! (`madvise(MADV_POPULATE_WRITE)`, Linux ≥ 5.14) while the writer fills the pages before them.
//!
//! The requests are hints and change no byte: populating a page that is already there does
//! nothing to it, and a range the vector has left (it moved when it grew) is either unmapped,
//! and `madvise` says so, or someone else's, whose pages it faults in early. A request the
//! thread is too far behind to take is dropped; elsewhere than Linux nothing is asked.

/// Elements kept reserved and faulted in past a vector's length.
pub const WINDOW: usize = 1 << 18;
/// Elements between two requests (the writer checks at multiples of it).
pub const STEP: usize = 1 << 16;

/// One vector's requests so far: where it was, and up to which element it was asked for.
#[derive(Debug, Default, Clone, Copy)]
pub struct FaultAhead {
    at: usize,
    asked_to: usize,
}

impl FaultAhead {
    /// Call after each push to `v`: at every [`STEP`]th element, reserves [`WINDOW`] more (at
    /// most as many as it holds) and asks for the pages not asked for before.
    #[inline]
    pub fn after_push<T>(&mut self, v: &mut Vec<T>) {
        if v.len().is_multiple_of(STEP) {
            self.step(v);
        }
    }

    #[cold]
    #[inline(never)]
    fn step<T>(&mut self, v: &mut Vec<T>) {
        if v.is_empty() || std::mem::size_of::<T>() == 0 {
            return;
        }
        // A window no longer than the vector (a small one is not given megabytes).
        let window = WINDOW.min(v.len());
        v.reserve(window);
        let at = v.as_ptr() as usize;
        // Moved: only what the move copied or carried is known to be there.
        let from = match at == self.at {
            true => self.asked_to.max(v.len()),
            false => v.len(),
        };
        let to = v.len() + window;
        self.at = at;
        self.asked_to = to;
        let elem = std::mem::size_of::<T>();
        fault_in(at + from * elem, (to - from) * elem);
    }
}

/// Asks the thread to fault in `len` bytes from address `start`.
fn fault_in(start: usize, len: usize) {
    #[cfg(target_os = "linux")]
    linux::ask(start, len);
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

#[cfg(target_os = "linux")]
mod linux {
    use std::sync::mpsc::{sync_channel, SyncSender};
    use std::sync::OnceLock;

    /// Requests waiting for the thread; beyond, they are dropped.
    const QUEUE: usize = 256;

    /// `len` bytes from address `start`.
    struct Pages {
        start: usize,
        len: usize,
    }

    /// The thread's queue (`None`: it could not be started).
    static QUEUE_TX: OnceLock<Option<SyncSender<Pages>>> = OnceLock::new();

    pub(super) fn ask(start: usize, len: usize) {
        let tx = QUEUE_TX.get_or_init(|| {
            let (tx, rx) = sync_channel::<Pages>(QUEUE);
            std::thread::Builder::new()
                .name("memlens-fault-ahead".into())
                .spawn(move || {
                    for p in rx {
                        populate(p.start, p.len);
                    }
                })
                .ok()
                .map(|_| tx)
        });
        if let Some(tx) = tx {
            let _ = tx.try_send(Pages { start, len });
        }
    }

    /// `madvise(MADV_POPULATE_WRITE)` over the whole pages of the range; errors (a range
    /// unmapped meanwhile, an older kernel) are ignored: nothing depends on it.
    fn populate(start: usize, len: usize) {
        // SAFETY: sysconf has no preconditions.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            p if p > 0 => p as usize,
            _ => 4096,
        };
        let first = start & !(page - 1);
        let end = (start + len).next_multiple_of(page);
        // SAFETY: populating pages reads and writes no byte of them; on a range that is not
        // (or no longer) mapped the call fails with ENOMEM and changes nothing.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_POPULATE_WRITE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vector grown through many steps, moving as it grows, holds exactly what was pushed,
    /// and keeps a window reserved past its length.
    #[test]
    fn a_vector_faulted_ahead_holds_what_was_pushed() {
        let mut v: Vec<u64> = Vec::new();
        let mut ahead = FaultAhead::default();
        let n = 5 * WINDOW + 123;
        for i in 0..n as u64 {
            v.push(i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            ahead.after_push(&mut v);
        }
        assert!(
            v.capacity() >= (n / STEP) * STEP + WINDOW,
            "a window reserved past its length"
        );
        assert!(v
            .iter()
            .enumerate()
            .all(|(i, &x)| x == (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    }
}
