//! Importers, one folder per format. Each exports an `IMPORTER` implementing [`Importer`]: a
//! cheap `sniff` on the first bytes, separate from `import`, which turns the whole input into
//! canonical tables.
//!
//! The registry is generated from the format table in `memlens-api` ([`memlens_api::for_each_format!`]):
//! each row names its folder here, so adding a format is that folder plus one line in the table.
//! [`sniff`] is the one guesser: the first importer in table order whose `sniff` accepts the
//! head names the format. [`common`] holds what several importers share.
//!
//! Importers produce plain column builders ([`Parsed`]) and need no polars: with the crate's
//! default features off, this module is the whole library, and that is what the fuzz targets
//! (`core/fuzz/`) build. [`import_source`] (feature `analysis`) turns them into polars frames.
//!
//! Invariant: importers never panic on input. They return [`ImportError`]s that name the
//! problem; [`import_path`] also runs each import on its own thread with an explicit stack size
//! and turns a panic (a bug) into an error instead of taking the process down.

pub mod common;

#[cfg(feature = "analysis")]
use std::path::Path;

use memlens_api::Format;

use crate::error::ImportError;
use crate::evidence::TextEvidence;
use crate::samples::GpuSampleLog;
#[cfg(feature = "analysis")]
use crate::samples::GpuSampleTables;
use crate::source::{Source, SourceLimits};
use crate::tables::SnapshotColumns;
#[cfg(feature = "analysis")]
use crate::tables::SnapshotTables;

/// What an importer read, as column builders.
pub enum Parsed {
    /// Allocator history and state: events, segments, blocks, stacks, annotations.
    Snapshot(Box<SnapshotColumns>),
    /// Whole-GPU samples over time (NVML-based logs).
    GpuSamples(Box<GpuSampleLog>),
    /// What a text a person was left with says: OOM messages, memory summaries, nvidia-smi
    /// screens.
    Text(Box<TextEvidence>),
}

/// What an import produced: the canonical polars tables.
#[cfg(feature = "analysis")]
pub enum Imported {
    /// Allocator history and state: events, segments, blocks, stacks, annotations.
    Snapshot(Box<SnapshotTables>),
    /// Whole-GPU samples over time (NVML-based logs).
    GpuSamples(Box<GpuSampleTables>),
    /// OOM messages, memory summaries and nvidia-smi screens read from text (no table).
    Text(Box<TextEvidence>),
}

#[cfg(feature = "analysis")]
impl Parsed {
    /// Moves the builders into polars frames.
    pub fn into_tables(self) -> Result<Imported, ImportError> {
        Ok(match self {
            Parsed::Snapshot(c) => Imported::Snapshot(Box::new(c.into_tables()?)),
            Parsed::GpuSamples(l) => Imported::GpuSamples(Box::new(l.into_tables()?)),
            Parsed::Text(e) => Imported::Text(e),
        })
    }
}

/// Options for one import.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    pub source: SourceLimits,
    pub pickle: pytorch_snapshot::pickle::PickleLimits,
}

/// One input format's reader.
pub trait Importer: Sync {
    /// Whether this importer reads content starting with `head` (decompressed, at most
    /// [`crate::source::HEAD_LEN`] bytes).
    fn sniff(&self, head: &[u8]) -> bool;
    fn import(&self, source: Source, options: &ImportOptions) -> Result<Parsed, ImportError>;
}

macro_rules! registry {
    ($(($variant:ident, $module:ident, $description:expr)),* $(,)?) => {
        $(pub mod $module;)*

        /// The registered importers, in the format table's order.
        pub static REGISTRY: &[(Format, &dyn Importer)] = &[$((Format::$variant, &$module::IMPORTER)),*];
    };
}

memlens_api::for_each_format!(registry);

/// The one format guesser: the first format in table order whose sniffer accepts `head`.
pub fn sniff(head: &[u8]) -> Option<Format> {
    REGISTRY.iter().find(|(_, imp)| imp.sniff(head)).map(|(f, _)| *f)
}

/// A printable description of the first bytes, for "unrecognised format" errors.
pub fn describe_head(head: &[u8]) -> String {
    let shown: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("bytes {}", shown.join(" "))
}

/// A file read by its importer, with how it was read.
pub struct ParsedFile {
    pub format: Format,
    pub gzip: bool,
    pub data: Parsed,
}

/// Reads an already-opened source with the first importer whose sniff accepts it.
pub fn parse_source(source: Source, options: &ImportOptions) -> Result<ParsedFile, ImportError> {
    let gzip = source.gzip;
    match REGISTRY.iter().find(|(_, imp)| imp.sniff(&source.head)) {
        Some((format, imp)) => Ok(ParsedFile {
            format: *format,
            gzip,
            data: imp.import(source, options)?,
        }),
        None => Err(ImportError::UnknownFormat {
            head: describe_head(&source.head),
        }),
    }
}

/// The result of importing a file, with how it was read.
#[cfg(feature = "analysis")]
pub struct ImportedFile {
    pub format: Format,
    pub gzip: bool,
    pub data: Imported,
}

/// Imports the windows of one process's recording (`sources`, in the order they were taken),
/// each an allocator snapshot, as the one snapshot they make together
/// ([`crate::tables::windows::join_windows`]).
#[cfg(feature = "analysis")]
pub fn import_windows(sources: Vec<Source>, options: &ImportOptions) -> Result<ImportedFile, ImportError> {
    let mut windows = Vec::with_capacity(sources.len());
    let mut gzip = false;
    for (k, source) in sources.into_iter().enumerate() {
        let parsed = parse_source(source, options)?;
        gzip |= parsed.gzip;
        match parsed.data {
            Parsed::Snapshot(columns) => windows.push(*columns),
            _ => {
                return Err(ImportError::Snapshot(format!(
                    "window {k} is a {} file, not an allocator snapshot",
                    parsed.format
                )))
            }
        }
    }
    let joined = crate::tables::windows::join_windows(windows)
        .ok_or_else(|| ImportError::Snapshot("a recording of no window".into()))?;
    Ok(ImportedFile {
        format: Format::PytorchSnapshot,
        gzip,
        data: Parsed::Snapshot(Box::new(joined)).into_tables()?,
    })
}

/// Imports an already-opened source with the first importer whose sniff accepts it.
#[cfg(feature = "analysis")]
pub fn import_source(source: Source, options: &ImportOptions) -> Result<ImportedFile, ImportError> {
    let ParsedFile { format, gzip, data } = parse_source(source, options)?;
    Ok(ImportedFile {
        format,
        gzip,
        data: data.into_tables()?,
    })
}

/// Stack size of import threads: the decoder is iterative, this is headroom, not a requirement.
#[cfg(feature = "analysis")]
pub(crate) const IMPORT_STACK: usize = 16 << 20;

/// Opens and imports `path` on a dedicated thread.
#[cfg(feature = "analysis")]
pub fn import_path(path: &Path, options: ImportOptions) -> Result<ImportedFile, ImportError> {
    let path = path.to_owned();
    import_on_thread(move || Source::open(&path, options.source), options)
}

/// Opens a source with `open` and imports it, both on a dedicated thread with an explicit
/// stack size; a panic there (a bug) comes back as an error.
#[cfg(feature = "analysis")]
pub fn import_on_thread<F>(open: F, options: ImportOptions) -> Result<ImportedFile, ImportError>
where
    F: FnOnce() -> Result<Source, ImportError> + Send + 'static,
{
    begin_import(open, options)?.wait()
}

/// Opens an input's content (the pipeline un-gzips and sniffs it).
pub type OpenInput = Box<dyn FnOnce() -> std::io::Result<Box<dyn std::io::Read + Send>> + Send>;

/// Imports a recording's windows on a thread of its own (as [`import_on_thread`] does a file).
#[cfg(feature = "analysis")]
pub fn import_windows_on_thread(
    windows: Vec<(u64, OpenInput)>,
    options: ImportOptions,
) -> Result<ImportedFile, ImportError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("memlens-import".into())
            .stack_size(IMPORT_STACK)
            .spawn_scoped(scope, move || {
                let sources = windows
                    .into_iter()
                    .map(|(size, open)| Source::from_reader(open()?, size, options.source))
                    .collect::<Result<Vec<_>, _>>()?;
                import_windows(sources, &options)
            })
            .map_err(|e| ImportError::Internal(format!("cannot start the import thread: {e}")))?
            .join()
            .unwrap_or_else(|_| {
                Err(ImportError::Internal(
                    "the import of a recording's windows panicked".into(),
                ))
            })
    })
}

/// An import running on a thread of its own ([`begin_import`]).
#[cfg(feature = "analysis")]
pub struct BegunImport(std::thread::JoinHandle<Result<ImportedFile, ImportError>>);

#[cfg(feature = "analysis")]
impl BegunImport {
    /// Waits for the import; a panic on its thread (a bug) comes back as an error.
    pub fn wait(self) -> Result<ImportedFile, ImportError> {
        match self.0.join() {
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
}

/// Begins what [`import_on_thread`] does and returns at once: the import runs meanwhile (an
/// upload imported while it arrives).
#[cfg(feature = "analysis")]
pub fn begin_import<F>(open: F, options: ImportOptions) -> Result<BegunImport, ImportError>
where
    F: FnOnce() -> Result<Source, ImportError> + Send + 'static,
{
    std::thread::Builder::new()
        .name("memlens-import".into())
        .stack_size(IMPORT_STACK)
        .spawn(move || import_source(open()?, &options))
        .map(BegunImport)
        .map_err(|e| ImportError::Internal(format!("cannot start the import thread: {e}")))
}

/// Everything a text holds, whichever text importer the guesser chose: out-of-memory messages
/// ([`oom_message`]), `torch.cuda.memory_summary()` tables ([`memory_summary`]), `nvidia-smi`
/// screens ([`nvidia_smi_screen`]) and vLLM / SGLang startups ([`serving_log`]); a log may hold
/// several of them. A text holding none is an error that says what was looked for.
pub fn read_evidence(source: Source) -> Result<TextEvidence, ImportError> {
    let lines = common::text_lines::read_lines(source)?;
    let evidence = TextEvidence {
        ooms: {
            let mut ooms = oom_message::find_oom_messages(&lines);
            ooms.extend(oom_message::xla::find_xla_ooms(&lines));
            ooms.sort_by_key(|m| m.line);
            ooms
        },
        summaries: memory_summary::find_memory_summaries(&lines),
        screens: nvidia_smi_screen::find_screens(&lines),
        serving: serving_log::find_serving_startups(&lines),
    };
    if evidence.is_empty() {
        return Err(ImportError::Log(format!(
            "a text of {} line(s) with no out-of-memory message (`CUDA out of memory. Tried to allocate …`, \
             `HIP`/`XPU`/`MPS backend out of memory`, XLA's `RESOURCE_EXHAUSTED: Out of memory …` or BFC allocator dump), no torch.cuda.memory_summary() table, no nvidia-smi screen and no \
             vLLM or SGLang memory line (`Available KV cache memory`, `# GPU blocks`, `KV Cache is allocated`) in it",
            lines.len()
        )));
    }
    Ok(evidence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_format_table_has_its_importer_in_order() {
        let table: Vec<Format> = memlens_api::FORMATS.iter().map(|f| f.format).collect();
        let registry: Vec<Format> = REGISTRY.iter().map(|(f, _)| *f).collect();
        assert_eq!(table, registry);
    }

    #[test]
    fn sniffs_by_content() {
        assert_eq!(sniff(&[0x80, 4, 0x95]), Some(Format::PytorchSnapshot));
        // Protocol 1 is still a pickle: the decoder names the unsupported protocol.
        assert_eq!(sniff(&[0x80, 1]), Some(Format::PytorchSnapshot));
        assert_eq!(sniff(b"SQLite format 3\0..."), Some(Format::NsysSqlite));
        assert_eq!(sniff(b"timestamp, index, name\n"), Some(Format::NvidiaSmiCsv));
        assert_eq!(
            sniff(b"#Date       Time        gpu     fb\n"),
            Some(Format::NvidiaSmiDmon)
        );
        assert_eq!(
            sniff(b"{\"timestamp\": 1, \"memory_used\": 5}\n"),
            Some(Format::NvmlJsonl)
        );
        assert_eq!(sniff(b"{\"traceEvents\": []}"), Some(Format::PytorchProfilerTrace));
        assert_eq!(sniff(b"{\"Type\": 1}\n"), Some(Format::NsysJson));
        assert_eq!(
            sniff(b"[[1796131335644375, 17961313"),
            Some(Format::PytorchMemoryTimeline)
        );
        assert_eq!(sniff(b" [ [-1, 1, 33554432, 0], "), Some(Format::PytorchMemoryTimeline));
        assert_eq!(sniff(b"[[\"a\"]]"), None);
        // Any other text is read for OOM messages, memory summaries and nvidia-smi screens
        // (and refused, naming what was looked for, when it holds none).
        assert_eq!(sniff(b"hello"), Some(Format::OomMessage));
        assert_eq!(sniff(b"[rank0]: Traceback"), Some(Format::OomMessage));
        assert_eq!(sniff(&[0x68, 0, 0x69]), None);
        assert_eq!(
            sniff(b"|===|\n|                  PyTorch CUDA memory summary, device ID 0    |\n"),
            Some(Format::MemorySummary)
        );
        assert_eq!(
            sniff(b"Sat Sep  4 15:03:16 2021\n+---+\n| NVIDIA-SMI 470.57.02    Driver Version: 470.57.02 |\n"),
            Some(Format::NvidiaSmiScreen)
        );
    }
}
