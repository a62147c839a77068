//! The index half of the shared store: reports' rows and the ingest job queue in Postgres
//! (`postgres`, the synchronous client, pooled by `r2d2`). Every call runs on a blocking thread
//! (the store is synchronous; handlers call it through `spawn_blocking`).
//!
//! The queue is the index itself: a `queued` report, or a `processing` one whose lease ran out
//! (its worker died), is claimed by one worker with `FOR UPDATE SKIP LOCKED`; the worker renews
//! its lease while it works and records the outcome only while it still holds it. A job claimed
//! [`MAX_ATTEMPTS`] times without an outcome (its workers died each time) is marked failed
//! instead of being claimed again.
//!
//! Migrations are the SQL files in `server/migrations/`, applied in order inside one
//! transaction that holds an advisory lock, so servers and workers starting together apply
//! each exactly once.

use std::time::Duration;

use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use super::{
    ids_from_rows, IndexRow, JobId, JobRecord, JobRow, ReportId, ReportRecord, ReportState, StoreError, StoreResult,
    JOB_COLUMNS, ROW_COLUMNS,
};

/// Claims of one job without an outcome before it is marked failed.
pub const MAX_ATTEMPTS: i32 = 2;

/// The schema, in order: (version, SQL).
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../../migrations/0001_reports.sql")),
    (2, include_str!("../../../migrations/0002_jobs.sql")),
];

/// An arbitrary constant naming memlens' migration lock among the database's advisory locks.
const MIGRATION_LOCK: i64 = 0x6d656d6c656e73;

type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;

/// A job a worker claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub id: ReportId,
    /// 1 for the first claim; more when earlier workers died holding it.
    pub attempt: i32,
}

/// The Postgres index.
pub struct PgIndex {
    /// `None` only while being dropped.
    pool: Option<Pool>,
}

impl Drop for PgIndex {
    /// The synchronous client closes its connections by blocking on a runtime of its own, which
    /// Tokio forbids on an async worker thread (where the last handle of the store may be
    /// dropped at shutdown): they are closed on a thread of their own.
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let _ = std::thread::spawn(move || drop(pool)).join();
        }
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        StoreError::Postgres(e.to_string())
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        StoreError::Postgres(format!("connection pool: {e}"))
    }
}

fn index_row(r: &postgres::Row) -> IndexRow {
    IndexRow {
        id: r.get(0),
        state: r.get(1),
        created_at: r.get(2),
        expires_at: r.get(3),
        error: r.get(4),
        files: r.get(5),
        delete_token_hash: r.get(6),
        meta: r.get(7),
        job_id: r.get(8),
    }
}

fn job_row(r: &postgres::Row) -> JobRow {
    JobRow {
        id: r.get(0),
        scope: r.get(1),
        name: r.get(2),
        created_at: r.get(3),
        owner_token_hash: r.get(4),
        thresholds: r.get(5),
    }
}

impl PgIndex {
    /// Connects (`postgres://user:pass@host:port/db`), then applies the migrations not yet
    /// applied.
    pub fn connect(url: &str, pool_size: u32) -> StoreResult<PgIndex> {
        let config: postgres::Config = url
            .parse()
            .map_err(|e| StoreError::Postgres(format!("database URL: {e}")))?;
        let manager = PostgresConnectionManager::new(config, NoTls);
        let pool = r2d2::Pool::builder()
            .max_size(pool_size.max(1))
            .connection_timeout(Duration::from_secs(10))
            .build(manager)?;
        let index = PgIndex { pool: Some(pool) };
        index.migrate()?;
        Ok(index)
    }

    fn conn(&self) -> StoreResult<r2d2::PooledConnection<PostgresConnectionManager<NoTls>>> {
        let pool = self
            .pool
            .as_ref()
            .ok_or_else(|| StoreError::Postgres("the index is closed".into()))?;
        Ok(pool.get()?)
    }

    fn migrate(&self) -> StoreResult<()> {
        let mut c = self.conn()?;
        let mut tx = c.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS memlens_migrations (version INTEGER PRIMARY KEY)")?;
        for (version, sql) in MIGRATIONS {
            let done = tx
                .query_opt("SELECT 1 FROM memlens_migrations WHERE version = $1", &[version])?
                .is_some();
            if !done {
                tx.batch_execute(sql)?;
                tx.execute("INSERT INTO memlens_migrations (version) VALUES ($1)", &[version])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn insert(&self, r: &ReportRecord) -> StoreResult<()> {
        let (files, meta) = IndexRow::encode(r)?;
        let job = r.job.as_ref().map(JobId::as_str);
        let mut c = self.conn()?;
        let mut tx = c.transaction()?;
        // A job's run takes the job's next place in upload order (the row lock orders them).
        let job_seq: Option<i64> = match job {
            Some(j) => tx
                .query_opt(
                    "UPDATE training_jobs SET runs = runs + 1 WHERE id = $1 RETURNING runs",
                    &[&j],
                )?
                .map(|row| row.get(0)),
            None => None,
        };
        tx.execute(
            "INSERT INTO reports (id, state, created_at, expires_at, error, files, delete_token_hash, meta, job_id, job_seq)
             VALUES ($1, $2, $3, $4, NULL, $5, $6, $7, $8, $9)",
            &[
                &r.id.as_str(),
                &r.state.name(),
                &r.created_at,
                &r.expires_at,
                &files,
                &r.delete_token_hash,
                &meta,
                &job,
                &job_seq,
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn job_named(&self, new: &JobRecord) -> StoreResult<JobRecord> {
        let mut c = self.conn()?;
        c.execute(
            "INSERT INTO training_jobs (id, scope, name, created_at, owner_token_hash, thresholds)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope, name) DO NOTHING",
            &[
                &new.id.as_str(),
                &new.scope,
                &new.name,
                &new.created_at,
                &new.owner_token_hash,
                &JobRow::encode_thresholds(&new.id, new.thresholds.as_ref())?,
            ],
        )?;
        let row = c.query_one(
            &format!("SELECT {JOB_COLUMNS} FROM training_jobs WHERE scope = $1 AND name = $2"),
            &[&new.scope, &new.name],
        )?;
        job_row(&row).decode()
    }

    pub fn job(&self, id: &JobId) -> StoreResult<Option<JobRecord>> {
        let row = self.conn()?.query_opt(
            &format!("SELECT {JOB_COLUMNS} FROM training_jobs WHERE id = $1"),
            &[&id.as_str()],
        )?;
        row.map(|r| job_row(&r).decode()).transpose()
    }

    pub fn job_reports(&self, id: &JobId) -> StoreResult<Vec<ReportRecord>> {
        let rows = self.conn()?.query(
            &format!("SELECT {ROW_COLUMNS} FROM reports WHERE job_id = $1 ORDER BY job_seq, created_at"),
            &[&id.as_str()],
        )?;
        rows.iter().map(|r| index_row(r).decode()).collect()
    }

    pub fn set_job_thresholds(&self, id: &JobId, thresholds: &memlens_api::Thresholds) -> StoreResult<()> {
        self.conn()?.execute(
            "UPDATE training_jobs SET thresholds = $2 WHERE id = $1",
            &[&id.as_str(), &JobRow::encode_thresholds(id, Some(thresholds))?],
        )?;
        Ok(())
    }

    pub fn get(&self, id: &ReportId) -> StoreResult<Option<ReportRecord>> {
        let id = id.as_str();
        let row = self
            .conn()?
            .query_opt(&format!("SELECT {ROW_COLUMNS} FROM reports WHERE id = $1"), &[&id])?;
        row.map(|r| index_row(&r).decode()).transpose()
    }

    /// Adds uploads to the report's files and queues it again. A worker processing it keeps its
    /// lease: its outcome is not recorded (the report stays queued) and the report is claimed
    /// again once that worker lets go ([`PgIndex::finish`]).
    pub fn add_uploads(&self, id: &ReportId, files: &[super::StoredFile]) -> StoreResult<()> {
        let key = id.as_str();
        let mut c = self.conn()?;
        let mut tx = c.transaction()?;
        let listed: String = tx
            .query_opt("SELECT files FROM reports WHERE id = $1 FOR UPDATE", &[&key])?
            .ok_or_else(|| StoreError::BadRow(id.to_string(), "no such report".into()))?
            .get(0);
        let all = super::with_files(id, &listed, files)?;
        tx.execute(
            "UPDATE reports SET files = $2, state = 'queued', error = NULL, attempts = 0 WHERE id = $1",
            &[&key, &all],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn set_state(&self, id: &ReportId, state: ReportState, error: Option<&str>) -> StoreResult<()> {
        let id = id.as_str();
        self.conn()?.execute(
            "UPDATE reports SET state = $2, error = $3 WHERE id = $1",
            &[&id, &state.name(), &error],
        )?;
        Ok(())
    }

    pub fn set_meta(&self, id: &ReportId, meta: &memlens_api::ReportMeta, expires_at: Option<i64>) -> StoreResult<()> {
        let id = id.as_str();
        let m = serde_json::to_string(meta).map_err(|e| StoreError::BadRow(id.to_string(), e.to_string()))?;
        self.conn()?.execute(
            "UPDATE reports SET meta = $2, expires_at = $3 WHERE id = $1",
            &[&id, &m, &expires_at],
        )?;
        Ok(())
    }

    pub fn delete(&self, id: &ReportId) -> StoreResult<()> {
        let id = id.as_str();
        self.conn()?.execute("DELETE FROM reports WHERE id = $1", &[&id])?;
        Ok(())
    }

    /// The prefix of the report's published data.
    pub fn data_prefix(&self, id: &ReportId) -> StoreResult<Option<String>> {
        let id = id.as_str();
        let row = self
            .conn()?
            .query_opt("SELECT data_prefix FROM reports WHERE id = $1 AND NOT purged", &[&id])?;
        Ok(row.and_then(|r| r.get(0)))
    }

    /// Publishes `prefix` as the report's data; returns the prefix it replaced.
    pub fn publish_data(&self, id: &ReportId, prefix: &str) -> StoreResult<Option<String>> {
        let id = id.as_str();
        let mut c = self.conn()?;
        let mut tx = c.transaction()?;
        let old = tx
            .query_opt("SELECT data_prefix FROM reports WHERE id = $1 FOR UPDATE", &[&id])?
            .ok_or_else(|| StoreError::BadRow(id.to_string(), "no such report".into()))?;
        tx.execute("UPDATE reports SET data_prefix = $2 WHERE id = $1", &[&id, &prefix])?;
        tx.commit()?;
        Ok(old.get(0))
    }

    pub fn unfinished(&self) -> StoreResult<Vec<ReportId>> {
        let rows = self.conn()?.query(
            "SELECT id FROM reports WHERE state IN ('queued', 'processing') ORDER BY created_at",
            &[],
        )?;
        ids_from_rows(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Expired reports not purged yet, marked purged; the caller removes their objects.
    pub fn take_expired(&self, now: i64) -> StoreResult<Vec<ReportId>> {
        let rows = self.conn()?.query(
            "UPDATE reports SET purged = TRUE, data_prefix = NULL
             WHERE expires_at IS NOT NULL AND expires_at <= $1 AND NOT purged RETURNING id",
            &[&now],
        )?;
        ids_from_rows(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Claims the oldest job no live worker holds, for `lease`. Jobs already claimed
    /// [`MAX_ATTEMPTS`] times whose lease ran out are marked failed on the way.
    pub fn claim(&self, worker: &str, lease: Duration) -> StoreResult<Option<Claim>> {
        let lease_ms = lease.as_millis() as i64;
        let mut c = self.conn()?;
        c.execute(
            "UPDATE reports SET state = 'failed', lease_owner = NULL,
                 error = 'processing stopped ' || attempts || ' times without finishing (the worker died: out of memory, or killed); not retried again'
             WHERE state = 'processing' AND lease_until < now() AND attempts >= $1",
            &[&MAX_ATTEMPTS],
        )?;
        let row = c.query_opt(
            "UPDATE reports SET state = 'processing', lease_owner = $1,
                 lease_until = now() + make_interval(secs => $2::bigint / 1000.0),
                 attempts = attempts + 1
             WHERE id = (
                 SELECT id FROM reports
                 WHERE (state = 'queued' AND (lease_until IS NULL OR lease_until < now()))
                    OR (state = 'processing' AND lease_until < now())
                 ORDER BY created_at
                 FOR UPDATE SKIP LOCKED
                 LIMIT 1)
             RETURNING id, attempts",
            &[&worker, &lease_ms],
        )?;
        row.map(|r| {
            let id: String = r.get(0);
            Ok(Claim {
                id: ReportId::parse(&id).map_err(|e| StoreError::BadRow(id.clone(), e.to_string()))?,
                attempt: r.get(1),
            })
        })
        .transpose()
    }

    /// Renews `worker`'s lease on `id`; `false` when it no longer holds it.
    pub fn renew(&self, id: &ReportId, worker: &str, lease: Duration) -> StoreResult<bool> {
        let id = id.as_str();
        let lease_ms = lease.as_millis() as i64;
        let n = self.conn()?.execute(
            "UPDATE reports SET lease_until = now() + make_interval(secs => $3::bigint / 1000.0)
             WHERE id = $1 AND lease_owner = $2 AND state IN ('processing', 'queued')",
            &[&id, &worker, &lease_ms],
        )?;
        Ok(n == 1)
    }

    /// Records a job's outcome if `worker` still holds it; `false` when it does not (another
    /// worker took it over after this one's lease ran out). A report given more uploads while
    /// it was processed stays queued, for the next claim, and the lease is let go either way.
    pub fn finish(&self, id: &ReportId, worker: &str, state: ReportState, error: Option<&str>) -> StoreResult<bool> {
        let id = id.as_str();
        let n = self.conn()?.execute(
            "UPDATE reports SET
                 error = CASE WHEN state = 'processing' THEN $4 ELSE error END,
                 state = CASE WHEN state = 'processing' THEN $3 ELSE state END,
                 lease_owner = NULL, lease_until = NULL
             WHERE id = $1 AND lease_owner = $2 AND state IN ('processing', 'queued')",
            &[&id, &worker, &state.name(), &error],
        )?;
        Ok(n == 1)
    }
}
