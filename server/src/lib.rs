//! Library half of the `memlens` binary: the command line ([`cli`], one file per command), and
//! the server — [`serve`] wires the [`store`] (rows and blobs behind one trait; SQLite index +
//! report folders by default), the [`ingest`] queue (which runs the core pipeline) and the
//! [`http`] API; [`reportdata`] is a processed report as store objects, [`charts`] its plotters
//! charts. The analysis itself, and its level-of-detail queries, live in `memlens-core`.

pub mod charts;
pub mod cli;
pub mod encode_pool;
pub mod filecache;
pub mod http;
pub mod ids;
pub mod ingest;
pub mod metrics;
pub mod parquet_object;
pub mod pre_import;
pub mod priority;
pub mod reportdata;
pub mod serve;
pub mod store;
pub mod stored_segments;
pub mod worker;
