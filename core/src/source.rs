//! Opening an input: reading its first bytes for sniffing, and transparent gzip
//! decompression on a separate thread with a decompressed-size limit.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};

use crate::error::ImportError;

/// How many leading bytes sniffers see.
pub const HEAD_LEN: usize = 4096;

/// The start of `head` as text for sniffers of text formats: at most 2 KiB, lossy UTF-8, a
/// byte-order mark and leading whitespace dropped.
pub fn leading_text(head: &[u8]) -> std::borrow::Cow<'_, str> {
    let text = String::from_utf8_lossy(&head[..head.len().min(2048)]);
    match text {
        std::borrow::Cow::Borrowed(t) => std::borrow::Cow::Borrowed(t.trim_start_matches('\u{feff}').trim_start()),
        std::borrow::Cow::Owned(t) => std::borrow::Cow::Owned(t.trim_start_matches('\u{feff}').trim_start().to_owned()),
    }
}

/// Limits applied while opening inputs.
#[derive(Debug, Clone, Copy)]
pub struct SourceLimits {
    /// Absolute cap on decompressed bytes.
    pub max_decompressed: u64,
    /// Cap relative to the compressed size: at most this many times larger (with a floor of
    /// 256 MiB), which stops compression bombs long before the absolute cap.
    pub max_ratio: u64,
}

impl Default for SourceLimits {
    fn default() -> Self {
        SourceLimits {
            max_decompressed: 16 << 30,
            max_ratio: 100,
        }
    }
}

/// An opened input: `head` holds its first bytes (already decompressed), `reader` yields the
/// whole content from the start.
pub struct Source {
    pub head: Vec<u8>,
    pub reader: Box<dyn Read + Send>,
    pub gzip: bool,
    /// Upper bound on the content length (file size, or the decompression limit).
    pub bound: u64,
}

impl Source {
    pub fn open(path: &Path, limits: SourceLimits) -> Result<Source, ImportError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Source::from_reader(Box::new(file), len, limits)
    }

    /// `len` is the raw (possibly compressed) length.
    pub fn from_reader(mut raw: Box<dyn Read + Send>, len: u64, limits: SourceLimits) -> Result<Source, ImportError> {
        let mut magic = [0u8; 2];
        let got = read_up_to(&mut raw, &mut magic)?;
        if got == 0 {
            return Err(ImportError::Empty);
        }
        let prefix = std::io::Cursor::new(magic[..got].to_vec());
        let raw: Box<dyn Read + Send> = Box::new(prefix.chain(raw));
        if got == 2 && magic == [0x1f, 0x8b] {
            let limit = limits
                .max_decompressed
                .min((len.saturating_mul(limits.max_ratio)).max(256 << 20));
            let reader: Box<dyn Read + Send> = Box::new(GunzipPipe::spawn(raw, limit));
            return Source::with_head(reader, limit, true);
        }
        Source::with_head(raw, len, false)
    }

    fn with_head(mut reader: Box<dyn Read + Send>, bound: u64, gzip: bool) -> Result<Source, ImportError> {
        let mut head = vec![0u8; HEAD_LEN];
        let n = read_up_to(&mut reader, &mut head).map_err(map_pipe_err)?;
        head.truncate(n);
        if n == 0 {
            return Err(ImportError::Empty);
        }
        let reader = Box::new(std::io::Cursor::new(head.clone()).chain(reader));
        Ok(Source {
            head,
            reader,
            gzip,
            bound,
        })
    }
}

fn read_up_to(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Turns errors that the gzip pipe smuggles through `io::Error` back into typed errors.
pub fn map_pipe_err(e: std::io::Error) -> ImportError {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<PipeError>()) {
        Some(PipeError::TooLarge(limit)) => ImportError::DecompressedTooLarge { limit: *limit },
        Some(PipeError::Gzip(msg)) => ImportError::Gzip(msg.clone()),
        None => ImportError::Io(e),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    #[error("decompressed data exceeds the limit of {0} bytes")]
    TooLarge(u64),
    #[error("gzip: {0}")]
    Gzip(String),
}

/// Decompresses on its own thread and hands 1 MiB chunks to the reader through a bounded
/// channel, so inflating and decoding overlap on two cores. Dropping the pipe stops the thread
/// and waits for it (at most the chunk it is inflating), so none outlives its reader.
struct GunzipPipe {
    /// `None` only while dropping.
    rx: Option<Receiver<Result<Vec<u8>, PipeError>>>,
    thread: Option<std::thread::JoinHandle<()>>,
    chunk: Vec<u8>,
    pos: usize,
    done: bool,
}

impl GunzipPipe {
    fn spawn(raw: Box<dyn Read + Send>, limit: u64) -> GunzipPipe {
        let (tx, rx) = sync_channel::<Result<Vec<u8>, PipeError>>(4);
        let spawned = std::thread::Builder::new()
            .name("memlens-gunzip".into())
            .spawn(move || {
                let mut dec = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(256 << 10, raw));
                let mut total = 0u64;
                loop {
                    let mut buf = vec![0u8; 1 << 20];
                    let n = match read_up_to(&mut dec, &mut buf) {
                        Ok(n) => n,
                        Err(e) => {
                            let _ = tx.send(Err(PipeError::Gzip(e.to_string())));
                            return;
                        }
                    };
                    if n == 0 {
                        return;
                    }
                    total += n as u64;
                    if total > limit {
                        let _ = tx.send(Err(PipeError::TooLarge(limit)));
                        return;
                    }
                    buf.truncate(n);
                    if tx.send(Ok(buf)).is_err() {
                        return; // reader gone
                    }
                }
            });
        let done = spawned.is_err();
        GunzipPipe {
            rx: Some(rx),
            thread: spawned.ok(),
            chunk: Vec::new(),
            pos: 0,
            done,
        }
    }
}

impl Drop for GunzipPipe {
    fn drop(&mut self) {
        // The thread's next send fails once the receiver is gone, and it returns.
        drop(self.rx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Read for GunzipPipe {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos >= self.chunk.len() {
            if self.done {
                return Ok(0);
            }
            let Some(rx) = &self.rx else { return Ok(0) };
            match rx.recv() {
                Ok(Ok(c)) => {
                    self.chunk = c;
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(std::io::Error::other(e));
                }
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
        let n = out.len().min(self.chunk.len() - self.pos);
        out[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// Threads of this process named `memlens-gunzip` (Linux: `/proc/self/task/*/comm`).
    fn gunzip_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .filter_map(|t| t.ok())
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "memlens-gunzip")
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    #[test]
    fn dropping_a_gzip_source_read_in_part_ends_its_thread() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            gz.write_all(&zeros).expect("gzip");
        }
        let gz = gz.finish().expect("gzip");
        let len = gz.len() as u64;
        let mut source =
            Source::from_reader(Box::new(std::io::Cursor::new(gz)), len, SourceLimits::default()).expect("source");
        assert!(source.gzip);
        let mut some = vec![0u8; 3 << 20];
        source.reader.read_exact(&mut some).expect("read");
        assert_eq!(gunzip_threads(), 1, "still inflating the rest");
        drop(source);
        assert_eq!(gunzip_threads(), 0, "the pipe waited for its thread");
    }
}
