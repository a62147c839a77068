//! A thread that reads the machine's input ahead of it, into whole buffers it hands over
//! ([`super::input::Input::read_ahead`]).
//!
//! A few buffers go round: the thread fills an empty one from its reader (`read` calls until
//! it is full or the input ends), sends it over, and takes the next empty one the decoder gave
//! back. Each buffer keeps its first [`HEADROOM`] bytes free, for the bytes of the one before
//! that the decoder has not consumed yet. When the decoder stops early (an error, a limit), the
//! thread's next send fails and it ends there; dropping the decoder's side waits for that, so
//! that no thread outlives the decode (a read of a file, which is all it is given, is short).

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Bytes kept free at the front of each buffer (an opcode's bytes span at most this much
/// across two buffers before they are joined in one of their own).
#[cfg(not(test))]
pub const HEADROOM: usize = 64 << 10;
#[cfg(test)]
pub const HEADROOM: usize = 64;
/// Bytes read into each buffer.
#[cfg(not(test))]
const CHUNK: usize = 1 << 20;
#[cfg(test)]
const CHUNK: usize = 256;
/// Buffers going round.
const BUFFERS: usize = 3;

/// What the thread sends: a buffer and how many bytes it read into it, the input's end
/// (`None`), or the reader's error.
type Filled = io::Result<Option<(Box<[u8]>, usize)>>;

/// The decoder's side of the thread.
pub struct ReadAhead {
    filled: Receiver<Filled>,
    empty: SyncSender<Box<[u8]>>,
    /// Once the end or an error came, nothing more is asked of the thread.
    done: bool,
    /// Joined when this side is dropped.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReadAhead {
    /// Starts the thread on `r` (should it not start, the first buffer asked for is an error
    /// saying so).
    pub fn start(r: Box<dyn Read + Send>) -> ReadAhead {
        let (filled_tx, filled) = sync_channel::<Filled>(BUFFERS);
        let (empty, empty_rx) = sync_channel::<Box<[u8]>>(BUFFERS + 1);
        for _ in 0..BUFFERS {
            let _ = empty.send(vec![0u8; HEADROOM + CHUNK].into_boxed_slice());
        }
        let thread = std::thread::Builder::new()
            .name("memlens-read-ahead".into())
            .spawn(move || fill_loop(r, empty_rx, filled_tx))
            .ok();
        ReadAhead {
            filled,
            empty,
            done: false,
            thread,
        }
    }

    /// The next buffer and how many bytes follow its headroom; `None` at the end.
    pub fn next(&mut self) -> Filled {
        if self.done {
            return Ok(None);
        }
        let got = self
            .filled
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("no thread reads the input ahead")));
        if !matches!(got, Ok(Some(_))) {
            self.done = true;
        }
        got
    }

    /// A buffer the decoder is done with, to be filled again (one of another size — a joined
    /// one — is dropped instead).
    pub fn recycle(&mut self, buf: Box<[u8]>) {
        if buf.len() == HEADROOM + CHUNK {
            let _ = self.empty.try_send(buf);
        }
    }
}

/// The thread: fills each empty buffer it is given, until the input ends, fails, or the
/// decoder is gone.
impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Both channels closed first: the thread's next receive or send fails, and it ends.
        drop(std::mem::replace(&mut self.filled, sync_channel(0).1));
        drop(std::mem::replace(&mut self.empty, sync_channel(0).0));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn fill_loop(mut r: Box<dyn Read + Send>, empty: Receiver<Box<[u8]>>, filled: SyncSender<Filled>) {
    for mut buf in empty {
        let mut n = 0;
        let mut error = None;
        while HEADROOM + n < buf.len() {
            match r.read(&mut buf[HEADROOM + n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let full = HEADROOM + n == buf.len();
        if n > 0 && filled.send(Ok(Some((buf, n)))).is_err() {
            return;
        }
        if !full {
            let _ = filled.send(error.map_or(Ok(None), Err));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::input::Input;
    use crate::infra::testing::Lcg;

    /// A reader that returns at most `most` bytes a call, then fails at `fail_at` (if set).
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        most: usize,
        fail_at: Option<usize>,
    }

    impl std::io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.fail_at == Some(self.at) {
                return Err(std::io::Error::other("disk on fire"));
            }
            let stop = self.fail_at.unwrap_or(self.data.len()).min(self.data.len());
            let n = buf.len().min(self.most).min(stop - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// What a sequence of reads gives: each step's bytes and offset, or where it failed.
    fn replay(mut input: Input<Trickle>, steps: &[(u8, usize)]) -> Vec<String> {
        let mut out = Vec::new();
        for &(op, n) in steps {
            let got = match op {
                0 => input.u8("a byte").map(|b| vec![b]),
                1 => input.take(n, "bytes").map(<[u8]>::to_vec),
                2 => input.window(n).map(|w| w[..w.len().min(n)].to_vec()),
                3 => {
                    let w = input.window(n).map(<[u8]>::len);
                    w.map(|len| {
                        input.skip(len.min(n));
                        Vec::new()
                    })
                }
                _ => input.payload(n as u64, input.offset(), "a payload"),
            };
            out.push(match got {
                Ok(bytes) => format!("{} {:?}", input.offset(), bytes),
                Err(e) => format!("error {e}"),
            });
            if out.last().is_some_and(|l| l.starts_with("error")) {
                break;
            }
        }
        out
    }

    /// Random reads — single bytes, runs longer than a buffer's headroom and than a buffer,
    /// windows, skips, payloads — over readers that trickle and readers that fail: the input
    /// read ahead on a thread gives the same bytes, offsets and errors as the one read on the
    /// decoder's thread.
    /// A reader of an endless input; the count of its `Arc` says whether it was dropped.
    struct Endless {
        _alive: std::sync::Arc<()>,
    }

    impl std::io::Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(7);
            Ok(buf.len())
        }
    }

    #[test]
    fn dropping_the_decoders_side_ends_the_thread_before_it_returns() {
        for taken in 0..3 {
            let alive = std::sync::Arc::new(());
            let mut ahead = super::ReadAhead::start(Box::new(Endless { _alive: alive.clone() }));
            for _ in 0..taken {
                assert!(matches!(ahead.next(), Ok(Some(_))));
            }
            drop(ahead);
            // The thread dropped its reader before the drop above returned.
            assert_eq!(std::sync::Arc::strong_count(&alive), 1, "after {taken} buffers");
        }
    }

    #[test]
    fn an_input_read_ahead_reads_as_one_read_directly() {
        for seed in 0..200u64 {
            let mut rng = Lcg(seed);
            let len = rng.below(3000) as usize;
            let data: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            let most = 1 + rng.below(400) as usize;
            let fail_at = (seed % 4 == 0 && len > 0).then(|| rng.below(len as u64) as usize);
            let steps: Vec<(u8, usize)> = (0..200)
                .map(|_| {
                    let op = rng.below(5) as u8;
                    let most = if rng.below(4) == 0 { 600 } else { 40 };
                    (op, rng.below(most) as usize)
                })
                .collect();
            let reader = || Trickle {
                data: data.clone(),
                at: 0,
                most,
                fail_at,
            };
            let direct = replay(Input::new(reader(), len as u64), &steps);
            let ahead = replay(Input::read_ahead(reader(), len as u64), &steps);
            assert_eq!(ahead, direct, "seed {seed}");
        }
    }
}
