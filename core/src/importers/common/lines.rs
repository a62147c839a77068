//! Reading text logs line by line with a length cap and 1-based line numbers, shared by the
//! text importers (NVML logs, Nsight JSON lines). A line over the cap is an error naming it,
//! before the rest of it is read; a last line without its line break (a log cut off mid-write)
//! is reported as such so importers can skip it.

use std::io::{BufRead, BufReader, Read};

use crate::error::ImportError;
use crate::source::map_pipe_err;

/// Longest line accepted in a text log.
pub const MAX_LINE: usize = 1 << 20;

/// Reads a text log line by line, with a length cap and 1-based line numbers.
pub struct LineReader {
    reader: BufReader<Box<dyn Read + Send>>,
    buf: Vec<u8>,
    /// Number of the line last returned (1-based).
    pub number: usize,
    max: usize,
}

/// One line, without its line break; `terminated` is false for a last line cut off mid-write.
pub struct Line<'a> {
    /// 1-based line number.
    pub number: usize,
    pub text: &'a str,
    pub terminated: bool,
}

impl LineReader {
    pub fn new(reader: Box<dyn Read + Send>) -> LineReader {
        LineReader::with_max(reader, MAX_LINE)
    }

    /// A reader whose lines may be up to `max` bytes long.
    pub fn with_max(reader: Box<dyn Read + Send>, max: usize) -> LineReader {
        LineReader {
            reader: BufReader::with_capacity(64 << 10, reader),
            buf: Vec::new(),
            number: 0,
            max,
        }
    }

    pub fn next_line(&mut self) -> Result<Option<Line<'_>>, ImportError> {
        self.buf.clear();
        let n = (&mut self.reader)
            .take(self.max as u64 + 1)
            .read_until(b'\n', &mut self.buf)
            .map_err(map_pipe_err)?;
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        let terminated = self.buf.last() == Some(&b'\n');
        if !terminated && self.buf.len() > self.max {
            return Err(line_error(self.number, format!("longer than {} bytes", self.max)));
        }
        let mut bytes = &self.buf[..];
        while let [rest @ .., b'\n' | b'\r'] = bytes {
            bytes = rest;
        }
        if self.number == 1 {
            bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            line_error(
                self.number,
                format!("not UTF-8 text (byte {} of the line)", e.valid_up_to() + 1),
            )
        })?;
        Ok(Some(Line {
            number: self.number,
            text,
            terminated,
        }))
    }
}

/// The error naming line `line` and what is wrong with it.
pub fn line_error(line: usize, message: impl std::fmt::Display) -> ImportError {
    ImportError::Line {
        line,
        message: message.to_string(),
    }
}
