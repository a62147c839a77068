//! The report store: one interface ([`ReportStore`]) of **rows** (the index of reports and
//! their lifecycle) and **blobs** (a report's uploads and the data the pipeline wrote for it),
//! named by report id and key — never by filesystem path, so an object store can sit behind it.
//!
//! Writes are all-or-nothing: uploads become part of the store only when [`ReportStore::create`]
//! indexes the report; a report's data is written through a [`DataWriter`] and published by
//! [`DataWriter::commit`] in one step (dropping the writer discards it). Reports left
//! `queued`/`processing` by a crash are listed by [`ReportStore::unfinished`] and resumed from
//! their kept uploads.
//!
//! [`LocalStore`] (SQLite index + a folder per report) is the embedded default.
//! [`SharedStore`] (Postgres index + S3-compatible objects) is what a scaled-out deployment's
//! API servers and workers share; it also offers the [`IngestQueue`]. [`StoreArgs`]
//! chooses between them from the configuration.

mod args;
mod local;
mod objects;
mod postgres;
mod shared;

use std::io::Read;
use std::time::Duration;

pub use args::{OpenStoreError, StoreArgs};
pub use local::LocalStore;
pub use memlens_api::ReportState;
pub use objects::S3Config;
pub use postgres::{Claim, MAX_ATTEMPTS};
use serde::{Deserialize, Serialize};
pub use shared::SharedStore;

pub use crate::ids::{JobId, ReportId};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("index: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("files: {0}")]
    Io(#[from] std::io::Error),
    #[error("index lock poisoned")]
    Poisoned,
    #[error("invalid object key `{0}`")]
    BadKey(String),
    #[error("index row of report {0} is damaged: {1}")]
    BadRow(String, String),
    #[error("Postgres index: {0}")]
    Postgres(String),
    #[error("object store: {0}")]
    Objects(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    /// Whether the disk (or the database) ran out of space: ENOSPC from a file write, or
    /// SQLite's `SQLITE_FULL`.
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Io(e) => e.kind() == std::io::ErrorKind::StorageFull || e.raw_os_error() == Some(28),
            StoreError::Sql(rusqlite::Error::SqliteFailure(f, _)) => f.code == rusqlite::ErrorCode::DiskFull,
            _ => false,
        }
    }
}

/// Ids as the index keeps them, checked.
pub(crate) fn ids_from_rows(ids: Vec<String>) -> StoreResult<Vec<ReportId>> {
    ids.into_iter()
        .map(|id| ReportId::parse(&id).map_err(|e| StoreError::BadRow(id.clone(), e.to_string())))
        .collect()
}

/// One uploaded file of a report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredFile {
    /// The client's file name (sanitised).
    pub name: String,
    /// The upload's key in the store.
    pub key: String,
    pub size: u64,
    /// Its place among the windows of one recording (`?window=K`): the report's windows are
    /// analysed as the one snapshot they make together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
}

/// What the index knows about a report.
#[derive(Debug, Clone)]
pub struct ReportRecord {
    pub id: ReportId,
    pub state: ReportState,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub error: Option<String>,
    pub files: Vec<StoredFile>,
    /// Hash of the owner token (deletes the report, edits its metadata).
    pub delete_token_hash: String,
    /// What the report says about itself.
    pub meta: memlens_api::ReportMeta,
    /// The job it is a run of.
    pub job: Option<JobId>,
}

/// A job: the runs uploaded under one name (`?job=NAME`) in one scope — the hash of the upload
/// token they came with, or empty on a server open to uploads.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: JobId,
    pub scope: String,
    pub name: String,
    pub created_at: i64,
    /// Hash of the owner token (edits the job's thresholds), given to its first uploader.
    pub owner_token_hash: String,
    /// The limits each run is held to against the one before; `None`: the defaults.
    pub thresholds: Option<memlens_api::Thresholds>,
}

impl ReportRecord {
    /// A report in `state` with no uploads listed, no owner token, created at time 0: one that
    /// the benches and tests write data for directly, without the upload path.
    pub fn bare(id: &ReportId, state: ReportState) -> ReportRecord {
        ReportRecord {
            id: id.clone(),
            state,
            created_at: 0,
            expires_at: None,
            error: None,
            files: Vec::new(),
            delete_token_hash: String::new(),
            meta: Default::default(),
            job: None,
        }
    }
}

/// Receives one upload's bytes; nothing is visible until the report is created.
pub trait BlobWriter: Send {
    fn write(&mut self, bytes: &[u8]) -> StoreResult<()>;
    /// Makes the blob durable; returns its length.
    fn finish(self: Box<Self>) -> StoreResult<u64>;
}

/// Receives a report's data objects (`summary.json`, `f0/events.parquet`, …) and publishes them
/// together; dropped without [`DataWriter::commit`], it leaves the report's data as it was.
pub trait DataWriter: Send {
    fn put(&mut self, key: &str, bytes: &[u8]) -> StoreResult<()>;
    /// Replaces the report's data with what was put, atomically.
    fn commit(self: Box<Self>) -> StoreResult<()>;
}

/// The storage interface the server uses (see ARCHITECTURE.md, "Scaling out").
pub trait ReportStore: Send + Sync {
    // Blobs: uploads.
    /// A writer for upload `key` of the report being received as `id`.
    fn upload_writer(&self, id: &ReportId, key: &str) -> StoreResult<Box<dyn BlobWriter>>;
    /// Forgets the uploads of a report that was never created (a rejected upload).
    fn discard_uploads(&self, id: &ReportId) -> StoreResult<()>;
    /// Reads a kept upload of a created report.
    fn open_upload(&self, id: &ReportId, key: &str) -> StoreResult<Box<dyn Read + Send>>;
    /// Reads upload `key` of the report being received as `id` while its writer still writes
    /// it (from its first byte; what is read past the bytes written so far is unspecified, so
    /// callers read no further than that). `None`: this store cannot read an upload back
    /// before it is finished (an object store's multipart upload).
    fn read_incoming(&self, _id: &ReportId, _key: &str) -> StoreResult<Option<Box<dyn Read + Send>>> {
        Ok(None)
    }

    // Blobs: report data.
    /// A writer for a new version of the report's data.
    fn data_writer(&self, id: &ReportId) -> StoreResult<Box<dyn DataWriter>>;
    /// One object of the report's published data; `None` when it has none by that key.
    fn read_data(&self, id: &ReportId, key: &str) -> StoreResult<Option<Vec<u8>>>;

    // Rows.
    /// Indexes the report (with its received uploads) in `record.state`.
    fn create(&self, record: &ReportRecord) -> StoreResult<()>;
    fn get(&self, id: &ReportId) -> StoreResult<Option<ReportRecord>>;
    /// Adds received uploads (written by [`ReportStore::upload_writer`] under `id`) to the
    /// created report `id` and queues it to be analysed again with them.
    fn add_uploads(&self, id: &ReportId, files: &[StoredFile]) -> StoreResult<()>;
    fn set_state(&self, id: &ReportId, state: ReportState, error: Option<&str>) -> StoreResult<()>;
    /// Replaces the report's metadata and expiry.
    fn set_meta(&self, id: &ReportId, meta: &memlens_api::ReportMeta, expires_at: Option<i64>) -> StoreResult<()>;
    /// Removes a report, its uploads and its data.
    fn delete(&self, id: &ReportId) -> StoreResult<()>;
    // Rows: jobs.
    /// Job `new.name` in `new.scope`: the one indexed already, else `new`, indexed now (two
    /// uploads naming a new job at once get one job).
    fn job_named(&self, new: &JobRecord) -> StoreResult<JobRecord>;
    fn job(&self, id: &JobId) -> StoreResult<Option<JobRecord>>;
    /// The job's reports, in the order they were indexed.
    fn job_reports(&self, id: &JobId) -> StoreResult<Vec<ReportRecord>>;
    fn set_job_thresholds(&self, id: &JobId, thresholds: &memlens_api::Thresholds) -> StoreResult<()>;

    /// Reports a crash left unfinished, oldest first.
    fn unfinished(&self) -> StoreResult<Vec<ReportId>>;
    /// Removes the uploads and data (not the index row) of reports expired before `now`;
    /// returns their ids.
    fn purge_expired(&self, now: i64) -> StoreResult<Vec<ReportId>>;

    /// The queue ingest workers claim reports from, when processes share this store; `None`
    /// for a store only one server uses (it processes its own uploads as they arrive).
    fn ingest_queue(&self) -> Option<&dyn IngestQueue> {
        None
    }
}

/// Ingest tasks shared by workers (one a report, the queue of `memlens worker`): each report is claimed by one worker at a time, for a lease
/// it renews while it works; a report whose worker died is claimed again once the lease ran
/// out.
pub trait IngestQueue: Send + Sync {
    /// The oldest report no live worker holds, now `worker`'s for `lease`.
    fn claim(&self, worker: &str, lease: Duration) -> StoreResult<Option<Claim>>;
    /// Extends `worker`'s lease; `false` when it no longer holds the report.
    fn renew(&self, id: &ReportId, worker: &str, lease: Duration) -> StoreResult<bool>;
    /// Records the outcome if `worker` still holds the report; `false` when it does not.
    fn finish(&self, id: &ReportId, worker: &str, state: ReportState, error: Option<&str>) -> StoreResult<bool>;
}

/// An index row as both index backends store it (files and metadata as JSON text).
pub(crate) struct IndexRow {
    pub id: String,
    pub state: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub error: Option<String>,
    pub files: String,
    pub delete_token_hash: String,
    pub meta: Option<String>,
    pub job_id: Option<String>,
}

/// The columns of a report's index row, in [`IndexRow`]'s order (both backends).
pub(crate) const ROW_COLUMNS: &str = "id, state, created_at, expires_at, error, files, delete_token_hash, meta, job_id";

impl IndexRow {
    /// The record's files and metadata as stored.
    pub fn encode(r: &ReportRecord) -> StoreResult<(String, String)> {
        let bad = |e: serde_json::Error| StoreError::BadRow(r.id.to_string(), e.to_string());
        let files = serde_json::to_string(&r.files).map_err(bad)?;
        let meta = serde_json::to_string(&r.meta).map_err(bad)?;
        Ok((files, meta))
    }

    /// The record back, checked.
    pub fn decode(self) -> StoreResult<ReportRecord> {
        let id = ReportId::parse(&self.id).map_err(|e| StoreError::BadRow(self.id.clone(), e.to_string()))?;
        let state = ReportState::from_name(&self.state)
            .ok_or_else(|| StoreError::BadRow(self.id.clone(), format!("state `{}`", self.state)))?;
        let files = serde_json::from_str(&self.files)
            .map_err(|e| StoreError::BadRow(self.id.clone(), format!("files: {e}")))?;
        let meta = match &self.meta {
            Some(m) => {
                serde_json::from_str(m).map_err(|e| StoreError::BadRow(self.id.clone(), format!("meta: {e}")))?
            }
            None => memlens_api::ReportMeta::default(),
        };
        let job = self
            .job_id
            .map(|j| JobId::from_link(&j).ok_or_else(|| StoreError::BadRow(self.id.clone(), format!("job `{j}`"))))
            .transpose()?;
        Ok(ReportRecord {
            id,
            state,
            created_at: self.created_at,
            expires_at: self.expires_at,
            error: self.error,
            files,
            delete_token_hash: self.delete_token_hash,
            meta,
            job,
        })
    }
}

/// A report's files as the index lists them (`listed`), with `added` after them.
pub(crate) fn with_files(id: &ReportId, listed: &str, added: &[StoredFile]) -> StoreResult<String> {
    let bad = |e: serde_json::Error| StoreError::BadRow(id.to_string(), format!("files: {e}"));
    let mut files: Vec<StoredFile> = serde_json::from_str(listed).map_err(bad)?;
    files.extend_from_slice(added);
    serde_json::to_string(&files).map_err(bad)
}

/// A job's index row as both backends store it (thresholds as JSON text).
pub(crate) struct JobRow {
    pub id: String,
    pub scope: String,
    pub name: String,
    pub created_at: i64,
    pub owner_token_hash: String,
    pub thresholds: Option<String>,
}

/// The columns of a job's index row, in [`JobRow`]'s order.
pub(crate) const JOB_COLUMNS: &str = "id, scope, name, created_at, owner_token_hash, thresholds";

impl JobRow {
    /// The thresholds as stored.
    pub fn encode_thresholds(id: &JobId, t: Option<&memlens_api::Thresholds>) -> StoreResult<Option<String>> {
        t.map(|t| serde_json::to_string(t).map_err(|e| StoreError::BadRow(id.to_string(), e.to_string())))
            .transpose()
    }

    pub fn decode(self) -> StoreResult<JobRecord> {
        let bad = |what: String| StoreError::BadRow(format!("job {}", self.id), what);
        Ok(JobRecord {
            id: JobId::from_link(&self.id).ok_or_else(|| bad("id".into()))?,
            thresholds: self
                .thresholds
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| bad(format!("thresholds: {e}")))?,
            scope: self.scope,
            name: self.name,
            created_at: self.created_at,
            owner_token_hash: self.owner_token_hash,
        })
    }
}

/// Keys are relative names of `[A-Za-z0-9._-]` segments joined by `/`, none of them `.`/`..`.
pub fn check_key(key: &str) -> StoreResult<()> {
    let ok = !key.is_empty()
        && key.len() <= 256
        && key.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if ok {
        Ok(())
    } else {
        Err(StoreError::BadKey(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cannot_leave_the_report() {
        for good in ["summary.json", "f0/d1/usage.parquet", "0-leak.pickle"] {
            assert!(check_key(good).is_ok(), "{good}");
        }
        for bad in ["", "../x", "a/../b", "/abs", "a//b", "a\\b", "x y", "./a"] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
    }
}
