//! Uploads decoded while they arrive: a file of an upload is imported on a thread of its own
//! that reads what the store has written of it so far, so that when the last byte is in, its
//! tables are (nearly) ready and the report's task goes straight on to the analyses.
//!
//! - [`UploadFeed`]: how much of an upload is written, and whether it ended (complete or not);
//!   the upload handler advances it after each write.
//! - [`FollowingReader`]: reads an upload still being written, up to what the feed says is
//!   written, waiting for more; it ends where the complete upload ends, and fails when the
//!   upload failed.
//! - [`PreImports`]: the imports begun, by report and upload key, bounded by a number of slots
//!   (an import holds its slot until a task takes its tables, or it is forgotten). Only stores
//!   that can read an upload back while it is written take part ([`ReportStore::read_incoming`]);
//!   uploads into a run of ranks do not (their report waits for its last rank).
//!
//! A task that finds no begun import for a file (none was begun, a server restart, another
//! process's upload) reads the kept upload as before: the outcome is the same either way.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex};

use memlens_core::importers::{begin_import, ImportOptions, ImportedFile};
use memlens_core::pipeline::PendingImport;
use memlens_core::source::Source;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::storage::filecache::Reservation;
use crate::storage::store::{ReportId, ReportStore};

/// How far an upload has been written, and how it ended.
#[derive(Default)]
pub struct UploadFeed {
    state: Mutex<FeedState>,
    changed: Condvar,
}

/// Why an upload's import stopped before the upload's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UploadCut {
    #[error("the upload did not complete")]
    Incomplete,
    #[error("the upload's import was abandoned")]
    Abandoned,
}

#[derive(Default)]
struct FeedState {
    written: u64,
    /// `Some(Ok)`: complete at `written` bytes; `Some(Err)`: the upload failed.
    end: Option<Result<(), UploadCut>>,
    /// Its import was forgotten ([`PreImports::forget`]): nothing more is read, even of a
    /// complete upload.
    stopped: bool,
}

impl UploadFeed {
    /// `written` bytes of the upload are in the store.
    pub fn advance(&self, written: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.written = s.written.max(written);
        }
        self.changed.notify_all();
    }

    /// The upload ended: complete (`Ok`) or not. Only the first end counts.
    pub fn end(&self, outcome: Result<(), UploadCut>) {
        if let Ok(mut s) = self.state.lock() {
            if s.end.is_none() {
                s.end = Some(outcome);
            }
        }
        self.changed.notify_all();
    }

    /// Nothing more is to be read of the upload, complete or not: its reader fails at its next
    /// read.
    fn stop(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.stopped = true;
        }
        self.changed.notify_all();
    }

    /// Waits until more than `pos` bytes are written or the upload ended; returns how many are
    /// written and the end, if any (a failure once the feed is stopped).
    fn wait_past(&self, pos: u64) -> std::io::Result<(u64, Option<Result<(), UploadCut>>)> {
        let poisoned = |_| std::io::Error::other("upload feed poisoned");
        let mut s = self.state.lock().map_err(poisoned)?;
        while s.written <= pos && s.end.is_none() && !s.stopped {
            s = self.changed.wait(s).map_err(poisoned)?;
        }
        if s.stopped {
            return Ok((s.written, Some(Err(UploadCut::Abandoned))));
        }
        Ok((s.written, s.end))
    }
}

/// Ends its feed as failed when dropped before [`FeedGuard::complete`]: every way an upload
/// can stop early (too large, interrupted, a write error) stops its import too.
pub struct FeedGuard {
    feed: Arc<UploadFeed>,
    done: bool,
}

impl FeedGuard {
    fn new(feed: Arc<UploadFeed>) -> FeedGuard {
        FeedGuard { feed, done: false }
    }
    pub fn advance(&self, written: u64) {
        self.feed.advance(written);
    }
    pub fn complete(mut self, written: u64) {
        self.feed.advance(written);
        self.feed.end(Ok(()));
        self.done = true;
    }
}

impl Drop for FeedGuard {
    fn drop(&mut self) {
        if !self.done {
            self.feed.end(Err(UploadCut::Incomplete));
        }
    }
}

/// Reads an upload while it is written: never past what its feed says is written.
pub struct FollowingReader {
    inner: Box<dyn Read + Send>,
    feed: Arc<UploadFeed>,
    pos: u64,
}

impl FollowingReader {
    pub fn new(inner: Box<dyn Read + Send>, feed: Arc<UploadFeed>) -> FollowingReader {
        FollowingReader { inner, feed, pos: 0 }
    }
}

impl Read for FollowingReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let (written, end) = self.feed.wait_past(self.pos)?;
        if let Some(Err(e)) = end {
            return Err(std::io::Error::other(e));
        }
        if written <= self.pos {
            return Ok(0); // complete, and all of it read
        }
        let want = (written - self.pos).min(buf.len() as u64) as usize;
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the stored upload is shorter than what was written of it",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// An import begun for one upload, with the slot it holds and what it takes out of the file
/// cache's budget while it waits for its task.
struct Begun {
    import: memlens_core::importers::BegunImport,
    feed: Arc<UploadFeed>,
    slot: OwnedSemaphorePermit,
    reservation: Option<Reservation>,
}

/// Imports taken out of [`PreImports`] by [`PreImports::forget`].
pub struct Forgotten(Vec<Begun>);

impl Forgotten {
    /// Waits for their threads to end: each stops at its next read and only then closes the
    /// upload's file, and on a full disk a removed file's space comes back only once no thread
    /// holds it open.
    pub fn wait(self) {
        for b in self.0 {
            let _ = b.import.wait();
        }
    }
}

/// The imports begun while uploads arrive, by (report, upload key).
pub struct PreImports {
    slots: Arc<Semaphore>,
    begun: Mutex<HashMap<(ReportId, String), Begun>>,
    options: ImportOptions,
}

impl PreImports {
    /// At most `slots` imports at once (begun and not yet taken by a task).
    pub fn new(slots: usize, options: ImportOptions) -> PreImports {
        PreImports {
            slots: Arc::new(Semaphore::new(slots)),
            begun: Mutex::new(HashMap::new()),
            options,
        }
    }

    /// Begins importing upload `key` of report `id` as it is written, when a slot is free and
    /// the store can read the upload back meanwhile; the returned guard is the upload's feed.
    /// `size_bound` is at least the upload's final size (it bounds decompression and length
    /// prefixes the way a file's size does).
    pub fn begin(&self, store: &dyn ReportStore, id: &ReportId, key: &str, size_bound: u64) -> Option<FeedGuard> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        let inner = match store.read_incoming(id, key) {
            Ok(Some(r)) => r,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(report = %id, "cannot follow upload {key}: {e}");
                return None;
            }
        };
        let feed = Arc::new(UploadFeed::default());
        let reader = FollowingReader::new(inner, feed.clone());
        let source = self.options.source;
        let import = begin_import(
            move || {
                crate::ingest::priority::lower_to(crate::ingest::priority::INGEST);
                Source::from_reader(Box::new(reader), size_bound, source)
            },
            self.options,
        );
        let import = match import {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(report = %id, "cannot begin importing upload {key}: {e}");
                return None;
            }
        };
        tracing::debug!(report = %id, "importing upload {key} as it arrives");
        if let Ok(mut m) = self.begun.lock() {
            m.insert(
                (id.clone(), key.to_owned()),
                Begun {
                    import,
                    feed: feed.clone(),
                    slot,
                    reservation: None,
                },
            );
        }
        Some(FeedGuard::new(feed))
    }

    /// Keeps `reservation` with the import begun for upload `key` of report `id` until it is
    /// taken or forgotten, in place of the one it kept (made before that one is given back, so
    /// the budget never has room for both files and the import); dropped at once when there is
    /// no such import.
    pub fn hold(&self, id: &ReportId, key: &str, reservation: Reservation) {
        if let Ok(mut m) = self.begun.lock() {
            if let Some(b) = m.get_mut(&(id.clone(), key.to_owned())) {
                b.reservation = Some(reservation);
            }
        }
    }

    /// The import begun for upload `key` of report `id`, as a pipeline input's import; its
    /// slot and its reservation are given back once the tables are handed over.
    pub fn take(&self, id: &ReportId, key: &str) -> Option<PendingImport> {
        let begun = self.begun.lock().ok()?.remove(&(id.clone(), key.to_owned()))?;
        Some(Box::new(move || {
            let imported: Result<ImportedFile, _> = begun.import.wait();
            drop(begun.slot);
            drop(begun.reservation);
            imported
        }))
    }

    /// Forgets every import begun for report `id` (its upload was refused, or its task has
    /// taken what it needs): each stops at its next read and its thread ends on its own; their
    /// slots come back once the returned [`Forgotten`] is dropped or waited for.
    pub fn forget(&self, id: &ReportId) -> Forgotten {
        let Ok(mut m) = self.begun.lock() else {
            return Forgotten(Vec::new());
        };
        let forgotten: Vec<Begun> = m.extract_if(|(r, _), _| r == id).map(|(_, b)| b).collect();
        for b in &forgotten {
            b.feed.stop();
        }
        Forgotten(forgotten)
    }

    /// How many imports are begun and not yet taken (for tests and metrics).
    pub fn pending(&self) -> usize {
        self.begun.lock().map_or(0, |m| m.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A reader over a buffer that another thread fills, as a file being appended to is.
    struct Growing(Arc<Mutex<Vec<u8>>>, usize);
    impl Read for Growing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let data = self.0.lock().unwrap();
            let n = (data.len() - self.1).min(buf.len());
            buf[..n].copy_from_slice(&data[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    #[test]
    fn a_following_reader_reads_everything_written_as_it_arrives_then_ends() {
        let data = Arc::new(Mutex::new(Vec::new()));
        let feed = Arc::new(UploadFeed::default());
        let mut reader = FollowingReader::new(Box::new(Growing(data.clone(), 0)), feed.clone());
        let writer = {
            let (data, feed) = (data.clone(), feed.clone());
            std::thread::spawn(move || {
                for i in 0..50u8 {
                    let len = {
                        let mut d = data.lock().unwrap();
                        d.extend(std::iter::repeat_n(i, 1000));
                        d.len()
                    };
                    feed.advance(len as u64);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                let len = data.lock().unwrap().len();
                FeedGuard::new(feed).complete(len as u64);
            })
        };
        let mut got = Vec::new();
        reader.read_to_end(&mut got).expect("the whole upload");
        writer.join().unwrap();
        assert_eq!(got.len(), 50_000);
        assert!(got
            .chunks(1000)
            .enumerate()
            .all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    }

    #[test]
    fn a_following_reader_never_reads_past_what_is_written() {
        // The store holds more than the feed says is written (a write in progress).
        let feed = Arc::new(UploadFeed::default());
        feed.advance(3);
        let mut reader = FollowingReader::new(Box::new(Cursor::new(b"abcdef".to_vec())), feed.clone());
        let mut buf = [0u8; 16];
        assert_eq!(reader.read(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], b"abc");
        feed.advance(6);
        feed.end(Ok(()));
        assert_eq!(reader.read(&mut buf).unwrap(), 3);
        assert_eq!(reader.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn an_upload_that_stops_early_fails_its_reader() {
        let feed = Arc::new(UploadFeed::default());
        let guard = FeedGuard::new(feed.clone());
        guard.advance(2);
        let mut reader = FollowingReader::new(Box::new(Cursor::new(b"ab".to_vec())), feed);
        let mut buf = [0u8; 4];
        assert_eq!(reader.read(&mut buf).unwrap(), 2);
        drop(guard); // the upload was refused or cut off
        let err = reader.read(&mut buf).expect_err("the upload failed");
        assert!(err.to_string().contains("did not complete"), "{err}");
    }

    #[test]
    fn a_stopped_feed_fails_its_reader_complete_or_waiting() {
        // Complete: the import of a refused upload reads no further.
        let feed = Arc::new(UploadFeed::default());
        let guard = FeedGuard::new(feed.clone());
        let mut reader = FollowingReader::new(Box::new(Cursor::new(b"abcd".to_vec())), feed.clone());
        guard.complete(4);
        let mut buf = [0u8; 2];
        assert_eq!(reader.read(&mut buf).unwrap(), 2);
        feed.stop();
        let err = reader.read(&mut buf).expect_err("stopped");
        assert!(err.to_string().contains("abandoned"), "{err}");
        // Waiting for more: woken by the stop.
        let feed = Arc::new(UploadFeed::default());
        let mut reader = FollowingReader::new(Box::new(Cursor::new(Vec::new())), feed.clone());
        let waiting = std::thread::spawn(move || reader.read(&mut [0u8; 2]).map_err(|e| e.to_string()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        feed.stop();
        let err = waiting.join().unwrap().expect_err("stopped while waiting");
        assert!(err.contains("abandoned"), "{err}");
    }

    #[test]
    fn a_store_shorter_than_its_feed_is_an_error_not_an_early_end() {
        let feed = Arc::new(UploadFeed::default());
        feed.advance(10);
        feed.end(Ok(()));
        let mut reader = FollowingReader::new(Box::new(Cursor::new(b"abc".to_vec())), feed);
        let mut got = Vec::new();
        let err = reader.read_to_end(&mut got).expect_err("3 of 10 bytes");
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
