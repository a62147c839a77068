//! Importer for PyTorch CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot`),
//! plain or gzip-compressed. Decoding ([`pickle`]) and lowering into tables ([`lower`]) happen in
//! one streaming pass: trace entries become rows as they are decoded.
//!
//! Shapes handled: the 2.x dict (`segments`, `device_traces`, optional `allocator_settings` and
//! `external_annotations`, unknown keys ignored), the legacy bare list of segments, entries
//! without `time_us` (≤ 2.1), blocks without `address` (2.0) and with `history` instead of
//! `frames`/`requested_size` (1.13/2.0), several devices, expandable
//! segments, `oom`/`snapshot` entries, `compile_context` and `user_metadata`, and the
//! profiler-derived snapshot of `torch.cuda._memory_viz._profile_to_snapshot` (entries with a
//! `category`, the CPU's tensors as an extra last device, which is left out).

pub mod lower;
pub mod pickle;

use crate::error::ImportError;
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::source::{map_pipe_err, Source};

pub struct PytorchSnapshotImporter;

pub static IMPORTER: PytorchSnapshotImporter = PytorchSnapshotImporter;

impl Importer for PytorchSnapshotImporter {
    /// The pickle PROTO opcode; the protocol number itself is checked (and named) by the decoder.
    fn sniff(&self, head: &[u8]) -> bool {
        head.first() == Some(&0x80)
    }

    fn import(&self, source: Source, options: &ImportOptions) -> Result<Parsed, ImportError> {
        let columns = decode_snapshot(source, options)?;
        Ok(Parsed::Snapshot(Box::new(columns)))
    }
}

/// Decodes a snapshot into column builders.
pub fn decode_snapshot(source: Source, options: &ImportOptions) -> Result<crate::tables::SnapshotColumns, ImportError> {
    let mut input = pickle::Input::new(source.reader, source.bound);
    let mut lowering = lower::TraceLowering::new();
    let decoded = pickle::decode(&mut input, options.pickle, &mut lowering).map_err(|e| match e {
        pickle::PickleError::Input(_) => match input_error(&mut input) {
            Some(err) => err,
            None => ImportError::Pickle(e),
        },
        other => ImportError::Pickle(other),
    })?;
    let pickle::Decoded { root, mut heap } = decoded;
    Ok(lower::lower_root(&mut heap, root, lowering)?)
}

/// Re-reads the reader's error to recover typed gzip errors (limit, corrupt stream).
fn input_error<R: std::io::Read>(input: &mut pickle::Input<R>) -> Option<ImportError> {
    input.last_io_error.take().map(map_pipe_err)
}
