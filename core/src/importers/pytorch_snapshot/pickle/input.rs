//! The machine's input: a buffered reader that knows its offset and an upper bound on what
//! is left, so that no length prefix allocates more than the input can hold.

use std::io::Read;

use super::{PResult, PickleError};

pub(super) const BUF: usize = 1 << 20;

/// A buffered reader that knows its offset and an upper bound on what is left.
pub struct Input<R: Read> {
    r: R,
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

impl<R: Read> Input<R> {
    pub fn new(r: R, total_bound: u64) -> Self {
        Input {
            r,
            buf: vec![0u8; BUF].into_boxed_slice(),
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
        self.before + self.pos as u64
    }

    pub(super) fn fill(&mut self) -> PResult<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.before += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        loop {
            match self.r.read(&mut self.buf[self.end..]) {
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
