//! The format table: every input format memlens knows, declared once.
//!
//! [`for_each_format!`] holds one line per format — its [`Format`] variant, the core importer
//! module that reads it (whose snake-case name is also the wire name), and a description for
//! people. This crate expands it into [`Format`] and [`FORMATS`] (shown by the upload page, the
//! CLI help and `docs/formats.md`); `memlens-core` expands the same table into its importer
//! registry and its "unrecognised format" message. A format also has its fuzz target and seeds
//! in `core/fuzz/`.
//!
//! Order matters: the registry tries sniffers in table order.

/// Calls `$callback!` with the format table:
/// `(Variant, importer_module, "what the file is")`, one per format.
#[macro_export]
macro_rules! for_each_format {
    ($callback:ident) => {
        $callback! {
            (PytorchSnapshot, pytorch_snapshot, "a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot, optionally gzip-compressed)"),
            (PytorchSnapshotJson, pytorch_snapshot_json, "a PyTorch memory snapshot saved as JSON (json.dump(torch.cuda.memory._snapshot()), optionally gzip-compressed)"),
            (NsysSqlite, nsys_sqlite, "an Nsight Systems SQLite export (nsys export --type sqlite)"),
            (JaxDeviceMemoryProfile, jax_device_memory_profile, "a JAX device memory profile (jax.profiler.save_device_memory_profile: pprof protobuf, gzip-compressed or plain): the live buffers of one instant with their Python stacks"),
            (PytorchProfilerTrace, pytorch_profiler_trace, "a PyTorch profiler Chrome trace with memory (profile_memory=True, export_chrome_trace)"),
            (PytorchMemoryTimeline, pytorch_memory_timeline, "a PyTorch profiler memory timeline (export_memory_timeline to .json or .raw.json, optionally gzip-compressed)"),
            (NvmlJsonl, nvml_jsonl, "pynvml JSON lines"),
            (NsysJson, nsys_json, "an Nsight Systems JSON export (nsys export --type json)"),
            (DcgmExporter, dcgm_exporter, "DCGM exporter metrics (Prometheus text: DCGM_FI_DEV_FB_USED/FREE/RESERVED)"),
            (NvidiaSmiCsv, nvidia_smi_csv, "an nvidia-smi --query-gpu or --query-compute-apps CSV log"),
            (NvidiaSmiPmon, nvidia_smi_pmon, "an nvidia-smi pmon per-process log (-s m -o DT)"),
            (NvidiaSmiDmon, nvidia_smi_dmon, "an nvidia-smi dmon log (-o DT)"),
            (MemorySummary, memory_summary, "a torch.cuda.memory_summary() table (1.13 or 2.x units, abbreviated or not)"),
            (NvidiaSmiScreen, nvidia_smi_screen, "an nvidia-smi screen (its default output, with the process list)"),
            (ServingLog, serving_log, "a vLLM (v0 or v1 engine) or SGLang server startup log: its memory profiling, KV cache and CUDA graph lines, or the error that stopped it"),
            // Last: it claims any text the rows above did not.
            (OomMessage, oom_message, "a CUDA/HIP/XPU/MPS out-of-memory message, or a training log holding one (the error text, with or without its traceback)"),
        }
    };
}

macro_rules! declare_formats {
    ($(($variant:ident, $module:ident, $description:expr)),* $(,)?) => {
        /// Every input format memlens knows by sight (the wire name is the snake-case variant).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum Format {
            $(
                #[doc = $description]
                $variant,
            )*
        }

        /// The format table, in sniffing order.
        pub const FORMATS: &[FormatInfo] = &[
            $(FormatInfo {
                format: Format::$variant,
                name: stringify!($module),
                description: $description,
            },)*
        ];
    };
}

for_each_format!(declare_formats);

/// One row of the format table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatInfo {
    pub format: Format,
    /// The wire name, e.g. `pytorch_snapshot`.
    pub name: &'static str,
    /// What the file is, for people ("a PyTorch memory snapshot pickle (…)").
    pub description: &'static str,
}

impl Format {
    /// This format's row of [`FORMATS`].
    pub fn info(self) -> &'static FormatInfo {
        // Every variant has its row: both come from one table.
        FORMATS.iter().find(|f| f.format == self).unwrap_or(&FORMATS[0])
    }
    /// The wire name, e.g. `pytorch_snapshot`.
    pub fn name(self) -> &'static str {
        self.info().name
    }
    /// The format with this wire name.
    pub fn from_name(name: &str) -> Option<Format> {
        FORMATS.iter().find(|f| f.name == name).map(|f| f.format)
    }
}

impl Default for Format {
    /// The first row of the table (PyTorch snapshots).
    fn default() -> Self {
        FORMATS[0].format
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// "a, b or c": the descriptions of every format, for messages and help.
pub fn formats_sentence() -> String {
    let d: Vec<&str> = FORMATS.iter().map(|f| f.description).collect();
    match d.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => (*last).to_owned(),
        None => String::new(),
    }
}

/// `docs/formats.md`, written from [`FORMATS`] (`tests/tests/docs.rs` keeps the file equal to
/// it): a new format's row is its documentation.
pub fn formats_markdown() -> String {
    let mut s = String::from(
        "# Formats\n\n\
         <!-- Written from the format table in api/src/formats.rs by tests/tests/docs.rs \
         (MEMLENS_WRITE_DOCS=1 rewrites it); do not edit by hand. -->\n\n\
         memlens recognises a file by its content, whatever its name, trying the formats in \
         this order; `memlens analyze --help` prints the same list.\n\n\
         | name | what it is |\n|---|---|\n",
    );
    for f in FORMATS {
        s.push_str(&format!("| `{}` | {} |\n", f.name, f.description.replace('|', "\\|")));
    }
    s
}

impl Format {
    /// A PyTorch caching-allocator snapshot, whichever way it was saved.
    pub fn is_pytorch_snapshot(self) -> bool {
        matches!(self, Format::PytorchSnapshot | Format::PytorchSnapshotJson)
    }
    /// Text a person was left with (an OOM message or log, a memory summary, a serving
    /// engine's startup log): a report file with OOMs, counters or a serving budget but no
    /// trace to draw.
    pub fn is_text_evidence(self) -> bool {
        matches!(self, Format::OomMessage | Format::MemorySummary | Format::ServingLog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_the_serde_names_and_unique() {
        for f in FORMATS {
            let json = serde_json::to_string(&f.format).expect("json");
            assert_eq!(json, format!("\"{}\"", f.name), "{:?}", f.format);
            assert_eq!(Format::from_name(f.name), Some(f.format));
            assert_eq!(f.format.info(), f);
        }
        let mut names: Vec<_> = FORMATS.iter().map(|f| f.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), FORMATS.len());
    }
}
