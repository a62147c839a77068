//! A processed report on disk and in memory: `summary.json` plus, per analysed snapshot, the
//! canonical tables and each device's derived frames as Parquet, and per NVML log its samples.
//!
//! ```text
//! data/summary.json                 AnalyzeOutput (what GET /api/reports/{id} returns)
//! data/f<i>/<table>.parquet         events, segments, blocks, frames, stack_frames, annotations
//! data/f<i>/d<device>/usage.parquet        time, allocated, active, reserved
//! data/f<i>/d<device>/lifetimes.parquet
//! data/f<i>/d<device>/fragmentation.parquet
//! data/g<j>/samples.parquet        NVML log j's device samples (times already aligned)
//! data/chart.png, data/chart.svg    the first device's usage chart (else the first GPU log's)
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use memlens_api::AnalyzeOutput;
use memlens_core::analysis::segment_map::SegmentCheckpoints;
use memlens_core::analysis::DeviceEvents;
use memlens_core::stacks::StackResolver;
use memlens_core::tables::SnapshotTables;
use polars::prelude::*;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Parquet { path: PathBuf, source: PolarsError },
    #[error("summary.json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("tables: {0}")]
    Polars(#[from] PolarsError),
}

const TABLES: [&str; 6] = ["events", "segments", "blocks", "frames", "stack_frames", "annotations"];

fn write_parquet(path: &Path, df: &mut DataFrame) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = File::create(path).map_err(io)?;
    ParquetWriter::new(&mut f)
        .finish(df)
        .map_err(|source| DataError::Parquet {
            path: path.to_owned(),
            source,
        })?;
    f.sync_all().map_err(io)?;
    Ok(())
}

fn read_parquet(path: &Path) -> Result<DataFrame, DataError> {
    let f = File::open(path).map_err(|source| DataError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut df = ParquetReader::new(f).finish().map_err(|source| DataError::Parquet {
        path: path.to_owned(),
        source,
    })?;
    // Parquet row groups come back as chunks; queries read columns as contiguous slices.
    df.rechunk_mut_par();
    Ok(df)
}

/// Frames derived for one device.
pub struct DeviceFrames {
    pub device: i64,
    pub usage: DataFrame,
    pub lifetimes: DataFrame,
    pub fragmentation: DataFrame,
}

/// Writes one analysed file's tables and device frames under `dir/f<index>`.
pub fn write_file(
    dir: &Path,
    index: usize,
    t: &mut SnapshotTables,
    devices: &mut [DeviceFrames],
) -> Result<(), DataError> {
    let fdir = dir.join(format!("f{index}"));
    std::fs::create_dir_all(&fdir).map_err(|source| DataError::Io {
        path: fdir.clone(),
        source,
    })?;
    let tables: [(&str, &mut DataFrame); 6] = [
        ("events", &mut t.events),
        ("segments", &mut t.segments),
        ("blocks", &mut t.blocks),
        ("frames", &mut t.frames),
        ("stack_frames", &mut t.stack_frames),
        ("annotations", &mut t.annotations),
    ];
    for (name, df) in tables {
        write_parquet(&fdir.join(format!("{name}.parquet")), df)?;
    }
    for d in devices {
        let ddir = fdir.join(format!("d{}", d.device));
        std::fs::create_dir_all(&ddir).map_err(|source| DataError::Io {
            path: ddir.clone(),
            source,
        })?;
        write_parquet(&ddir.join("usage.parquet"), &mut d.usage)?;
        write_parquet(&ddir.join("lifetimes.parquet"), &mut d.lifetimes)?;
        write_parquet(&ddir.join("fragmentation.parquet"), &mut d.fragmentation)?;
    }
    Ok(())
}

/// Writes one NVML log's samples under `dir/g<index>`.
pub fn write_gpu_log(dir: &Path, index: usize, samples: &mut DataFrame) -> Result<(), DataError> {
    let gdir = dir.join(format!("g{index}"));
    std::fs::create_dir_all(&gdir).map_err(|source| DataError::Io {
        path: gdir.clone(),
        source,
    })?;
    write_parquet(&gdir.join("samples.parquet"), samples)
}

pub fn write_summary(dir: &Path, summary: &AnalyzeOutput) -> Result<(), DataError> {
    let path = dir.join("summary.json");
    let bytes = serde_json::to_vec(summary)?;
    std::fs::write(&path, bytes).map_err(|source| DataError::Io { path, source })
}

pub fn read_summary(dir: &Path) -> Result<AnalyzeOutput, DataError> {
    let path = dir.join("summary.json");
    let bytes = std::fs::read(&path).map_err(|source| DataError::Io { path, source })?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// One analysed file, loaded for queries.
pub struct LoadedFile {
    pub tables: SnapshotTables,
    pub stacks: StackResolver,
    pub devices: Vec<DeviceFrames>,
    /// Segment-state checkpoints per device, built on the first segment-map query.
    checkpoints: Mutex<HashMap<i64, Arc<SegmentCheckpoints>>>,
}

/// Checkpoints kept per device: a segment map then costs at most 1/64 of the trace in undo steps.
const CHECKPOINTS: usize = 64;

impl LoadedFile {
    /// The segment-state checkpoints of a device (built once, then shared).
    pub fn checkpoints(&self, ev: &DeviceEvents) -> PolarsResult<Arc<SegmentCheckpoints>> {
        if let Some(c) = self.checkpoints.lock().ok().and_then(|m| m.get(&ev.device).cloned()) {
            return Ok(c);
        }
        let built = Arc::new(SegmentCheckpoints::build(&self.tables, ev, CHECKPOINTS)?);
        if let Ok(mut m) = self.checkpoints.lock() {
            m.insert(ev.device, built.clone());
        }
        Ok(built)
    }

    pub fn device(&self, device: i64) -> Option<&DeviceFrames> {
        self.devices.iter().find(|d| d.device == device)
    }
}

/// A whole report, loaded for queries.
pub struct LoadedReport {
    pub summary: AnalyzeOutput,
    pub files: Vec<LoadedFile>,
    /// Samples of each NVML log, in `summary.gpu_logs` order.
    pub gpu_logs: Vec<DataFrame>,
}

/// Loads a report's data folder.
pub fn load(dir: &Path) -> Result<LoadedReport, DataError> {
    let summary = read_summary(dir)?;
    let mut files = Vec::new();
    for (i, fs) in summary.files.iter().enumerate() {
        let fdir = dir.join(format!("f{i}"));
        let mut t: Vec<DataFrame> = Vec::new();
        for name in TABLES {
            t.push(read_parquet(&fdir.join(format!("{name}.parquet")))?);
        }
        let mut it = t.into_iter();
        let mut next = || it.next().unwrap_or_default();
        let tables = SnapshotTables {
            events: next(),
            segments: next(),
            blocks: next(),
            frames: next(),
            stack_frames: next(),
            annotations: next(),
            event_notes: DataFrame::empty(),
            source: fs.source.clone(),
            max_split_size: None,
            format: memlens_core::sniff::Format::from_name(&fs.format).unwrap_or_default(),
        };
        let stacks = StackResolver::new(&tables.frames, &tables.stack_frames)?;
        let mut devices = Vec::new();
        for d in &fs.devices {
            let ddir = fdir.join(format!("d{}", d.device));
            devices.push(DeviceFrames {
                device: d.device,
                usage: read_parquet(&ddir.join("usage.parquet"))?,
                lifetimes: read_parquet(&ddir.join("lifetimes.parquet"))?,
                fragmentation: read_parquet(&ddir.join("fragmentation.parquet"))?,
            });
        }
        files.push(LoadedFile {
            tables,
            stacks,
            devices,
            checkpoints: Mutex::new(HashMap::new()),
        });
    }
    let mut gpu_logs = Vec::new();
    for j in 0..summary.gpu_logs.len() {
        gpu_logs.push(read_parquet(&dir.join(format!("g{j}")).join("samples.parquet"))?);
    }
    Ok(LoadedReport {
        summary,
        files,
        gpu_logs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_frames_come_back_contiguous() {
        let n = 3_000_000i64;
        let mut df = DataFrame::new(
            n as usize,
            vec![
                Column::new("a".into(), (0..n).collect::<Vec<i64>>()),
                Column::new(
                    "b".into(),
                    (0..n).map(|x| (x % 7 != 0).then_some(x)).collect::<Vec<Option<i64>>>(),
                ),
            ],
        )
        .expect("frame");
        let dir = std::env::temp_dir().join(format!("memlens-rd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("x.parquet");
        write_parquet(&p, &mut df).expect("write");
        let back = read_parquet(&p).expect("read");
        let a = back.column("a").expect("a").i64().expect("i64");
        assert_eq!(a.chunks().len(), 1);
        assert!(a.cont_slice().is_ok());
        assert_eq!(
            back.column("b").expect("b").null_count(),
            df.column("b").expect("b").null_count()
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
