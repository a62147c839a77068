//! PyTorch profiler Chrome traces (`torch.profiler.profile(...).export_chrome_trace`): recognised
//! by their `traceEvents` (or Kineto's `schemaVersion` + `deviceProperties`) keys, so an upload
//! that holds one keeps it aside with a clear reason instead of calling it unknown. Reading its
//! `[memory]` events is future work.

use crate::error::ImportError;
use crate::importers::{ImportOptions, Imported, Importer};
use crate::source::{leading_text, Source};

pub struct ProfilerTraceRecogniser;

pub static IMPORTER: ProfilerTraceRecogniser = ProfilerTraceRecogniser;

impl Importer for ProfilerTraceRecogniser {
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        (t.starts_with('{') || t.starts_with('['))
            && (t.contains("\"traceEvents\"") || t.contains("\"schemaVersion\"") && t.contains("\"deviceProperties\""))
    }

    fn import(&self, _source: Source, _options: &ImportOptions) -> Result<Imported, ImportError> {
        Err(ImportError::NotSupported {
            format: memlens_api::Format::PytorchProfilerTrace.name(),
        })
    }
}
