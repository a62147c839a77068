//! The machine's input: a buffered reader that knows its offset and an upper bound on what
//! is left, so that no length prefix allocates more than the input can hold.
//!
//! Its buffer is filled by `read` calls on the decoder's thread, or ([`Input::read_ahead`],
//! for a large plain file) by a thread of its own ([`super::read_ahead`]), which hands over
//! whole buffers: the kernel's copy of the file's bytes is then made on the machine's other
//! core, and only the few bytes an opcode spans
//! across two buffers are copied again.

use std::io::Read;

use super::read_ahead::{ReadAhead, HEADROOM};
use super::{PResult, PickleError};

pub(super) const BUF: usize = 1 << 20;

/// Where the buffer's bytes come from.
enum Feed<R> {
    /// `read` calls on the decoder's thread, into the buffer's free end.
    Direct(R),
    /// Buffers filled by a thread of their own: `[HEADROOM bytes kept free | bytes read]`.
    Ahead(ReadAhead),
}

/// A buffered reader that knows its offset and an upper bound on what is left.
pub struct Input<R: Read> {
    feed: Feed<R>,
    /// `buf[pos..end]` are the bytes not yet consumed; `buf[0]` is at input offset `before`
    /// (wrapping: with a feed that reads ahead, the first buffer's headroom lies before offset 0).
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    before: u64,
    eof: bool,
    /// The last read error, kept so callers can recover typed errors smuggled through `io::Error`.
    pub last_io_error: Option<std::io::Error>,
    /// Upper bound on the total input length (file size, or the decompression limit).
    pub total_bound: u64,
}

impl<R: Read + Send + 'static> Input<R> {
    /// An input whose bytes a thread of its own reads from `r` ahead of the decoder.
    pub fn read_ahead(r: R, total_bound: u64) -> Self {
        Input::fed(Feed::Ahead(ReadAhead::start(Box::new(r))), Box::default(), total_bound)
    }
}

impl<R: Read> Input<R> {
    pub fn new(r: R, total_bound: u64) -> Self {
        Input::fed(Feed::Direct(r), vec![0u8; BUF].into_boxed_slice(), total_bound)
    }

    /// An input at offset 0 with nothing buffered yet.
    fn fed(feed: Feed<R>, buf: Box<[u8]>, total_bound: u64) -> Self {
        Input {
            feed,
            buf,
            pos: 0,
            end: 0,
            before: 0,
            eof: false,
            last_io_error: None,
            total_bound,
        }
    }

    #[inline]
    pub fn offset(&self) -> u64 {
        self.before.wrapping_add(self.pos as u64)
    }

    pub(super) fn fill(&mut self) -> PResult<bool> {
        if self.eof {
            return Ok(false);
        }
        let r = match &mut self.feed {
            Feed::Direct(r) => r,
            Feed::Ahead(_) => return self.fill_ahead(),
        };
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.before += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        loop {
            match r.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let msg = e.to_string();
                    self.last_io_error = Some(e);
                    return Err(PickleError::Input(msg));
                }
            }
        }
    }

    /// [`Input::fill`] from the next buffer read ahead: the bytes not yet consumed are copied
    /// into its headroom (or, more than it holds — a long string taken whole —, both into one
    /// buffer of their own).
    #[cold]
    fn fill_ahead(&mut self) -> PResult<bool> {
        let offset = self.offset();
        let Feed::Ahead(ahead) = &mut self.feed else {
            unreachable!("called for a feed that reads ahead");
        };
        let (mut next, n) = match ahead.next() {
            Ok(Some(filled)) => filled,
            Ok(None) => {
                self.eof = true;
                return Ok(false);
            }
            Err(e) => {
                let msg = e.to_string();
                self.last_io_error = Some(e);
                return Err(PickleError::Input(msg));
            }
        };
        let tail = self.end - self.pos;
        let old = if tail <= HEADROOM {
            let start = HEADROOM - tail;
            next[start..HEADROOM].copy_from_slice(&self.buf[self.pos..self.end]);
            self.before = offset.wrapping_sub(start as u64);
            self.pos = start;
            self.end = HEADROOM + n;
            std::mem::replace(&mut self.buf, next)
        } else {
            let mut both = vec![0u8; tail + n].into_boxed_slice();
            both[..tail].copy_from_slice(&self.buf[self.pos..self.end]);
            both[tail..].copy_from_slice(&next[HEADROOM..HEADROOM + n]);
            ahead.recycle(next);
            self.before = offset;
            self.pos = 0;
            self.end = tail + n;
            std::mem::replace(&mut self.buf, both)
        };
        ahead.recycle(old);
        Ok(true)
    }

    #[inline]
    pub(super) fn u8(&mut self, what: &'static str) -> PResult<u8> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        self.u8_slow(what)
    }

    #[cold]
    pub(super) fn u8_slow(&mut self, what: &'static str) -> PResult<u8> {
        while self.pos >= self.end {
            if !self.fill()? {
                return Err(PickleError::Truncated {
                    offset: self.offset(),
                    what,
                });
            }
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// `n ≤ BUF` bytes, contiguous.
    #[inline]
    pub(super) fn take(&mut self, n: usize, what: &'static str) -> PResult<&[u8]> {
        debug_assert!(n <= BUF);
        while self.end - self.pos < n {
            if !self.fill()? {
                return Err(PickleError::Truncated {
                    offset: self.offset(),
                    what,
                });
            }
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(super) fn array<const N: usize>(&mut self, what: &'static str) -> PResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    /// A payload of `len` bytes announced at `at`: checked against what can remain, then read
    /// incrementally so that a lying prefix never allocates more than the input holds.
    pub(super) fn payload(&mut self, len: u64, at: u64, what: &'static str) -> PResult<Vec<u8>> {
        let remaining = self.total_bound.saturating_sub(self.offset());
        if len > remaining {
            return Err(PickleError::LengthTooLarge {
                offset: at,
                len,
                remaining,
            });
        }
        let mut out = Vec::new();
        let mut left = len as usize;
        while left > 0 {
            if self.pos == self.end && !self.fill()? {
                return Err(PickleError::Truncated {
                    offset: self.offset(),
                    what,
                });
            }
            let n = left.min(self.end - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            left -= n;
        }
        Ok(out)
    }

    /// The bytes from the current position on, at least `want` of them unless the input ends
    /// first (reading more when fewer are buffered); nothing is consumed.
    pub(super) fn window(&mut self, want: usize) -> PResult<&[u8]> {
        while self.end - self.pos < want && self.fill()? {}
        Ok(&self.buf[self.pos..self.end])
    }

    /// Consumes `n` bytes of the last [`Input::window`].
    pub(super) fn skip(&mut self, n: usize) {
        debug_assert!(self.pos + n <= self.end);
        self.pos += n;
    }

    /// Bytes left after the current position (reads to the end).
    pub(super) fn count_rest(&mut self) -> PResult<u64> {
        let mut n = (self.end - self.pos) as u64;
        self.pos = self.end;
        while self.fill()? {
            n += (self.end - self.pos) as u64;
            self.pos = self.end;
        }
        Ok(n)
    }
}
