//! [`SharedStore`]: the store of a scaled-out deployment — the index and the ingest queue
//! in Postgres ([`PgIndex`]), uploads and report data in an S3-compatible object store
//! ([`Objects`]). Any number of API servers and workers share one; none keeps state of its own.
//!
//! Object keys under the store's prefix:
//! ```text
//! reports/<id>/uploads/<key>       original uploads (written before the row exists; a report
//!                                  is part of the store only once its row is)
//! reports/<id>/data-<random>/<key> one version of the report's data
//! ```
//! A version of the data is written under a fresh prefix and published by one index update
//! (`data_prefix`); the version it replaced is removed after. A version never published (its
//! writer was dropped) is removed. So a reader only ever sees a whole version.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use super::objects::{ObjectWriter, Objects, Puts, S3Config};
use super::postgres::{Claim, PgIndex};
use super::{
    check_key, BlobWriter, DataWriter, IngestQueue, JobId, JobRecord, ReportId, ReportRecord, ReportState, ReportStore,
    StoreResult,
};

/// Postgres index + S3-compatible objects.
pub struct SharedStore {
    index: Arc<PgIndex>,
    objects: Arc<Objects>,
}

impl SharedStore {
    /// Connects to both and applies the index's migrations. Call on a blocking thread of the
    /// runtime the store will be used from.
    pub fn open(database_url: &str, s3: &S3Config, pool_size: u32) -> StoreResult<SharedStore> {
        let objects = Objects::s3(s3)?;
        let index = PgIndex::connect(database_url, pool_size)?;
        Ok(SharedStore {
            index: Arc::new(index),
            objects: Arc::new(objects),
        })
    }

    fn upload_key(id: &ReportId, key: &str) -> StoreResult<String> {
        check_key(key)?;
        Ok(format!("reports/{id}/uploads/{key}"))
    }
}

struct SharedBlobWriter {
    object: ObjectWriter,
    written: u64,
}

impl BlobWriter for SharedBlobWriter {
    fn write(&mut self, bytes: &[u8]) -> StoreResult<()> {
        self.object.write(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }
    fn finish(self: Box<Self>) -> StoreResult<u64> {
        let written = self.written;
        self.object.finish()?;
        Ok(written)
    }
}

/// A version of a report's data under a fresh prefix, published by [`DataWriter::commit`].
struct SharedDataWriter {
    id: ReportId,
    prefix: String,
    index: Arc<PgIndex>,
    objects: Arc<Objects>,
    wrote_any: bool,
    committed: bool,
    /// Objects sent and not yet known to be stored: all are, before the prefix is published.
    puts: Puts,
}

impl DataWriter for SharedDataWriter {
    fn put(&mut self, key: &str, bytes: &[u8]) -> StoreResult<()> {
        check_key(key)?;
        self.wrote_any = true;
        self.objects.put_soon(
            &mut self.puts,
            &format!("reports/{}/{}/{key}", self.id, self.prefix),
            bytes,
        )
    }

    fn commit(mut self: Box<Self>) -> StoreResult<()> {
        self.objects.finish(&mut self.puts)?;
        let old = self.index.publish_data(&self.id, &self.prefix)?;
        self.committed = true;
        if let Some(old) = old.filter(|o| *o != self.prefix) {
            if let Err(e) = self.objects.delete_prefix(&format!("reports/{}/{old}", self.id)) {
                tracing::warn!(report = %self.id, "removing the data it replaced: {e}");
            }
        }
        Ok(())
    }
}

impl Drop for SharedDataWriter {
    fn drop(&mut self) {
        if !self.committed && self.wrote_any {
            let puts = std::mem::take(&mut self.puts);
            self.objects
                .delete_prefix_later(format!("reports/{}/{}", self.id, self.prefix), puts);
        }
    }
}

impl ReportStore for SharedStore {
    fn upload_writer(&self, id: &ReportId, key: &str) -> StoreResult<Box<dyn BlobWriter>> {
        let object = self.objects.writer(&Self::upload_key(id, key)?)?;
        Ok(Box::new(SharedBlobWriter { object, written: 0 }))
    }

    fn discard_uploads(&self, id: &ReportId) -> StoreResult<()> {
        if self.index.get(id)?.is_some() {
            // A created report keeps its uploads (this was a rank joining its run).
            return Ok(());
        }
        self.objects.delete_prefix(&format!("reports/{id}/uploads"))
    }

    fn open_upload(&self, id: &ReportId, key: &str) -> StoreResult<Box<dyn Read + Send>> {
        self.objects.reader(&Self::upload_key(id, key)?)
    }

    fn data_writer(&self, id: &ReportId) -> StoreResult<Box<dyn DataWriter>> {
        Ok(Box::new(SharedDataWriter {
            id: id.clone(),
            prefix: format!("data-{}", ReportId::new()),
            index: self.index.clone(),
            objects: self.objects.clone(),
            wrote_any: false,
            committed: false,
            puts: Puts::default(),
        }))
    }

    fn read_data(&self, id: &ReportId, key: &str) -> StoreResult<Option<Vec<u8>>> {
        check_key(key)?;
        match self.index.data_prefix(id)? {
            Some(prefix) => self.objects.get(&format!("reports/{id}/{prefix}/{key}")),
            None => Ok(None),
        }
    }

    fn create(&self, record: &ReportRecord) -> StoreResult<()> {
        self.index.insert(record)
    }

    fn get(&self, id: &ReportId) -> StoreResult<Option<ReportRecord>> {
        self.index.get(id)
    }

    fn add_uploads(&self, id: &ReportId, files: &[super::StoredFile]) -> StoreResult<()> {
        // The uploads are already the report's objects: only the index learns of them.
        self.index.add_uploads(id, files)
    }

    fn set_state(&self, id: &ReportId, state: ReportState, error: Option<&str>) -> StoreResult<()> {
        self.index.set_state(id, state, error)
    }

    fn set_meta(&self, id: &ReportId, meta: &memlens_api::ReportMeta, expires_at: Option<i64>) -> StoreResult<()> {
        self.index.set_meta(id, meta, expires_at)
    }

    fn delete(&self, id: &ReportId) -> StoreResult<()> {
        self.index.delete(id)?;
        self.objects.delete_prefix(&format!("reports/{id}"))
    }

    fn job_named(&self, new: &JobRecord) -> StoreResult<JobRecord> {
        self.index.job_named(new)
    }

    fn job(&self, id: &JobId) -> StoreResult<Option<JobRecord>> {
        self.index.job(id)
    }

    fn job_reports(&self, id: &JobId) -> StoreResult<Vec<ReportRecord>> {
        self.index.job_reports(id)
    }

    fn set_job_thresholds(&self, id: &JobId, thresholds: &memlens_api::Thresholds) -> StoreResult<()> {
        self.index.set_job_thresholds(id, thresholds)
    }

    fn unfinished(&self) -> StoreResult<Vec<ReportId>> {
        self.index.unfinished()
    }

    fn purge_expired(&self, now: i64) -> StoreResult<Vec<ReportId>> {
        let ids = self.index.take_expired(now)?;
        for id in &ids {
            self.objects.delete_prefix(&format!("reports/{id}"))?;
        }
        Ok(ids)
    }

    fn ingest_queue(&self) -> Option<&dyn IngestQueue> {
        Some(self)
    }
}

impl IngestQueue for SharedStore {
    fn claim(&self, worker: &str, lease: Duration) -> StoreResult<Option<Claim>> {
        self.index.claim(worker, lease)
    }
    fn renew(&self, id: &ReportId, worker: &str, lease: Duration) -> StoreResult<bool> {
        self.index.renew(id, worker, lease)
    }
    fn finish(&self, id: &ReportId, worker: &str, state: ReportState, error: Option<&str>) -> StoreResult<bool> {
        self.index.finish(id, worker, state, error)
    }
}
