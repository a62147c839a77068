//! Importers, one folder per format. Each implements [`Importer`]: a cheap `sniff` on the first
//! bytes, separate from `import`, which turns the whole input into canonical tables.
//!
//! Adding a format: a folder here, and one line in [`REGISTRY`].
//!
//! Invariant: importers never panic on input. They return [`ImportError`]s that name the
//! problem; [`import_path`] also runs each import on its own thread with an explicit stack size
//! and turns a panic (a bug) into an error instead of taking the process down.

pub mod lines;
pub mod nsys;
pub mod nvml;
pub mod pytorch_snapshot;

use std::path::Path;

use crate::error::ImportError;
use crate::samples::GpuSampleTables;
use crate::sniff::{describe_head, sniff, Format};
use crate::source::{Source, SourceLimits};
use crate::tables::SnapshotTables;

/// What an importer produced.
pub enum Imported {
    /// Allocator history and state: events, segments, blocks, stacks, annotations.
    Snapshot(Box<SnapshotTables>),
    /// Whole-GPU samples over time (NVML-based logs).
    GpuSamples(Box<GpuSampleTables>),
}

/// Options for one import.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    pub source: SourceLimits,
    pub pickle: pytorch_snapshot::pickle::PickleLimits,
}

/// One input format.
pub trait Importer: Sync {
    fn format(&self) -> Format;
    /// Whether this importer reads content starting with `head`.
    fn sniff(&self, head: &[u8]) -> bool;
    fn import(&self, source: Source, options: &ImportOptions) -> Result<Imported, ImportError>;
}

/// The registered importers, tried in order.
pub static REGISTRY: &[&dyn Importer] = &[
    &pytorch_snapshot::PytorchSnapshotImporter,
    &nsys::sqlite::NsysSqliteImporter,
    &nsys::json::NsysJsonImporter,
    &nvml::smi_csv::NvidiaSmiCsvImporter,
    &nvml::dmon::NvidiaSmiDmonImporter,
    &nvml::jsonl::NvmlJsonLinesImporter,
];

/// The result of importing a file, with how it was read.
pub struct ImportedFile {
    pub format: Format,
    pub gzip: bool,
    pub data: Imported,
}

/// Imports an already-opened source with the first importer whose sniff accepts it.
pub fn import_source(source: Source, options: &ImportOptions) -> Result<ImportedFile, ImportError> {
    let gzip = source.gzip;
    match REGISTRY.iter().find(|imp| imp.sniff(&source.head)) {
        Some(imp) => Ok(ImportedFile {
            format: imp.format(),
            gzip,
            data: imp.import(source, options)?,
        }),
        None => match sniff(&source.head) {
            Some(format) => Err(ImportError::NotSupported { format: format.name() }),
            None => Err(ImportError::UnknownFormat {
                head: describe_head(&source.head),
            }),
        },
    }
}

/// Stack size of import threads: the decoder is iterative, this is headroom, not a requirement.
const IMPORT_STACK: usize = 16 << 20;

/// Opens and imports `path` on a dedicated thread.
pub fn import_path(path: &Path, options: ImportOptions) -> Result<ImportedFile, ImportError> {
    let path = path.to_owned();
    import_on_thread(move || Source::open(&path, options.source), options)
}

/// Opens a source with `open` and imports it, both on a dedicated thread with an explicit
/// stack size; a panic there (a bug) comes back as an error.
pub fn import_on_thread<F>(open: F, options: ImportOptions) -> Result<ImportedFile, ImportError>
where
    F: FnOnce() -> Result<Source, ImportError> + Send + 'static,
{
    let handle = std::thread::Builder::new()
        .name("memlens-import".into())
        .stack_size(IMPORT_STACK)
        .spawn(move || import_source(open()?, &options))
        .map_err(|e| ImportError::Internal(format!("cannot start the import thread: {e}")))?;
    match handle.join() {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(ImportError::Internal(msg))
        }
    }
}
