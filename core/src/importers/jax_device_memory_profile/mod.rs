//! JAX device memory profiles (`jax.profiler.save_device_memory_profile(path)`, or the bytes of
//! `jax.profiler.device_memory_profile()` written out): a pprof protobuf, gzip-compressed as JAX
//! writes it or plain, decoded with prost over pprof's own `profile.proto` ([`pprof`], generated
//! by `generate.sh`; the schema is vendored beside it).
//!
//! XLA writes it in `PyClient::HeapProfile` (`xla/python/py_client.cc`): the sample types are
//! `[allocations/count, space/bytes]`; one sample per distinct (Python traceback, buffer size,
//! device) of the live `jax.Array`s' buffers — each buffer once, however many arrays share it —
//! labelled `kind=buffer` and `device=<device.DebugString()>` (`cuda:0`, `cpu:0`, `TFRT_CPU_0`,
//! `TPU_0(…)`; jaxlib before 0.1.6x wrote the device's id as a number), and one per compiled
//! executable, `kind=executable`, its generated code's size. A sample's count is how many buffers
//! share that key, its space their bytes together. Stacks are Python tracebacks, innermost first,
//! one location per (code object, instruction).
//!
//! The profile is one instant: what was live when it was taken, with no history. Each buffer
//! becomes its own segment with one active block (the allocator's pools, its free space and
//! XLA's temporaries inside a running computation are not in the file), on the device its label
//! names; there is no trace, so no timeline. Executables are counted in the notes, not as
//! device buffers.

#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
mod pprof;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io::Read;

use memlens_api::{BlockState, Format};
use prost::Message;

use crate::error::ImportError;
use crate::importers::{ImportOptions, Importer, Parsed};
use crate::source::Source;
use crate::tables::SnapshotColumns;

pub struct JaxProfileImporter;

pub static IMPORTER: JaxProfileImporter = JaxProfileImporter;

/// The first address given to a buffer (the profile records none; each buffer gets its own
/// range, 512-byte aligned, in the order of the file's samples).
const FIRST_ADDRESS: i64 = 1 << 32;

/// The most buffers a profile may count (a sample's count is a number in the file: without a
/// bound, a few bytes could ask for billions of rows). No program keeps two million arrays.
pub const MAX_BUFFERS: i64 = 1 << 21;

fn malformed(msg: impl std::fmt::Display) -> ImportError {
    ImportError::Log(format!("JAX device memory profile: {msg}"))
}

/// Reads one protobuf varint at `at`, returning it and the index after it.
fn varint(head: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (k, &b) in head.get(at..)?.iter().take(10).enumerate() {
        v |= u64::from(b & 0x7f) << (7 * k);
        if b & 0x80 == 0 {
            return Some((v, at + k + 1));
        }
    }
    None
}

impl Importer for JaxProfileImporter {
    /// A pprof `Profile` begins with its sample types (field 1): each a short `ValueType` of two
    /// varints (fields 1 and 2), then another sample type or the first sample (field 2). No
    /// text starts so (`\n` followed by a length byte under 32 and a varint field tag).
    fn sniff(&self, head: &[u8]) -> bool {
        let mut at = 0;
        let mut types = 0;
        while head.get(at) == Some(&0x0a) {
            let Some((len, body)) = varint(head, at + 1) else {
                return false;
            };
            let end = body + len as usize;
            if !(2..=24).contains(&len) || end > head.len() {
                return false;
            }
            let mut k = body;
            while k < end {
                if !matches!(head[k], 0x08 | 0x10) {
                    return false;
                }
                match varint(head, k + 1) {
                    Some((_, next)) if next <= end => k = next,
                    _ => return false,
                }
            }
            types += 1;
            at = end;
        }
        types > 0 && (at == head.len() || matches!(head.get(at), Some(0x12 | 0x1a | 0x22 | 0x2a | 0x32)))
    }

    fn import(&self, source: Source, _options: &ImportOptions) -> Result<Parsed, ImportError> {
        let mut bytes = Vec::new();
        source
            .reader
            .take(source.bound.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(crate::source::map_pipe_err)?;
        let profile =
            pprof::Profile::decode(bytes.as_slice()).map_err(|e| malformed(format!("not a pprof protobuf: {e}")))?;
        drop(bytes);
        let read = read_profile(&profile)?;
        let mut columns = lower(&profile, &read)?;
        columns.format = Format::JaxDeviceMemoryProfile;
        Ok(Parsed::Snapshot(Box::new(columns)))
    }
}

/// What a sample is, from its `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SampleKind {
    Buffer,
    Executable,
}

/// One sample as read: its kind, device (for buffers), how many buffers or executables, their
/// bytes together.
#[derive(Debug)]
struct ReadSample {
    kind: SampleKind,
    /// The device's label as XLA wrote it (`cuda:0`, or a number in old jaxlibs).
    device: Option<String>,
    count: i64,
    bytes: i64,
}

/// Every sample read and checked, in file order.
struct ReadProfile {
    samples: Vec<ReadSample>,
}

fn string(profile: &pprof::Profile, id: i64, what: &str) -> Result<String, ImportError> {
    usize::try_from(id)
        .ok()
        .and_then(|i| profile.string_table.get(i))
        .cloned()
        .ok_or_else(|| {
            malformed(format!(
                "{what} names string {id}, past the table's {}",
                profile.string_table.len()
            ))
        })
}

/// Checks the sample types and reads each sample's kind, device and values.
fn read_profile(profile: &pprof::Profile) -> Result<ReadProfile, ImportError> {
    let types = profile
        .sample_type
        .iter()
        .map(|t| {
            Ok((
                string(profile, t.r#type, "a sample type")?,
                string(profile, t.unit, "a sample unit")?,
            ))
        })
        .collect::<Result<Vec<_>, ImportError>>()?;
    let expected = [("allocations", "count"), ("space", "bytes")];
    if types.len() != 2 || types.iter().zip(expected).any(|((t, u), (et, eu))| t != et || u != eu) {
        let shown: Vec<String> = types.iter().map(|(t, u)| format!("{t}/{u}")).collect();
        return Err(malformed(format!(
            "a pprof profile of [{}], not JAX's [allocations/count, space/bytes] (is it a CPU or Go heap profile?)",
            shown.join(", ")
        )));
    }
    let mut samples = Vec::with_capacity(profile.sample.len());
    for (k, s) in profile.sample.iter().enumerate() {
        let [count, bytes] = s.value[..] else {
            return Err(malformed(format!("sample {k} has {} values, not 2", s.value.len())));
        };
        if count <= 0 || bytes < 0 {
            return Err(malformed(format!("sample {k}: {count} allocations of {bytes} bytes")));
        }
        let (mut kind, mut device) = (None, None);
        for label in &s.label {
            match string(profile, label.key, "a label key")?.as_str() {
                "kind" => kind = Some(string(profile, label.str, "a kind label")?),
                "device" if label.str != 0 => device = Some(string(profile, label.str, "a device label")?),
                "device" => device = Some(label.num.to_string()),
                _ => {}
            }
        }
        let kind = match kind.as_deref() {
            Some("buffer") => SampleKind::Buffer,
            Some("executable") => SampleKind::Executable,
            other => {
                return Err(malformed(format!(
                    "sample {k}: kind {other:?}, not the buffer or executable XLA labels its samples with"
                )))
            }
        };
        if kind == SampleKind::Buffer && device.is_none() {
            return Err(malformed(format!("sample {k}: a buffer without its device label")));
        }
        if kind == SampleKind::Buffer && bytes % count != 0 {
            return Err(malformed(format!(
                "sample {k}: {bytes} bytes are not {count} buffers of one size (XLA counts buffers of one size a sample)"
            )));
        }
        samples.push(ReadSample {
            kind,
            device,
            count,
            bytes,
        });
    }
    Ok(ReadProfile { samples })
}

/// The device number in a label: the digits at its end or before its first `(` (`cuda:0`,
/// `TFRT_CPU_0`, `TPU_3(process=0,(1,1,0,0))`), or the label itself when it is a number.
pub fn device_number(label: &str) -> Option<i64> {
    let base = label.split('(').next().unwrap_or(label);
    let digits = base.len() - base.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    base[base.len() - digits..].parse().ok()
}

/// Devices by label, numbered as their labels say; labels that name no number, or two labels
/// naming one number (two platforms), are numbered after the others in order of appearance.
fn number_devices(samples: &[ReadSample]) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let mut taken = std::collections::BTreeSet::new();
    let mut pending = Vec::new();
    for label in samples.iter().filter_map(|s| s.device.as_deref()) {
        if out.contains_key(label) || pending.iter().any(|p: &String| p == label) {
            continue;
        }
        match device_number(label).filter(|n| taken.insert(*n)) {
            Some(n) => {
                out.insert(label.to_owned(), n);
            }
            None => pending.push(label.to_owned()),
        }
    }
    let first_free = taken.last().map_or(0, |n| n + 1);
    for (n, label) in (first_free..).zip(pending) {
        out.insert(label, n);
    }
    out
}

/// Interns a sample's stack (innermost first, a location's inlined lines innermost first too).
fn intern_stack(
    profile: &pprof::Profile,
    locations: &BTreeMap<u64, &pprof::Location>,
    functions: &BTreeMap<u64, &pprof::Function>,
    location_ids: &[u64],
    out: &mut SnapshotColumns,
) -> Result<u32, ImportError> {
    let mut frames = Vec::with_capacity(location_ids.len());
    for id in location_ids {
        let location = locations
            .get(id)
            .ok_or_else(|| malformed(format!("a sample names location {id}, which the profile does not hold")))?;
        for line in &location.line {
            let function = functions.get(&line.function_id).ok_or_else(|| {
                malformed(format!(
                    "location {id} names function {}, which the profile does not hold",
                    line.function_id
                ))
            })?;
            let name = string(profile, function.name, "a function name")?;
            let file = string(profile, function.filename, "a function's file")?;
            frames.push(out.frames.intern_frame(&name, &file, line.line));
        }
    }
    Ok(out.frames.intern_stack(&frames))
}

/// Each buffer as its own segment with one active block; executables into the notes.
fn lower(profile: &pprof::Profile, read: &ReadProfile) -> Result<SnapshotColumns, ImportError> {
    let locations: BTreeMap<u64, &pprof::Location> = profile.location.iter().map(|l| (l.id, l)).collect();
    let functions: BTreeMap<u64, &pprof::Function> = profile.function.iter().map(|f| (f.id, f)).collect();
    let devices = number_devices(&read.samples);
    let mut out = SnapshotColumns::default();
    let mut address = FIRST_ADDRESS;
    let (mut executables, mut code_bytes, mut buffers) = (0i64, 0i64, 0i64);
    for (sample, raw) in read.samples.iter().zip(&profile.sample) {
        if sample.kind == SampleKind::Executable {
            executables += sample.count;
            code_bytes += sample.bytes;
            continue;
        }
        let stack = intern_stack(profile, &locations, &functions, &raw.location_id, &mut out)?;
        let device = devices[sample.device.as_deref().unwrap_or_default()];
        let size = sample.bytes / sample.count;
        if buffers + sample.count > MAX_BUFFERS {
            return Err(malformed(format!(
                "more than {MAX_BUFFERS} buffers (a sample counts {})",
                sample.count
            )));
        }
        for _ in 0..sample.count {
            let segment = out.segments.len() as u32;
            out.segments.push(
                device,
                address,
                size,
                size,
                size,
                size,
                0,
                "jax_buffer".into(),
                (0, 0),
                false,
                stack,
            );
            out.blocks
                .push(device, segment, address, size, size, BlockState::ActiveAllocated, stack);
            address = address
                .checked_add((size + 511) / 512 * 512 + 512)
                .ok_or_else(|| malformed("more buffer bytes than 2^63"))?;
            buffers += 1;
        }
    }
    out.source.stack_count = out.frames.stack_count();
    out.source.notes = notes(&devices, buffers, executables, code_bytes);
    Ok(out)
}

/// What the profile is and is not, for the report's notes.
fn notes(devices: &BTreeMap<String, i64>, buffers: i64, executables: i64, code_bytes: i64) -> Vec<String> {
    let mut notes = vec![
        "JAX device memory profile (jax.profiler.save_device_memory_profile): the live jax.Array buffers at one \
         instant, each with the Python stack that made it; no history, so no timeline, and neither XLA's \
         temporaries inside a running computation (activations of a jitted step) nor the allocator's pool \
         (XLA_PYTHON_CLIENT_PREALLOCATE's 75 %) are in it"
            .to_owned(),
        format!("{buffers} buffers"),
    ];
    let named: Vec<String> = devices
        .iter()
        .map(|(label, n)| format!("{label} as device {n}"))
        .collect();
    if !named.is_empty() {
        notes.push(format!("devices: {}", named.join(", ")));
    }
    if executables > 0 {
        notes.push(format!(
            "{executables} compiled executables with {code_bytes} bytes of generated code, not counted as buffers"
        ));
    }
    notes
}
