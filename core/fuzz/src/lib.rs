//! What the fuzz targets run: each importer of the format table on arbitrary bytes, the format
//! guesser, and the upload path's parsing (query string, multipart body, file names, the size
//! budget). The invariant everywhere is the importers' own: any input ends in a value or an
//! error, never a panic, within bounded memory (the limits below are tighter than the server's
//! so that libFuzzer's 2 GB RSS limit is never the one that trips). One target is differential:
//! a pickle's trace entries read flat must give what the general machine gives
//! ([`flat_reads_match_the_machine`]).

use std::io::Cursor;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use memlens_api::{Format, UploadParams};
use memlens_core::importers::pytorch_snapshot::flat_reads_agree;
use memlens_core::importers::pytorch_snapshot::pickle::PickleLimits;
use memlens_core::importers::{parse_source, ImportOptions, REGISTRY};
use memlens_core::names::{is_safe_file_name, upload_name};
use memlens_core::source::{Source, SourceLimits};

/// Import limits for fuzzing: 64 MiB decompressed, a 256 MiB decoder budget.
fn options() -> ImportOptions {
    ImportOptions {
        source: SourceLimits {
            max_decompressed: 64 << 20,
            max_ratio: 100,
        },
        pickle: PickleLimits {
            max_depth: 1_000,
            memory_budget: 256 << 20,
        },
    }
}

fn source(data: &[u8]) -> Option<Source> {
    let o = options();
    Source::from_reader(Box::new(Cursor::new(data.to_vec())), data.len() as u64, o.source).ok()
}

/// `format`'s importer on `data`, whatever its sniffer would say.
pub fn import_as(format: Format, data: &[u8]) {
    let (_, importer) = REGISTRY
        .iter()
        .find(|(f, _)| *f == format)
        .expect("every format of the table has an importer");
    if let Some(src) = source(data) {
        let _ = importer.import(src, &options());
    }
}

/// The format guesser, then the importer it names.
pub fn sniff_and_import(data: &[u8]) {
    if let Some(src) = source(data) {
        let _ = parse_source(src, &options());
    }
}

/// A pickle decoded twice, its trace entries read flat (its bytes read ahead on a thread of
/// their own) and by the general machine alone: they must agree ([`flat_reads_agree`]).
pub fn flat_reads_match_the_machine(data: &[u8]) {
    if let (Some(mut flat), Some(machine)) = (source(data), source(data)) {
        flat.read_ahead = true;
        if let Err(e) = flat_reads_agree(flat, machine, &options()) {
            panic!("{e}");
        }
    }
}

/// The multipart boundary of fuzzed bodies.
const BOUNDARY: &str = "memlensfuzz";
/// The upload budget of fuzzed bodies.
const BUDGET: u64 = 1 << 20;

/// `data` is `query string \n body`; the body is read as `multipart/form-data` (boundary
/// [`BOUNDARY`]) in chunks of a size the first byte picks. Every file part must get a safe
/// stored name, and no more than [`BUDGET`] bytes are taken.
pub fn upload(data: &[u8]) {
    let (query, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let params: UploadParams = match serde_urlencoded::from_bytes(query) {
        Ok(p) => p,
        Err(_) => return,
    };
    let _ = params.meta();
    // A raw body is stored under the `name` parameter.
    let raw = upload_name(params.name.as_deref().unwrap_or("upload"), params.rank);
    assert!(is_safe_file_name(&raw), "unsafe stored name {raw:?}");
    let chunk = body.first().map_or(1, |b| usize::from(b % 64) + 1);
    let chunks: Vec<Result<Bytes, std::convert::Infallible>> =
        body.chunks(chunk).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    let constraints = multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(BUDGET + (64 << 10)));
    let mut mp = multer::Multipart::with_constraints(futures_util::stream::iter(chunks), BOUNDARY, constraints);
    let mut budget = BUDGET;
    loop {
        let field = match ready(mp.next_field()) {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => return,
        };
        let file_name = field.file_name().map(str::to_owned);
        let mut field = field;
        let mut taken = 0u64;
        loop {
            match ready(field.chunk()) {
                Ok(Some(c)) => {
                    taken += c.len() as u64;
                    if taken > budget {
                        return; // the server answers 413 here
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        budget -= taken;
        if let Some(name) = file_name {
            let stored = upload_name(&name, params.rank);
            assert!(
                is_safe_file_name(&stored),
                "unsafe stored name {stored:?} from {name:?}"
            );
        }
    }
}

/// Runs a future over an always-ready stream to completion: it must never wait.
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the multipart parser waited on a body that was all there"),
    }
}
