//! The object half of the shared store: uploads and report data as objects in any
//! S3-compatible store, through `object_store`'s S3 client, under an optional key prefix.
//!
//! The store's interface is synchronous and runs on blocking threads; each call here blocks
//! its thread on the Tokio runtime the store was opened in. Uploads are streamed as multipart
//! uploads (a part every [`PART_BYTES`], at most [`PARTS_IN_FLIGHT`] in flight), so an upload's
//! size never sits in memory; an upload dropped before it finished is aborted. A report's data
//! objects are sent without waiting for each ([`Objects::put_soon`], at most
//! [`PUTS_IN_FLIGHT`] and [`PUT_BYTES_IN_FLIGHT`] under way) and all waited for before the
//! data is published.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::{StoreError, StoreResult};

/// Bytes of each part of a multipart upload (S3's minimum but the last is 5 MiB).
const PART_BYTES: usize = 8 << 20;
/// Parts uploaded at once per upload.
const PARTS_IN_FLIGHT: usize = 4;

/// Where the objects live.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// The endpoint, e.g. `http://127.0.0.1:9000` or `https://s3.eu-west-1.amazonaws.com`.
    pub url: String,
    pub bucket: String,
    pub region: String,
    /// Prefix of every key (several deployments can share a bucket); empty for none.
    pub prefix: String,
}

impl From<object_store::Error> for StoreError {
    fn from(e: object_store::Error) -> Self {
        StoreError::Objects(e.to_string())
    }
}

/// An S3-compatible object store, driven synchronously.
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: Handle,
}

impl Objects {
    /// Credentials come from the usual `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (and
    /// `AWS_SESSION_TOKEN`) variables. Must be called on a thread of the runtime (or inside
    /// `spawn_blocking`).
    pub fn s3(cfg: &S3Config) -> StoreResult<Objects> {
        let store = AmazonS3Builder::from_env()
            .with_endpoint(cfg.url.trim_end_matches('/'))
            .with_allow_http(cfg.url.starts_with("http://"))
            .with_bucket_name(&cfg.bucket)
            .with_region(&cfg.region)
            .build()?;
        let rt =
            Handle::try_current().map_err(|_| StoreError::Objects("the object store needs a Tokio runtime".into()))?;
        Ok(Objects {
            store: Arc::new(store),
            prefix: cfg.prefix.trim_matches('/').to_owned(),
            rt,
        })
    }

    fn path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    /// Sends object `key` without waiting for it to be stored, as one of `puts`: a report's
    /// data is hundreds of objects, and put one after another each would wait for its own
    /// round trip. Waits first while [`Puts`]' bounds are reached; a put that failed before is
    /// returned then, or by [`Objects::finish`].
    pub fn put_soon(&self, puts: &mut Puts, key: &str, bytes: &[u8]) -> StoreResult<()> {
        while !puts.in_flight.is_empty()
            && (puts.in_flight.len() >= PUTS_IN_FLIGHT || puts.bytes + bytes.len() > PUT_BYTES_IN_FLIGHT)
        {
            self.wait_oldest(puts)?;
        }
        let (store, path) = (self.store.clone(), self.path(key));
        let payload = PutPayload::from(Bytes::copy_from_slice(bytes));
        let put = self
            .rt
            .spawn(async move { store.put(&path, payload).await.map(|_| ()) });
        puts.in_flight.push_back((put, bytes.len()));
        puts.bytes += bytes.len();
        Ok(())
    }

    /// Waits for every put of `puts`: the first that failed, if any did.
    pub fn finish(&self, puts: &mut Puts) -> StoreResult<()> {
        let mut first = Ok(());
        while !puts.in_flight.is_empty() {
            let waited = self.wait_oldest(puts);
            if first.is_ok() {
                first = waited;
            }
        }
        first
    }

    fn wait_oldest(&self, puts: &mut Puts) -> StoreResult<()> {
        let Some((put, bytes)) = puts.in_flight.pop_front() else {
            return Ok(());
        };
        puts.bytes -= bytes;
        match self.rt.block_on(put) {
            Ok(done) => Ok(done?),
            Err(e) => Err(StoreError::Objects(format!("a put stopped: {e}"))),
        }
    }

    /// The whole object; `None` when there is none by that key.
    pub fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let path = self.path(key);
        let got = self.rt.block_on(async {
            match self.store.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        Ok(got.map(|b| b.to_vec()))
    }

    /// The object as a stream of bytes, read as it arrives.
    pub fn reader(&self, key: &str) -> StoreResult<Box<dyn Read + Send>> {
        let path = self.path(key);
        let result = self.rt.block_on(self.store.get(&path))?;
        Ok(Box::new(ObjectReader {
            stream: result.into_stream(),
            chunk: Bytes::new(),
            rt: self.rt.clone(),
        }))
    }

    /// A multipart upload of `key`.
    pub fn writer(&self, key: &str) -> StoreResult<ObjectWriter> {
        let path = self.path(key);
        let upload = self.rt.block_on(self.store.put_multipart(&path))?;
        Ok(ObjectWriter {
            upload: Some(WriteMultipart::new_with_chunk_size(upload, PART_BYTES)),
            rt: self.rt.clone(),
        })
    }

    /// Removes every object whose key starts with `prefix/`.
    pub fn delete_prefix(&self, prefix: &str) -> StoreResult<()> {
        let path = self.path(prefix.trim_end_matches('/'));
        self.rt.block_on(async {
            let locations = self.store.list(Some(&path)).map(|m| m.map(|m| m.location)).boxed();
            let mut deleted = self.store.delete_stream(locations);
            while let Some(r) = deleted.next().await {
                match r {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Removes `prefix` in the background (for what is dropped on a path that cannot wait),
    /// once `puts` still under way are done (they are stopped first).
    pub fn delete_prefix_later(self: &Arc<Self>, prefix: String, puts: Puts) {
        let this = self.clone();
        self.rt.spawn_blocking(move || {
            for (put, _) in puts.in_flight {
                put.abort();
                let _ = this.rt.block_on(put);
            }
            if let Err(e) = this.delete_prefix(&prefix) {
                tracing::warn!("removing objects under {prefix}: {e}");
            }
        });
    }
}

/// Objects put and not waited for yet ([`Objects::put_soon`]): at most [`PUTS_IN_FLIGHT`]
/// of them, and [`PUT_BYTES_IN_FLIGHT`] bytes unless a single object is larger.
#[derive(Default)]
pub struct Puts {
    in_flight: VecDeque<(JoinHandle<object_store::Result<()>>, usize)>,
    bytes: usize,
}

/// Objects a data writer sends at once.
const PUTS_IN_FLIGHT: usize = 16;
/// Bytes a data writer holds in puts under way (its largest objects come first).
const PUT_BYTES_IN_FLIGHT: usize = 64 << 20;

/// Reads an object's byte stream synchronously.
struct ObjectReader {
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
    rt: Handle,
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rt.block_on(self.stream.next()) {
                Some(Ok(b)) => self.chunk = b,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// One multipart upload in progress; aborted if dropped before [`ObjectWriter::finish`].
pub struct ObjectWriter {
    upload: Option<WriteMultipart>,
    rt: Handle,
}

impl ObjectWriter {
    pub fn write(&mut self, bytes: &[u8]) -> StoreResult<()> {
        let upload = self
            .upload
            .as_mut()
            .ok_or_else(|| StoreError::Objects("upload already finished".into()))?;
        // Parts are sent by tasks of the runtime; wait while too many are in flight.
        let _guard = self.rt.enter();
        self.rt.block_on(upload.wait_for_capacity(PARTS_IN_FLIGHT))?;
        upload.write(bytes);
        Ok(())
    }

    pub fn finish(mut self) -> StoreResult<()> {
        let upload = self
            .upload
            .take()
            .ok_or_else(|| StoreError::Objects("upload already finished".into()))?;
        let _guard = self.rt.enter();
        self.rt.block_on(upload.finish())?;
        Ok(())
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        if let Some(upload) = self.upload.take() {
            // Dropped on any thread, async or not: abort in the background.
            self.rt.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }
}
