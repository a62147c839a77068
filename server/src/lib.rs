//! Library half of the `memlens` binary: the command line ([`cli`], one file per command), and
//! the server — [`serve`] wires [`storage`] (rows and blobs behind one trait, and a processed
//! report as store objects), the [`ingest`] queue (which runs the core pipeline) and the
//! [`http`] API; [`charts`] draws a report's plotters charts. The analysis itself, and its
//! level-of-detail queries, live in `memlens-core`.

pub mod app;
pub mod charts;
pub mod cli;
pub mod http;
pub mod ids;
pub mod ingest;
pub mod mcp;
pub mod metrics;
pub mod process;
pub mod serve;
pub mod storage;
pub mod text;
