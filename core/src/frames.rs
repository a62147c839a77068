//! Each analysed device's derived frames — usage after every entry, one row per allocation
//! (with its category), fragmentation samples — as the server stores them and the
//! level-of-detail queries and what-if read them.

use polars::prelude::DataFrame;

/// One analysed device's derived frames, as stored for level-of-detail queries.
#[derive(Default)]
pub struct DeviceFrames {
    pub device: i64,
    /// `time` (µs, or the entry index without timestamps), `allocated`, `active`, `reserved`
    /// after every entry.
    pub usage: DataFrame,
    pub lifetimes: DataFrame,
    pub fragmentation: DataFrame,
}
