//! A pasted text or a log as numbered lines ([`TextLine`]): read whole (up to [`MAX_TEXT`]),
//! its terminal colour codes stripped, for the text importers' finders. Which texts are text
//! at all ([`is_text`]) and which only look like one ([`looks_like_json`]).

use std::io::Read;

use crate::error::ImportError;
use crate::source::{map_pipe_err, Source};

/// The largest text read (held whole while its lines are scanned).
pub const MAX_TEXT: u64 = 256 << 20;

/// One line of the text, without its line break, carriage return or terminal colour codes.
#[derive(Debug, Clone)]
pub struct TextLine {
    /// 1-based.
    pub number: usize,
    pub text: String,
}

/// Whether `head` reads as text: no NUL byte, and valid UTF-8 but for a character the head's
/// end may have cut.
pub fn is_text(head: &[u8]) -> bool {
    if head.is_empty() || head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && e.valid_up_to() + 4 > head.len(),
    }
}

/// Whether `head` starts like a JSON document (an object, or an array of values).
pub fn looks_like_json(head: &[u8]) -> bool {
    let t = String::from_utf8_lossy(head);
    let t = t.trim_start_matches('\u{feff}').trim_start();
    t.starts_with('{')
        || t.strip_prefix('[').is_some_and(|rest| {
            let r = rest.trim_start();
            r.starts_with('{') || r.starts_with('[') || r.starts_with('"') || r.starts_with(']')
        })
}

/// Every line of the source, numbered, with `\r` and ANSI colour codes taken out.
pub fn read_lines(source: Source) -> Result<Vec<TextLine>, ImportError> {
    let mut bytes = Vec::new();
    source
        .reader
        .take(MAX_TEXT + 1)
        .read_to_end(&mut bytes)
        .map_err(map_pipe_err)?;
    if bytes.len() as u64 > MAX_TEXT {
        return Err(ImportError::Log(format!(
            "a text of more than {} MiB: memlens reads OOM messages, logs, memory summaries and nvidia-smi screens up to \
             that size (cut the log around the failure)",
            MAX_TEXT >> 20
        )));
    }
    Ok(numbered_lines(&String::from_utf8_lossy(&bytes)))
}

/// The lines of a text, numbered from 1, with `\r` and ANSI colour codes taken out.
pub fn numbered_lines(text: &str) -> Vec<TextLine> {
    text.split('\n')
        .enumerate()
        .map(|(i, l)| TextLine {
            number: i + 1,
            text: strip_ansi(l.trim_end_matches('\r')),
        })
        .collect()
}

fn strip_ansi(line: &str) -> String {
    if !line.contains('\u{1b}') {
        return line.to_owned();
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
