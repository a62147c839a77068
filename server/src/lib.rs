//! Library half of the `memlens` binary (kept thin: the work lives in `memlens-core`), so the
//! test harness can call the same code paths as the command line.

pub mod cli;
