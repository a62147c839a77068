//! Which store a process uses, from its configuration: the embedded [`LocalStore`] in
//! `--data-dir` (the default, needing nothing), or, with `--database-url` and `--s3-url`, the
//! [`SharedStore`] that API servers and workers of a scaled-out deployment share.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::{LocalStore, ReportStore, S3Config, SharedStore, StoreError};

#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// Where reports are stored (SQLite index + one folder per report), unless a shared store
    /// is configured.
    #[arg(long, env = "MEMLENS_DATA_DIR", default_value = "memlens-data")]
    pub data_dir: PathBuf,
    /// Postgres URL of a shared store's index and job queue (`postgres://user:pass@host/db`);
    /// needs `--s3-url` too.
    #[arg(long, env = "MEMLENS_DATABASE_URL", value_name = "URL")]
    pub database_url: Option<String>,
    /// Endpoint of the shared store's S3-compatible object store (`https://s3.amazonaws.com`,
    /// `http://minio:9000`); credentials from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
    #[arg(long, env = "MEMLENS_S3_URL", value_name = "URL")]
    pub s3_url: Option<String>,
    /// The bucket (it must exist).
    #[arg(long, env = "MEMLENS_S3_BUCKET", default_value = "memlens")]
    pub s3_bucket: String,
    #[arg(long, env = "MEMLENS_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,
    /// A prefix for every object key, so that deployments can share a bucket.
    #[arg(long, env = "MEMLENS_S3_PREFIX", default_value = "")]
    pub s3_prefix: String,
    /// Postgres connections this process keeps open at most.
    #[arg(long, env = "MEMLENS_DATABASE_POOL", default_value_t = 16)]
    pub database_pool: u32,
}

impl StoreArgs {
    /// Whether this is a shared store.
    pub fn is_shared(&self) -> bool {
        self.database_url.is_some() || self.s3_url.is_some()
    }

    /// Opens the configured store (on a blocking thread: connecting and migrating block).
    pub async fn open(&self) -> Result<Arc<dyn ReportStore>, OpenStoreError> {
        let args = self.clone();
        tokio::task::spawn_blocking(move || args.open_blocking()).await?
    }

    fn open_blocking(&self) -> Result<Arc<dyn ReportStore>, OpenStoreError> {
        match (&self.database_url, &self.s3_url) {
            (None, None) => Ok(Arc::new(LocalStore::open(&self.data_dir).map_err(|error| {
                OpenStoreError::DataDir {
                    dir: self.data_dir.clone(),
                    error,
                }
            })?)),
            (Some(db), Some(url)) => {
                let s3 = S3Config {
                    url: url.clone(),
                    bucket: self.s3_bucket.clone(),
                    region: self.s3_region.clone(),
                    prefix: self.s3_prefix.clone(),
                };
                Ok(Arc::new(
                    SharedStore::open(db, &s3, self.database_pool).map_err(OpenStoreError::Shared)?,
                ))
            }
            (Some(_), None) => Err(OpenStoreError::NoS3Url),
            (None, Some(_)) => Err(OpenStoreError::NoDatabaseUrl),
        }
    }
}

/// Why the configured store did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenStoreError {
    #[error("data directory {}: {error}", dir.display())]
    DataDir { dir: PathBuf, error: StoreError },
    #[error("shared store: {0}")]
    Shared(StoreError),
    #[error("--database-url needs --s3-url: a shared store keeps its objects in S3")]
    NoS3Url,
    #[error("--s3-url needs --database-url: a shared store keeps its index in Postgres")]
    NoDatabaseUrl,
    #[error("opening the store: {0}")]
    Task(#[from] tokio::task::JoinError),
}
