//! The canonical device-sample table: what NVML-based logs (`nvidia-smi --query-gpu` CSV,
//! `nvidia-smi dmon`, pynvml JSON lines) say about whole GPUs over time.
//!
//! One row per (sample, GPU): `time_us` (i64, µs; see [`SampleClock`]), `gpu` (i32, the log's
//! GPU index), then nullable `used_bytes`, `total_bytes`, `free_bytes`, `driver_reserved_bytes`
//! (i64) and `util_gpu_pct` (f64). Rows are sorted by (`gpu`, `time_us`).
//!
//! Per-process samples (`nvidia-smi --query-compute-apps`, pynvml's process lists) are kept as
//! [`ProcessSample`]s beside it: they are few, and only summarised.

#[cfg(feature = "analysis")]
use polars_core::prelude::*;

/// How a log's timestamps relate to the Unix epoch (the wire enum of `memlens-api`).
pub use memlens_api::SampleClock;

/// Which API produced `used_bytes`, which decides what it includes (the wire enum of
/// `memlens-api`).
pub use memlens_api::UsedMeaning;

/// Identity of one GPU as the log names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuInfo {
    pub gpu: i32,
    pub name: Option<String>,
    pub bus_id: Option<String>,
}

/// Rows being collected by an importer, one vector per column.
#[derive(Debug, Default)]
pub struct SampleRows {
    pub time_us: Vec<i64>,
    pub gpu: Vec<i32>,
    pub used_bytes: Vec<Option<i64>>,
    pub total_bytes: Vec<Option<i64>>,
    pub free_bytes: Vec<Option<i64>>,
    pub driver_reserved_bytes: Vec<Option<i64>>,
    pub util_gpu_pct: Vec<Option<f64>>,
}

/// One sample of one GPU, as parsed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub time_us: i64,
    pub gpu: i32,
    pub used_bytes: Option<i64>,
    pub total_bytes: Option<i64>,
    pub free_bytes: Option<i64>,
    pub driver_reserved_bytes: Option<i64>,
    pub util_gpu_pct: Option<f64>,
}

impl SampleRows {
    pub fn push(&mut self, s: Sample) {
        self.time_us.push(s.time_us);
        self.gpu.push(s.gpu);
        self.used_bytes.push(s.used_bytes);
        self.total_bytes.push(s.total_bytes);
        self.free_bytes.push(s.free_bytes);
        self.driver_reserved_bytes.push(s.driver_reserved_bytes);
        self.util_gpu_pct.push(s.util_gpu_pct);
    }

    pub fn len(&self) -> usize {
        self.time_us.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time_us.is_empty()
    }

    /// The table, sorted by (`gpu`, `time_us`).
    #[cfg(feature = "analysis")]
    pub fn into_frame(self) -> PolarsResult<DataFrame> {
        let n = self.len();
        let df = DataFrame::new(
            n,
            vec![
                Column::new("time_us".into(), self.time_us),
                Column::new("gpu".into(), self.gpu),
                Column::new("used_bytes".into(), self.used_bytes),
                Column::new("total_bytes".into(), self.total_bytes),
                Column::new("free_bytes".into(), self.free_bytes),
                Column::new("driver_reserved_bytes".into(), self.driver_reserved_bytes),
                Column::new("util_gpu_pct".into(), self.util_gpu_pct),
            ],
        )?;
        df.sort(
            ["gpu", "time_us"],
            SortMultipleOptions::default().with_maintain_order(true),
        )
    }
}

/// One process's memory on one GPU at one time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessSample {
    pub time_us: i64,
    /// The GPU index, when the log gives one (compute-apps logs name the bus id instead).
    pub gpu: Option<i32>,
    pub bus_id: Option<String>,
    pub pid: i64,
    pub name: Option<String>,
    pub used_bytes: Option<i64>,
}

/// What an NVML-log importer produced: the samples `S` (the importer's [`SampleRows`], then a
/// polars frame in [`GpuSampleTables`]) and what the log says beside them.
#[derive(Debug, Clone)]
pub struct GpuSamples<S> {
    pub samples: S,
    pub gpus: Vec<GpuInfo>,
    /// Per-process samples, in log order (empty when the log has none).
    pub processes: Vec<ProcessSample>,
    pub clock: SampleClock,
    pub used_meaning: UsedMeaning,
    /// Lines that could not be read and were skipped (a log cut off mid-line), with why.
    pub skipped_lines: Vec<String>,
    /// What the reader noticed and the report should say (which column told GPUs apart, one
    /// GPU sampled twice at one instant).
    pub notes: Vec<String>,
}

/// A parsed log, as its importer built it (no polars needed).
pub type GpuSampleLog = GpuSamples<SampleRows>;

/// A log's samples as the canonical frame, sorted by (`gpu`, `time_us`).
#[cfg(feature = "analysis")]
pub type GpuSampleTables = GpuSamples<DataFrame>;

impl GpuSampleLog {
    /// The log's samples as the importer read them; a log without any sample is an error.
    pub fn from_rows(
        rows: SampleRows,
        mut gpus: Vec<GpuInfo>,
        processes: Vec<ProcessSample>,
        clock: SampleClock,
        used_meaning: UsedMeaning,
        skipped_lines: Vec<String>,
    ) -> Result<GpuSampleLog, crate::ImportError> {
        if rows.is_empty() && processes.is_empty() {
            return Err(crate::ImportError::Log("the log has a header but no samples".into()));
        }
        gpus.sort_by_key(|g| g.gpu);
        Ok(GpuSamples {
            samples: rows,
            gpus,
            processes,
            clock,
            used_meaning,
            skipped_lines,
            notes: Vec::new(),
        })
    }

    /// The samples moved into the canonical frame.
    #[cfg(feature = "analysis")]
    pub fn into_tables(self) -> PolarsResult<GpuSampleTables> {
        let GpuSamples {
            samples,
            gpus,
            processes,
            clock,
            used_meaning,
            skipped_lines,
            notes,
        } = self;
        Ok(GpuSamples {
            samples: samples.into_frame()?,
            gpus,
            processes,
            clock,
            used_meaning,
            skipped_lines,
            notes,
        })
    }
}

/// µs since the epoch of a date and a time of day, read as UTC (calendar arithmetic by
/// `chrono`). `None` for a date or time that does not exist.
pub fn civil_to_us(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32, frac_us: i64) -> Option<i64> {
    let date = chrono::NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, mo, d)?;
    let time = date.and_hms_micro_opt(h, mi, s, u32::try_from(frac_us).ok()?)?;
    Some(time.and_utc().timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_epochs() {
        assert_eq!(civil_to_us(1970, 1, 1, 0, 0, 0, 0), Some(0));
        assert_eq!(civil_to_us(2000, 3, 1, 0, 0, 0, 0), Some(11_017 * 86_400 * 1_000_000));
        assert_eq!(civil_to_us(2026, 2, 30, 0, 0, 0, 0), None);
        // 2026-11-29 14:21:43.449662 UTC is pynvml's 1795962103.4496624 in the shared traces.
        assert_eq!(
            civil_to_us(2026, 11, 29, 14, 21, 43, 449_662),
            Some(1_795_962_103_449_662)
        );
    }
}
