//! The report store: one small interface ([`ReportStore`]) over an index of reports and the
//! files that belong to each (original uploads, the pipeline's tables as Parquet, the summary).
//!
//! [`LocalStore`] is the embedded default: a SQLite index (`index.sqlite`, WAL) plus a folder
//! per report under the data directory. Writes are atomic: report files are written into a
//! staging folder and renamed into place, and index changes are single transactions, so a
//! crash (even `kill -9`) mid-ingest leaves either the old state or the new one. Reports left
//! `queued`/`processing` by a crash are picked up again at start-up from their kept uploads.
//!
//! Layout under the data directory:
//! ```text
//! index.sqlite
//! incoming/<id>/            uploads being received (removed at start-up)
//! reports/<id>/uploads/     original uploads, kept for re-analysis
//! reports/<id>/data/        summary.json, Parquet tables, charts (renamed in whole)
//! reports/<id>/staging-*    a data folder being written (removed at start-up)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("index: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("files: {0}")]
    Io(#[from] std::io::Error),
    #[error("index lock poisoned")]
    Poisoned,
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Lifecycle of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportState {
    Queued,
    Processing,
    Ready,
    Failed,
}

impl ReportState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportState::Queued => "queued",
            ReportState::Processing => "processing",
            ReportState::Ready => "ready",
            ReportState::Failed => "failed",
        }
    }
    fn parse(s: &str) -> ReportState {
        match s {
            "queued" => ReportState::Queued,
            "processing" => ReportState::Processing,
            "ready" => ReportState::Ready,
            _ => ReportState::Failed,
        }
    }
}

/// One uploaded file of a report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredFile {
    /// The client's file name (sanitised).
    pub name: String,
    /// The name on disk under `uploads/`.
    pub key: String,
    pub size: u64,
}

/// What the index knows about a report.
#[derive(Debug, Clone)]
pub struct ReportRecord {
    pub id: String,
    pub state: ReportState,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub error: Option<String>,
    pub files: Vec<StoredFile>,
    pub delete_token_hash: String,
}

/// The storage interface the server uses. An object store plus Postgres can implement it when
/// one machine is not enough (see ARCHITECTURE.md).
pub trait ReportStore: Send + Sync {
    /// A folder for receiving the uploads of a new report.
    fn incoming_dir(&self, id: &str) -> StoreResult<PathBuf>;
    /// Moves received uploads into the store and indexes the report as `queued`.
    fn create(&self, record: &ReportRecord) -> StoreResult<()>;
    fn get(&self, id: &str) -> StoreResult<Option<ReportRecord>>;
    fn set_state(&self, id: &str, state: ReportState, error: Option<&str>) -> StoreResult<()>;
    /// Removes a report and its files.
    fn delete(&self, id: &str) -> StoreResult<()>;
    /// Reports a crash left unfinished.
    fn unfinished(&self) -> StoreResult<Vec<String>>;
    /// Removes the files (not the index row) of reports expired before `now`; returns their ids.
    fn purge_expired(&self, now: i64) -> StoreResult<Vec<String>>;
    /// Path of an upload.
    fn upload_path(&self, id: &str, key: &str) -> PathBuf;
    /// A fresh staging folder for a report's data.
    fn staging_dir(&self, id: &str) -> StoreResult<PathBuf>;
    /// Atomically replaces the report's data folder with a staging folder.
    fn commit_data(&self, id: &str, staging: &Path) -> StoreResult<()>;
    /// The report's data folder (exists once processing succeeded).
    fn data_dir(&self, id: &str) -> PathBuf;
}

/// SQLite index + local folders.
pub struct LocalStore {
    root: PathBuf,
    db: Mutex<Connection>,
}

impl LocalStore {
    pub fn open(root: &Path) -> StoreResult<LocalStore> {
        std::fs::create_dir_all(root.join("reports"))?;
        // Half-received uploads of a previous run are gone for good: the client got no id.
        let _ = std::fs::remove_dir_all(root.join("incoming"));
        std::fs::create_dir_all(root.join("incoming"))?;
        let db = Connection::open(root.join("index.sqlite"))?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS reports (
                 id TEXT PRIMARY KEY,
                 state TEXT NOT NULL,
                 created_at INTEGER NOT NULL,
                 expires_at INTEGER,
                 error TEXT,
                 files TEXT NOT NULL,
                 delete_token_hash TEXT NOT NULL
             );",
        )?;
        let store = LocalStore {
            root: root.to_owned(),
            db: Mutex::new(db),
        };
        store.remove_stale_staging()?;
        Ok(store)
    }

    fn report_dir(&self, id: &str) -> PathBuf {
        self.root.join("reports").join(id)
    }

    fn remove_stale_staging(&self) -> StoreResult<()> {
        for entry in std::fs::read_dir(self.root.join("reports"))? {
            let dir = entry?.path();
            if let Ok(inner) = std::fs::read_dir(&dir) {
                for e in inner.flatten() {
                    let name = e.file_name();
                    if name.to_string_lossy().starts_with("staging-") || name == "data.old" {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        Ok(())
    }

    fn conn(&self) -> StoreResult<std::sync::MutexGuard<'_, Connection>> {
        self.db.lock().map_err(|_| StoreError::Poisoned)
    }
}

fn row_to_record(row: &rusqlite::Row<'_>) -> rusqlite::Result<ReportRecord> {
    let files: String = row.get(5)?;
    Ok(ReportRecord {
        id: row.get(0)?,
        state: ReportState::parse(&row.get::<_, String>(1)?),
        created_at: row.get(2)?,
        expires_at: row.get(3)?,
        error: row.get(4)?,
        files: serde_json::from_str(&files).unwrap_or_default(),
        delete_token_hash: row.get(6)?,
    })
}

/// fsyncs a directory so a rename inside it is durable.
fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

impl ReportStore for LocalStore {
    fn incoming_dir(&self, id: &str) -> StoreResult<PathBuf> {
        let d = self.root.join("incoming").join(id);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    fn create(&self, r: &ReportRecord) -> StoreResult<()> {
        let dir = self.report_dir(&r.id);
        std::fs::create_dir_all(&dir)?;
        let incoming = self.root.join("incoming").join(&r.id);
        std::fs::rename(&incoming, dir.join("uploads"))?;
        sync_dir(&dir);
        let files = serde_json::to_string(&r.files).unwrap_or_else(|_| "[]".into());
        self.conn()?.execute(
            "INSERT INTO reports (id, state, created_at, expires_at, error, files, delete_token_hash)
             VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6)",
            params![
                r.id,
                r.state.as_str(),
                r.created_at,
                r.expires_at,
                files,
                r.delete_token_hash
            ],
        )?;
        Ok(())
    }

    fn get(&self, id: &str) -> StoreResult<Option<ReportRecord>> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT id, state, created_at, expires_at, error, files, delete_token_hash FROM reports WHERE id = ?1",
                params![id],
                row_to_record,
            )
            .optional()?)
    }

    fn set_state(&self, id: &str, state: ReportState, error: Option<&str>) -> StoreResult<()> {
        self.conn()?.execute(
            "UPDATE reports SET state = ?2, error = ?3 WHERE id = ?1",
            params![id, state.as_str(), error],
        )?;
        Ok(())
    }

    fn delete(&self, id: &str) -> StoreResult<()> {
        self.conn()?.execute("DELETE FROM reports WHERE id = ?1", params![id])?;
        let dir = self.report_dir(id);
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        Ok(())
    }

    fn unfinished(&self) -> StoreResult<Vec<String>> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare("SELECT id FROM reports WHERE state IN ('queued', 'processing') ORDER BY created_at")?;
        let ids = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
        Ok(ids)
    }

    fn purge_expired(&self, now: i64) -> StoreResult<Vec<String>> {
        let ids: Vec<String> = {
            let conn = self.conn()?;
            let mut stmt = conn.prepare("SELECT id FROM reports WHERE expires_at IS NOT NULL AND expires_at <= ?1")?;
            let ids = stmt
                .query_map(params![now], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            ids
        };
        let mut purged = Vec::new();
        for id in ids {
            let dir = self.report_dir(&id);
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
                purged.push(id);
            }
        }
        Ok(purged)
    }

    fn upload_path(&self, id: &str, key: &str) -> PathBuf {
        self.report_dir(id).join("uploads").join(key)
    }

    fn staging_dir(&self, id: &str) -> StoreResult<PathBuf> {
        let d = self
            .report_dir(id)
            .join(format!("staging-{}", crate::ids::random_hex(8)));
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    fn commit_data(&self, id: &str, staging: &Path) -> StoreResult<()> {
        let dir = self.report_dir(id);
        let data = dir.join("data");
        let old = dir.join("data.old");
        if data.exists() {
            std::fs::rename(&data, &old)?;
        }
        std::fs::rename(staging, &data)?;
        sync_dir(&dir);
        if old.exists() {
            std::fs::remove_dir_all(old)?;
        }
        Ok(())
    }

    fn data_dir(&self, id: &str) -> PathBuf {
        self.report_dir(id).join("data")
    }
}
