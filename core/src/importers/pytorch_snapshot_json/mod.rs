//! PyTorch memory snapshots saved as JSON (`json.dump(torch.cuda.memory._snapshot(), f)`, as
//! memory_viz and Mosaic accept them), plain or gzip-compressed: the same dict as the pickle
//! `_dump_snapshot` writes. The JSON is transcoded on its own thread, as it is parsed, into the
//! pickle opcodes that dict would have, and read by the snapshot importer's own streaming
//! decoder and lowering — so a JSON snapshot gives the pickle's tables and numbers, and nothing
//! is held whole in memory. (JSON has no shared references: frame lists that the pickle memo
//! shares are separate here, which only changes how many stack ids there are.)

mod transcode;

use crate::error::ImportError;
use crate::importers::pytorch_snapshot::decode_snapshot;
use crate::importers::{ImportOptions, Parsed, Importer};
use crate::source::{leading_text, Source};

pub struct SnapshotJsonImporter;

pub static IMPORTER: SnapshotJsonImporter = SnapshotJsonImporter;

impl Importer for SnapshotJsonImporter {
    /// A JSON object with the snapshot's keys, or a bare list of segments.
    fn sniff(&self, head: &[u8]) -> bool {
        let t = leading_text(head);
        (t.starts_with('{') && (t.contains("\"device_traces\"") || t.contains("\"segments\"")))
            || (t.starts_with('[') && t.contains("\"total_size\"") && t.contains("\"blocks\""))
    }

    fn import(&self, source: Source, options: &ImportOptions) -> Result<Parsed, ImportError> {
        let (reader, writer) = std::io::pipe()?;
        let json = source.reader;
        let transcoder = std::thread::Builder::new()
            .name("memlens-json".into())
            .spawn(move || transcode::json_to_pickle(json, writer))?;
        let pickled = Source {
            head: Vec::new(),
            reader: Box::new(reader),
            gzip: source.gzip,
            // Pickle opcodes can take more bytes than the JSON text they stand for.
            bound: source.bound.saturating_mul(4).saturating_add(1 << 20),
            // The transcoder's pipe is already a thread of its own.
            read_ahead: false,
        };
        let decoded = decode_snapshot(pickled, options);
        let transcoded = transcoder
            .join()
            .map_err(|_| ImportError::Internal("the JSON transcoder panicked".into()))?;
        // A JSON error explains a decoder that ran out of input; report it first.
        transcoded?;
        let mut columns = decoded?;
        columns.format = memlens_api::Format::PytorchSnapshotJson;
        Ok(Parsed::Snapshot(Box::new(columns)))
    }
}
