//! Opening an input: reading its first bytes for sniffing, and transparent gzip
//! decompression on a separate thread with a decompressed-size limit.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

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
    /// Whether an importer that reads it whole should have a thread of its own read it
    /// ahead (a plain file of [`crate::infra::prefetch::PREFETCH_FROM`] or more: its `read` calls
    /// copy from the page cache, work the decoder's thread need not do; a gzip stream is
    /// already decompressed on a thread of its own).
    pub read_ahead: bool,
}

impl Source {
    /// A file on disk; from 4 MiB on, the kernel is asked for its next megabytes ahead of
    /// the importer (see [`crate::infra::prefetch`]), and a plain one is to be [`Source::read_ahead`].
    pub fn open(path: &Path, limits: SourceLimits) -> Result<Source, ImportError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut source = Source::from_reader(crate::infra::prefetch::reader(file, len), len, limits)?;
        source.read_ahead = !source.gzip && len >= crate::infra::prefetch::PREFETCH_FROM;
        Ok(source)
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
            let reader: Box<dyn Read + Send> = Box::new(ChunkPipe::gunzip(raw, limit));
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
            read_ahead: false,
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

/// Bytes a pipe hands over at a time.
const CHUNK: usize = 1 << 20;
/// Chunks a pipe's thread may be ahead of its reader.
const CHUNKS_AHEAD: usize = 4;

/// Chunks made on a thread of their own (a gzip stream inflated) handed to the reader through
/// a bounded channel, so inflating and decoding overlap on two cores; read chunks go back to
/// the thread for reuse. Dropping the pipe stops the thread and waits for it (at most the
/// chunk it is making), so none outlives its reader.
struct ChunkPipe {
    /// `None` only while dropping.
    rx: Option<Receiver<std::io::Result<Vec<u8>>>>,
    spare: SyncSender<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<()>>,
    chunk: Vec<u8>,
    pos: usize,
    done: bool,
}

impl ChunkPipe {
    /// Runs `produce` on a thread named `name`: it fills each buffer it is given (`fill`
    /// returns how many bytes it wrote, 0 at the end) until the end, an error, or the reader
    /// going away.
    fn spawn<P>(name: &str, mut produce: P) -> ChunkPipe
    where
        P: FnMut(&mut [u8]) -> std::io::Result<usize> + Send + 'static,
    {
        let (tx, rx) = sync_channel::<std::io::Result<Vec<u8>>>(CHUNKS_AHEAD);
        let (spare, spares) = sync_channel::<Vec<u8>>(CHUNKS_AHEAD);
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || loop {
            let mut buf = spares.try_recv().unwrap_or_default();
            buf.resize(CHUNK, 0);
            match produce(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.send(Ok(buf)).is_err() {
                        return; // reader gone
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        });
        let done = spawned.is_err();
        ChunkPipe {
            rx: Some(rx),
            spare,
            thread: spawned.ok(),
            chunk: Vec::new(),
            pos: 0,
            done,
        }
    }

    /// `raw` inflated (every gzip member), at most `limit` bytes of it.
    fn gunzip(raw: Box<dyn Read + Send>, limit: u64) -> ChunkPipe {
        let mut dec = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(256 << 10, raw));
        let mut total = 0u64;
        ChunkPipe::spawn("memlens-gunzip", move |buf| {
            let n = read_up_to(&mut dec, buf).map_err(|e| std::io::Error::other(PipeError::Gzip(e.to_string())))?;
            total += n as u64;
            if total > limit {
                return Err(std::io::Error::other(PipeError::TooLarge(limit)));
            }
            Ok(n)
        })
    }
}

impl Drop for ChunkPipe {
    fn drop(&mut self) {
        // The thread's next send fails once the receiver is gone, and it returns.
        drop(self.rx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Read for ChunkPipe {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos >= self.chunk.len() {
            if self.done {
                return Ok(0);
            }
            let Some(rx) = &self.rx else { return Ok(0) };
            match rx.recv() {
                Ok(Ok(c)) => {
                    let read = std::mem::replace(&mut self.chunk, c);
                    // Full when the thread has its own spares; then it makes a new one.
                    let _ = self.spare.try_send(read);
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
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
    use crate::infra::testing::threads_named;

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
        assert_eq!(threads_named("memlens-gunzip"), 1, "still inflating the rest");
        drop(source);
        assert_eq!(threads_named("memlens-gunzip"), 0, "the pipe waited for its thread");
    }
}
