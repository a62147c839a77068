//! The store's Parquet objects: how a frame's rows are grouped ([`RowGroups`]), how it is
//! encoded ([`encode`]: plain or delta pages under zstd, assembled from polars' own lower-level writer)
//! and decoded into the form queries read ([`decode`]).

mod decode;
mod encode;
mod scalars;
#[cfg(test)]
mod tests;

pub use decode::decode;
pub use encode::{encode, encode_with_paged, PagedColumn, ReadRows, RowGroups};
