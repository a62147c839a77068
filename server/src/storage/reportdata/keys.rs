//! The stored report's layout, declared once: every object key a report's data holds is built
//! here, and the version of that layout ([`SCHEMA_VERSION`]) that each report records.
//!
//! ```text
//! schema.json                  {"version": N}: the layout's version (absent: version 1)
//! summary.json                 AnalyzeOutput (what GET /api/reports/{id} returns)
//! f<i>/meta.json               SnapshotMeta (source facts, max_split_size, format)
//! f<i>/<table>.parquet         the tables of QUERY_TABLES (frames, stack_frames); version 1 reports may hold every table of TABLE_NAMES (events, …, event_notes)
//! f<i>/d<device>/user_metadata.parquet  alloc_idx, user_metadata (what the script set)
//! f<i>/d<device>/usage.parquet        time, allocated (some version 1 reports also have active, and reserved)
//! f<i>/d<device>/reserved.parquet     entry, reserved: reserved bytes at entry -1 (before the trace) and where they change
//! f<i>/d<device>/lifetimes.parquet
//! f<i>/d<device>/fragmentation.parquet
//! f<i>/d<device>/overview.json        the timeline's first view (whole range, default axis, 1500 wide)
//! f<i>/d<device>/segments/<k>.parquet, segments.json   the segment map's checkpoints and cursors
//! g<j>/samples.parquet        NVML log j's device samples (times already aligned)
//! chart.png, chart.svg         the first device's usage chart (else the first GPU log's)
//! ```

/// The layout's version sits in core beside the frames it versions.
pub use memlens_core::stored::{OLDEST_READABLE, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};

/// The object that records the layout's version.
pub const SCHEMA: &str = "schema.json";
pub const SUMMARY: &str = "summary.json";
pub const CHART_PNG: &str = "chart.png";
pub const CHART_SVG: &str = "chart.svg";

/// What [`SCHEMA`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    pub version: u32,
}

impl Schema {
    pub const NOW: Schema = Schema {
        version: SCHEMA_VERSION,
    };

    /// Whether this code reads a report of this layout.
    pub fn is_readable(self) -> bool {
        (OLDEST_READABLE..=SCHEMA_VERSION).contains(&self.version)
    }
}

/// Where snapshot `index` of a report keeps its objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileKeys {
    pub index: usize,
}

impl FileKeys {
    pub fn of(index: usize) -> FileKeys {
        FileKeys { index }
    }

    /// The prefix every key of this file starts with.
    pub fn prefix(self) -> String {
        format!("f{}/", self.index)
    }

    pub fn meta(self) -> String {
        format!("f{}/meta.json", self.index)
    }

    /// A canonical table (`frames`, `stack_frames`, and in version 1 reports the others).
    pub fn table(self, name: &str) -> String {
        format!("f{}/{name}.parquet", self.index)
    }

    pub fn device(self, device: i64) -> DeviceKeys {
        DeviceKeys {
            dir: format!("f{}/d{device}", self.index),
        }
    }
}

/// Where one device of one snapshot keeps its derived frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceKeys {
    dir: String,
}

impl DeviceKeys {
    pub fn usage(&self) -> String {
        format!("{}/usage.parquet", self.dir)
    }

    /// Reserved bytes, as their changes.
    pub fn reserved(&self) -> String {
        format!("{}/reserved.parquet", self.dir)
    }

    pub fn lifetimes(&self) -> String {
        format!("{}/lifetimes.parquet", self.dir)
    }

    pub fn fragmentation(&self) -> String {
        format!("{}/fragmentation.parquet", self.dir)
    }

    /// The `user_metadata` map (alloc entry index, text); absent in some version 1 reports.
    pub fn user_metadata(&self) -> String {
        format!("{}/user_metadata.parquet", self.dir)
    }

    /// The timeline's first view.
    pub fn overview(&self) -> String {
        format!("{}/overview.json", self.dir)
    }

    /// The cursors of the stored segment checkpoints (absent in reports stored before them).
    pub fn segment_cursors(&self) -> String {
        format!("{}/segments.json", self.dir)
    }

    /// Stored segment checkpoint `k`.
    pub fn segment_window(&self, k: usize) -> String {
        format!("{}/segments/{k}.parquet", self.dir)
    }
}

/// NVML log `index`'s samples.
pub fn gpu_samples(index: usize) -> String {
    format!("g{index}/samples.parquet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_documented_layout() {
        let f = FileKeys::of(3);
        let d = f.device(-1);
        assert_eq!(
            [
                f.meta(),
                f.table("frames"),
                d.usage(),
                d.reserved(),
                d.lifetimes(),
                d.fragmentation(),
                d.user_metadata(),
                d.overview(),
                d.segment_cursors(),
                d.segment_window(7),
                gpu_samples(2),
            ],
            [
                "f3/meta.json",
                "f3/frames.parquet",
                "f3/d-1/usage.parquet",
                "f3/d-1/reserved.parquet",
                "f3/d-1/lifetimes.parquet",
                "f3/d-1/fragmentation.parquet",
                "f3/d-1/user_metadata.parquet",
                "f3/d-1/overview.json",
                "f3/d-1/segments.json",
                "f3/d-1/segments/7.parquet",
                "g2/samples.parquet",
            ]
        );
        assert!(d.usage().starts_with(&f.prefix()));
    }

    #[test]
    fn versions_outside_the_readable_ones_are_not_read() {
        assert!(Schema::NOW.is_readable());
        assert!(Schema {
            version: OLDEST_READABLE
        }
        .is_readable());
        assert!(!Schema { version: 0 }.is_readable());
        assert!(!Schema {
            version: SCHEMA_VERSION + 1
        }
        .is_readable());
    }
}
