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
    decode_with(source, options, lower::TraceLowering::new(), |l| l)
}

/// [`decode_snapshot`] with every dict made by the general machine, none read flat
/// ([`pickle::flat`]): the reference flat reads are checked against.
pub fn decode_snapshot_by_machine(
    source: Source,
    options: &ImportOptions,
) -> Result<crate::tables::SnapshotColumns, ImportError> {
    decode_with(source, options, MachineOnly(lower::TraceLowering::new()), |m| m.0)
}

/// Whether a snapshot decodes the same with its trace entries read flat as by the machine
/// alone (`flat` and `machine` open the same bytes): the same columns, or an error both ways —
/// not always the same error, on input wrong in more than one place (a flat read lowers an
/// entry as it reads it, the machine when it appends it, and either may come first to its own
/// fault). The memory budget is charged differently too (flat reads make no dict), so either
/// way may be the one to run out: that is no disagreement. What the differential fuzz target
/// and its regressions check.
pub fn flat_reads_agree(flat: Source, machine: Source, options: &ImportOptions) -> Result<(), String> {
    let (f, m) = (decode_snapshot(flat, options), decode_snapshot_by_machine(machine, options));
    let over_budget =
        |r: &Result<_, ImportError>| matches!(r, Err(ImportError::Pickle(pickle::PickleError::MemoryBudget { .. })));
    if over_budget(&f) || over_budget(&m) {
        return Ok(());
    }
    match (f, m) {
        (Ok(f), Ok(m)) if f == m => Ok(()),
        (Ok(_), Ok(_)) => Err("entries read flat give other columns than the machine".into()),
        (Err(_), Err(_)) => Ok(()),
        (Ok(_), Err(m)) => Err(format!("read flat it decodes; by the machine it fails: {m}")),
        (Err(f), Ok(_)) => Err(format!("by the machine it decodes; read flat it fails: {f}")),
    }
}

/// The trace lowering without its flat reads.
struct MachineOnly(lower::TraceLowering);

impl pickle::AppendHook for MachineOnly {
    fn on_append(&mut self, heap: &mut pickle::Heap, list: u32, item: pickle::Val, offset: u64) -> pickle::PResult<bool> {
        self.0.on_append(heap, list, item, offset)
    }
}

fn decode_with<H: pickle::AppendHook>(
    source: Source,
    options: &ImportOptions,
    mut hook: H,
    lowering: fn(H) -> lower::TraceLowering,
) -> Result<crate::tables::SnapshotColumns, ImportError> {
    let mut input = match source.read_ahead {
        true => pickle::Input::read_ahead(source.reader, source.bound),
        false => pickle::Input::new(source.reader, source.bound),
    };
    let decoded = pickle::decode(&mut input, options.pickle, &mut hook).map_err(|e| match e {
        pickle::PickleError::Input(_) => match input_error(&mut input) {
            Some(err) => err,
            None => ImportError::Pickle(e),
        },
        other => ImportError::Pickle(other),
    })?;
    let pickle::Decoded { root, mut heap } = decoded;
    Ok(lower::lower_root(&mut heap, root, lowering(hook))?)
}

/// Re-reads the reader's error to recover typed gzip errors (limit, corrupt stream).
fn input_error<R: std::io::Read>(input: &mut pickle::Input<R>) -> Option<ImportError> {
    input.last_io_error.take().map(map_pipe_err)
}
