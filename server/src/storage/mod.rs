//! Everything durable: [`store`] is the one interface of rows and blobs (the local SQLite +
//! folders store and the Postgres + S3 one); [`reportdata`] is a processed report as store
//! objects, written, read back and loaded; [`parquet_object`] and [`stored_segments`] encode
//! and decode its frames and segment checkpoints; [`filecache`] bounds the loaded files a
//! server keeps by bytes.

pub mod filecache;
pub mod parquet_object;
pub mod reportdata;
pub mod store;
pub mod stored_segments;
