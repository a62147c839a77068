//! Everything durable: [`store`] is the one interface of rows and blobs (the local SQLite +
//! folders store and the Postgres + S3 one); [`reportdata`] is a processed report as store
//! objects, written, read back and loaded (its segment checkpoints by
//! `reportdata::stored_segments`); [`parquet_object`] encodes and decodes its frames, on the
//! threads of [`encode_pool`]; [`filecache`] bounds the loaded files a server keeps by bytes.

pub mod encode_pool;
pub mod filecache;
pub mod parquet_object;
pub mod reportdata;
pub mod store;
