//! Library half of the `memlens` binary: the command line ([`cli`]), and the server —
//! [`serve`] wires the [`store`] (SQLite index + report folders), the [`ingest`] queue and the
//! [`http`] API; [`reportdata`] is a processed report on disk, [`query`] its level-of-detail
//! queries, [`charts`] its plotters charts. The analysis itself lives in `memlens-core`.

pub mod charts;
pub mod cli;
pub mod http;
pub mod ids;
pub mod ingest;
pub mod metrics;
pub mod openapi;
pub mod query;
pub mod reportdata;
pub mod serve;
pub mod store;
