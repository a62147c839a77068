//! [`LocalStore`]: the embedded default store — a SQLite index (`index.sqlite`, WAL) plus a
//! folder per report under the data directory. Paths never leave this file.
//!
//! Writes are atomic: uploads are received under `incoming/` and renamed into the report's
//! folder when it is created; data is written into a staging folder (a `tempfile` directory,
//! removed if dropped) and renamed into place once every object in it is fsynced (all at
//! commit, together); index changes are single statements. A crash (even `kill -9`) mid-ingest
//! leaves either the old state or the new one.
//!
//! Layout under the data directory:
//! ```text
//! index.sqlite
//! incoming/<id>/            uploads being received (removed at start-up)
//! reports/<id>/uploads/     original uploads, kept for re-analysis
//! reports/<id>/data/        the published data (renamed in whole)
//! reports/<id>/staging-*    a data folder being written (removed at start-up)
//! ```

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

use super::{
    check_key, ids_from_rows, with_files, BlobWriter, DataWriter, IndexRow, JobId, JobRecord, JobRow, ReportId,
    ReportRecord, ReportState, ReportStore, StoreError, StoreResult, StoredFile, JOB_COLUMNS, ROW_COLUMNS,
};

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
        // Indexes made before report metadata, or jobs, existed gain their columns.
        let has = |column: &str| -> rusqlite::Result<bool> {
            db.prepare("SELECT 1 FROM pragma_table_info('reports') WHERE name = ?1")?
                .exists([column])
        };
        if !has("meta")? {
            db.execute_batch("ALTER TABLE reports ADD COLUMN meta TEXT;")?;
        }
        if !has("job_id")? {
            db.execute_batch(
                "ALTER TABLE reports ADD COLUMN job_id TEXT; ALTER TABLE reports ADD COLUMN job_seq INTEGER;",
            )?;
        }
        // As the shared store's migrations/0002_jobs.sql.
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS training_jobs (
                 id TEXT PRIMARY KEY,
                 scope TEXT NOT NULL,
                 name TEXT NOT NULL,
                 created_at INTEGER NOT NULL,
                 owner_token_hash TEXT NOT NULL,
                 thresholds TEXT,
                 runs INTEGER NOT NULL DEFAULT 0,
                 UNIQUE (scope, name)
             );
             CREATE INDEX IF NOT EXISTS reports_by_job ON reports (job_id, job_seq) WHERE job_id IS NOT NULL;",
        )?;
        let store = LocalStore {
            root: root.to_owned(),
            db: Mutex::new(db),
        };
        store.remove_stale_staging()?;
        Ok(store)
    }

    fn report_dir(&self, id: &ReportId) -> StoreResult<PathBuf> {
        Ok(self.root.join("reports").join(id.as_str()))
    }

    fn incoming_dir(&self, id: &ReportId) -> StoreResult<PathBuf> {
        Ok(self.root.join("incoming").join(id.as_str()))
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

/// A report's row, as [`ROW_COLUMNS`] names it.
fn read_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<IndexRow> {
    Ok(IndexRow {
        id: row.get(0)?,
        state: row.get(1)?,
        created_at: row.get(2)?,
        expires_at: row.get(3)?,
        error: row.get(4)?,
        files: row.get(5)?,
        delete_token_hash: row.get(6)?,
        meta: row.get(7)?,
        job_id: row.get(8)?,
    })
}

/// A job's row, as [`JOB_COLUMNS`] names it.
fn read_job(row: &rusqlite::Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        id: row.get(0)?,
        scope: row.get(1)?,
        name: row.get(2)?,
        created_at: row.get(3)?,
        owner_token_hash: row.get(4)?,
        thresholds: row.get(5)?,
    })
}

/// Starts writing a file's data to disk without waiting for it, so that the fsync that
/// makes it durable later has little left to do (Linux; elsewhere that fsync does it all).
fn start_writeback(f: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the duration of the call; a zero length means
        // "to the end of the file"; the call only schedules writeback (no memory effects).
        unsafe {
            let _ = libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = f;
}

/// How many files [`sync_all_of`] fsyncs at once.
const SYNC_THREADS: usize = 16;

/// fsyncs every file and folder of `paths`, several at a time: a report's data is hundreds of
/// objects for a large snapshot, and fsyncs issued together share the file system's
/// journal commits where one after another each waits for its own.
fn sync_all_of(paths: &[PathBuf]) -> StoreResult<()> {
    if paths.is_empty() {
        return Ok(());
    }
    let per_thread = paths.len().div_ceil(SYNC_THREADS);
    std::thread::scope(|scope| {
        let threads: Vec<_> = paths
            .chunks(per_thread)
            .map(|chunk| scope.spawn(move || chunk.iter().try_for_each(|p| File::open(p)?.sync_all())))
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })?;
    Ok(())
}

/// fsyncs a directory so a rename inside it is durable.
fn sync_dir(dir: &Path) {
    if let Ok(f) = File::open(dir) {
        let _ = f.sync_all();
    }
}

/// An upload being received into `incoming/<id>/<key>`.
struct LocalBlobWriter {
    file: File,
    written: u64,
}

impl BlobWriter for LocalBlobWriter {
    fn write(&mut self, bytes: &[u8]) -> StoreResult<()> {
        self.file.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }
    fn finish(self: Box<Self>) -> StoreResult<u64> {
        self.file.sync_all()?;
        Ok(self.written)
    }
}

/// A new version of a report's data, in a staging folder until committed.
struct LocalDataWriter {
    report_dir: PathBuf,
    staging: tempfile::TempDir,
    /// The files and folders written so far, not yet made durable: [`DataWriter::commit`]
    /// fsyncs them all at once, before the data is renamed into place.
    unsynced: Vec<PathBuf>,
}

impl DataWriter for LocalDataWriter {
    fn put(&mut self, key: &str, bytes: &[u8]) -> StoreResult<()> {
        check_key(key)?;
        let path = self.staging.path().join(key);
        if let Some(parent) = path.parent() {
            if !parent.exists() {
                std::fs::create_dir_all(parent)?;
                self.unsynced.push(parent.to_owned());
            }
        }
        let mut f = File::create(&path)?;
        f.write_all(bytes)?;
        start_writeback(&f);
        self.unsynced.push(path);
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> StoreResult<()> {
        // The files, the folders holding them, and the staging folder's own entries.
        self.unsynced.push(self.staging.path().to_owned());
        sync_all_of(&self.unsynced)?;
        let data = self.report_dir.join("data");
        let old = self.report_dir.join("data.old");
        if data.exists() {
            std::fs::rename(&data, &old)?;
        }
        let staging = self.staging.keep();
        std::fs::rename(&staging, &data)?;
        sync_dir(&self.report_dir);
        if old.exists() {
            std::fs::remove_dir_all(old)?;
        }
        Ok(())
    }
}

impl ReportStore for LocalStore {
    fn upload_writer(&self, id: &ReportId, key: &str) -> StoreResult<Box<dyn BlobWriter>> {
        check_key(key)?;
        let dir = self.incoming_dir(id)?;
        std::fs::create_dir_all(&dir)?;
        let file = File::create(dir.join(key))?;
        Ok(Box::new(LocalBlobWriter { file, written: 0 }))
    }

    fn discard_uploads(&self, id: &ReportId) -> StoreResult<()> {
        let dir = self.incoming_dir(id)?;
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        Ok(())
    }

    fn read_incoming(&self, id: &ReportId, key: &str) -> StoreResult<Option<Box<dyn Read + Send>>> {
        check_key(key)?;
        // The open file stays readable when `create` renames its folder into the report's.
        Ok(Some(Box::new(File::open(self.incoming_dir(id)?.join(key))?)))
    }

    fn open_upload(&self, id: &ReportId, key: &str) -> StoreResult<Box<dyn Read + Send>> {
        check_key(key)?;
        let file = File::open(self.report_dir(id)?.join("uploads").join(key))?;
        let len = file.metadata()?.len();
        // Asked of the disk ahead of the import, as a file the CLI analyses is.
        Ok(memlens_core::infra::prefetch::reader(file, len))
    }

    fn data_writer(&self, id: &ReportId) -> StoreResult<Box<dyn DataWriter>> {
        let report_dir = self.report_dir(id)?;
        let staging = tempfile::Builder::new().prefix("staging-").tempdir_in(&report_dir)?;
        Ok(Box::new(LocalDataWriter {
            report_dir,
            staging,
            unsynced: Vec::new(),
        }))
    }

    fn read_data(&self, id: &ReportId, key: &str) -> StoreResult<Option<Vec<u8>>> {
        check_key(key)?;
        match std::fs::read(self.report_dir(id)?.join("data").join(key)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn create(&self, r: &ReportRecord) -> StoreResult<()> {
        let dir = self.report_dir(&r.id)?;
        std::fs::create_dir_all(&dir)?;
        std::fs::rename(self.incoming_dir(&r.id)?, dir.join("uploads"))?;
        sync_dir(&dir);
        let (files, meta) = IndexRow::encode(r)?;
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        // A job's run takes the job's next place in upload order.
        let job_seq: Option<i64> = match &r.job {
            Some(job) => tx
                .query_row(
                    "UPDATE training_jobs SET runs = runs + 1 WHERE id = ?1 RETURNING runs",
                    params![job.as_str()],
                    |row| row.get(0),
                )
                .optional()?,
            None => None,
        };
        tx.execute(
            "INSERT INTO reports (id, state, created_at, expires_at, error, files, delete_token_hash, meta, job_id, job_seq)
             VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6, ?7, ?8, ?9)",
            params![
                r.id.as_str(),
                r.state.name(),
                r.created_at,
                r.expires_at,
                files,
                r.delete_token_hash,
                meta,
                r.job.as_ref().map(JobId::as_str),
                job_seq
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn add_uploads(&self, id: &ReportId, files: &[StoredFile]) -> StoreResult<()> {
        let (incoming, uploads) = (self.incoming_dir(id)?, self.report_dir(id)?.join("uploads"));
        for f in files {
            check_key(&f.key)?;
            std::fs::rename(incoming.join(&f.key), uploads.join(&f.key))?;
        }
        sync_dir(&uploads);
        let _ = std::fs::remove_dir(&incoming);
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let listed: String = tx.query_row("SELECT files FROM reports WHERE id = ?1", params![id.as_str()], |r| {
            r.get(0)
        })?;
        let all = with_files(id, &listed, files)?;
        tx.execute(
            "UPDATE reports SET files = ?2, state = 'queued', error = NULL WHERE id = ?1",
            params![id.as_str(), all],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn get(&self, id: &ReportId) -> StoreResult<Option<ReportRecord>> {
        let row = self
            .conn()?
            .query_row(
                &format!("SELECT {ROW_COLUMNS} FROM reports WHERE id = ?1"),
                params![id.as_str()],
                read_row,
            )
            .optional()?;
        row.map(IndexRow::decode).transpose()
    }

    fn set_state(&self, id: &ReportId, state: ReportState, error: Option<&str>) -> StoreResult<()> {
        self.conn()?.execute(
            "UPDATE reports SET state = ?2, error = ?3 WHERE id = ?1",
            params![id.as_str(), state.name(), error],
        )?;
        Ok(())
    }

    fn set_meta(&self, id: &ReportId, meta: &memlens_api::ReportMeta, expires_at: Option<i64>) -> StoreResult<()> {
        let m = serde_json::to_string(meta).map_err(|e| StoreError::BadRow(id.to_string(), e.to_string()))?;
        self.conn()?.execute(
            "UPDATE reports SET meta = ?2, expires_at = ?3 WHERE id = ?1",
            params![id.as_str(), m, expires_at],
        )?;
        Ok(())
    }

    fn delete(&self, id: &ReportId) -> StoreResult<()> {
        self.conn()?
            .execute("DELETE FROM reports WHERE id = ?1", params![id.as_str()])?;
        let dir = self.report_dir(id)?;
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        Ok(())
    }

    fn job_named(&self, new: &JobRecord) -> StoreResult<JobRecord> {
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO training_jobs (id, scope, name, created_at, owner_token_hash, thresholds)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (scope, name) DO NOTHING",
            params![
                new.id.as_str(),
                new.scope,
                new.name,
                new.created_at,
                new.owner_token_hash,
                JobRow::encode_thresholds(&new.id, new.thresholds.as_ref())?
            ],
        )?;
        conn.query_row(
            &format!("SELECT {JOB_COLUMNS} FROM training_jobs WHERE scope = ?1 AND name = ?2"),
            params![new.scope, new.name],
            read_job,
        )?
        .decode()
    }

    fn job(&self, id: &JobId) -> StoreResult<Option<JobRecord>> {
        let row = self
            .conn()?
            .query_row(
                &format!("SELECT {JOB_COLUMNS} FROM training_jobs WHERE id = ?1"),
                params![id.as_str()],
                read_job,
            )
            .optional()?;
        row.map(JobRow::decode).transpose()
    }

    fn job_reports(&self, id: &JobId) -> StoreResult<Vec<ReportRecord>> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {ROW_COLUMNS} FROM reports WHERE job_id = ?1 ORDER BY job_seq, created_at"
        ))?;
        let rows = stmt
            .query_map(params![id.as_str()], read_row)?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter().map(IndexRow::decode).collect()
    }

    fn set_job_thresholds(&self, id: &JobId, thresholds: &memlens_api::Thresholds) -> StoreResult<()> {
        self.conn()?.execute(
            "UPDATE training_jobs SET thresholds = ?2 WHERE id = ?1",
            params![id.as_str(), JobRow::encode_thresholds(id, Some(thresholds))?],
        )?;
        Ok(())
    }

    fn unfinished(&self) -> StoreResult<Vec<ReportId>> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare("SELECT id FROM reports WHERE state IN ('queued', 'processing') ORDER BY created_at")?;
        let ids = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<String>, _>>()?;
        ids_from_rows(ids)
    }

    fn purge_expired(&self, now: i64) -> StoreResult<Vec<ReportId>> {
        let ids: Vec<ReportId> = {
            let conn = self.conn()?;
            let mut stmt = conn.prepare("SELECT id FROM reports WHERE expires_at IS NOT NULL AND expires_at <= ?1")?;
            let ids = stmt
                .query_map(params![now], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            ids_from_rows(ids)?
        };
        let mut purged = Vec::new();
        for id in ids {
            let dir = self.report_dir(&id)?;
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
                purged.push(id);
            }
        }
        Ok(purged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &ReportId) -> ReportRecord {
        ReportRecord {
            id: id.clone(),
            state: ReportState::Queued,
            created_at: 1,
            expires_at: None,
            error: None,
            files: vec![super::super::StoredFile {
                name: "a.pickle".into(),
                key: "0-a.pickle".into(),
                size: 3,
                window: None,
            }],
            delete_token_hash: "h".into(),
            meta: Default::default(),
            job: None,
        }
    }

    #[test]
    fn uploads_and_data_round_trip_and_uncommitted_data_is_discarded() {
        let root = tempfile::tempdir().expect("tmp");
        let store = LocalStore::open(root.path()).expect("open");
        let id = &ReportId::parse("0123456789abcdef0123456789abcdef").expect("id");
        let mut w = store.upload_writer(id, "0-a.pickle").expect("writer");
        w.write(b"abc").expect("write");
        assert_eq!(w.finish().expect("finish"), 3);
        store.create(&record(id)).expect("create");
        let mut back = String::new();
        store
            .open_upload(id, "0-a.pickle")
            .expect("open")
            .read_to_string(&mut back)
            .expect("read");
        assert_eq!(back, "abc");

        let mut d = store.data_writer(id).expect("data");
        d.put("f0/d0/usage.parquet", b"u").expect("put");
        d.put("summary.json", b"{}").expect("put");
        d.commit().expect("commit");
        assert_eq!(store.read_data(id, "summary.json").expect("read"), Some(b"{}".to_vec()));
        assert_eq!(
            store.read_data(id, "f0/d0/usage.parquet").expect("read"),
            Some(b"u".to_vec())
        );

        // A second version that is dropped before commit changes nothing.
        let mut d = store.data_writer(id).expect("data");
        d.put("summary.json", b"{\"new\":1}").expect("put");
        drop(d);
        assert_eq!(store.read_data(id, "summary.json").expect("read"), Some(b"{}".to_vec()));
        assert_eq!(store.read_data(id, "missing.json").expect("read"), None);
        assert!(store.read_data(id, "../index.sqlite").is_err());
        assert!(
            ReportId::parse("../x").is_err(),
            "an id cannot name a path out of the store"
        );

        store.set_state(id, ReportState::Ready, None).expect("state");
        assert_eq!(store.get(id).expect("get").map(|r| r.state), Some(ReportState::Ready));
        store.delete(id).expect("delete");
        assert!(store.get(id).expect("get").is_none());
        assert_eq!(store.read_data(id, "summary.json").expect("read"), None);
    }

    #[test]
    fn a_commit_that_cannot_make_every_object_durable_publishes_nothing() {
        let root = tempfile::tempdir().expect("tmp");
        let store = LocalStore::open(root.path()).expect("open");
        let id = &ReportId::parse("0123456789abcdef0123456789abcdef").expect("id");
        store
            .upload_writer(id, "0-a.pickle")
            .expect("writer")
            .finish()
            .expect("finish");
        store.create(&record(id)).expect("create");
        let mut d = store.data_writer(id).expect("data");
        d.put("summary.json", b"{}").expect("put");
        d.commit().expect("commit");

        let mut d = store.data_writer(id).expect("data");
        d.put("summary.json", b"{\"new\":1}").expect("put");
        d.put("f0/d0/segments/0.parquet", b"s").expect("put");
        // The object goes before its fsync at commit (as a failing disk would refuse it).
        let staging = std::fs::read_dir(root.path().join("reports").join(id.as_str()))
            .expect("report folder")
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("staging-"))
            .expect("a staging folder")
            .path();
        std::fs::remove_file(staging.join("f0/d0/segments/0.parquet")).expect("remove");
        assert!(d.commit().is_err(), "an object that cannot be synced fails the commit");
        assert_eq!(store.read_data(id, "summary.json").expect("read"), Some(b"{}".to_vec()));
        assert_eq!(store.read_data(id, "f0/d0/segments/0.parquet").expect("read"), None);
    }
}
