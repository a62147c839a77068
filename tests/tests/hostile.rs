//! Hostile input: every refused opcode, absurd nesting and lengths, memo fan-out, truncation
//! and compression bombs end in a clear error, quickly, without a panic or an abort; NVML logs
//! and Nsight exports cut anywhere or mangled are answered quickly and never panic.

use std::io::Write;
use std::time::{Duration, Instant};

use memlens_core::importers::{import_source, ImportOptions};
use memlens_core::source::{Source, SourceLimits};
use memlens_core::ImportError;
use memlens_tests::trace;

fn import_bytes(bytes: Vec<u8>) -> Result<(), ImportError> {
    let len = bytes.len() as u64;
    let source = Source::from_reader(Box::new(std::io::Cursor::new(bytes)), len, SourceLimits::default())?;
    import_source(source, &ImportOptions::default()).map(|_| ())
}

/// Runs `bytes` and returns the error text, checking it is fast and not a panic.
fn refused(what: &str, bytes: Vec<u8>) -> String {
    let start = Instant::now();
    let result = std::panic::catch_unwind(|| import_bytes(bytes));
    let elapsed = start.elapsed();
    let Ok(result) = result else {
        panic!("{what}: the importer panicked")
    };
    let Err(err) = result else { panic!("{what}: accepted") };
    assert!(elapsed < Duration::from_secs(1), "{what}: took {elapsed:?}");
    err.to_string()
}

const P4: [u8; 2] = [0x80, 4];

#[test]
fn every_code_executing_opcode_is_refused_by_name_and_offset() {
    let ops: &[(u8, &str)] = &[
        (b'c', "GLOBAL"),
        (0x93, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
        (0x97, "NEXT_BUFFER"),
        (0x98, "READONLY_BUFFER"),
    ];
    for &(op, name) in ops {
        // A valid prefix (an empty list pushed) so the offset is not trivially 2.
        let bytes = vec![0x80, 5, b']', op, 0, 0, 0, 0, b'.'];
        let msg = refused(name, bytes);
        assert!(msg.contains(&format!("{name} (0x{op:02x}) at byte 3")), "{name}: {msg}");
    }
}

#[test]
fn protocols_outside_2_to_5_and_trailing_bytes_are_refused() {
    let msg = refused("protocol 1", vec![0x80, 1, b'N', b'.']);
    assert!(msg.contains("unsupported pickle protocol 1"), "{msg}");
    let msg = refused("trailing", vec![0x80, 4, b'N', b'.', b'x', b'y']);
    assert!(
        msg.contains("2 trailing byte(s) after the STOP opcode at byte 3"),
        "{msg}"
    );
}

#[test]
fn deep_nesting_is_capped() {
    // 100,000 nested lists: `[[[[...]]]]` built with EMPTY_LIST ... APPEND.
    let mut bytes = P4.to_vec();
    bytes.extend(std::iter::repeat_n(b']', 100_000));
    bytes.extend(std::iter::repeat_n(b'a', 99_999));
    bytes.push(b'.');
    let msg = refused("depth 100000 via APPEND", bytes);
    assert!(msg.contains("nesting deeper than"), "{msg}");

    // 100,000 open MARKs.
    let mut bytes = P4.to_vec();
    bytes.extend(std::iter::repeat_n(b'(', 100_000));
    let msg = refused("depth 100000 via MARK", bytes);
    assert!(msg.contains("nesting deeper than"), "{msg}");
}

#[test]
fn huge_length_prefixes_fail_before_allocating() {
    for op in [0x8d_u8, 0x8e, 0x96] {
        let mut bytes = P4.to_vec();
        bytes.push(op);
        bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
        bytes.extend_from_slice(b"abc.");
        let msg = refused("2^62 length", bytes);
        assert!(
            msg.contains("length prefix 4611686018427387904 at byte 2 exceeds"),
            "{msg}"
        );
    }
    let mut bytes = P4.to_vec();
    bytes.push(b'X');
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    let msg = refused("4 GiB BINUNICODE", bytes);
    assert!(msg.contains("exceeds"), "{msg}");
}

#[test]
fn dicts_left_unappended_under_many_lists_do_not_slow_the_decoder() {
    // 200,000 lists kept on the stack, each with a dict made under a MARK and popped before it
    // is appended: every such list would be followed, and each later dict looked up among them.
    let mut bytes = P4.to_vec();
    bytes.push(b'(');
    for _ in 0..200_000 {
        bytes.extend_from_slice(b"](}1");
    }
    bytes.extend_from_slice(b"t.");
    let err = refused("unappended dicts", bytes);
    assert!(err.contains("snapshot"), "{err}");
}

fn short_str(bytes: &mut Vec<u8>, s: &str) {
    bytes.push(0x8c);
    bytes.push(s.len() as u8);
    bytes.extend_from_slice(s.as_bytes());
}

#[test]
fn memo_fan_out_does_not_explode() {
    // {'segments': [S] * 100_000} where S = {'address': 0, 'total_size': 1, 'blocks': [B] * 1000}:
    // 500 KB of input that names 10^8 blocks through memo references.
    let mut b = P4.to_vec();
    b.extend_from_slice(&[b'}', 0x94]); // root, memo 0
    short_str(&mut b, "segments");
    b.extend_from_slice(&[0x94, b']', 0x94, b'(']); // memo 1 'segments', memo 2 the list, MARK
    b.extend_from_slice(&[b'}', 0x94, b'(']); // S, memo 3
    short_str(&mut b, "address");
    b.extend_from_slice(&[b'K', 0]);
    short_str(&mut b, "total_size");
    b.extend_from_slice(&[b'K', 1]);
    short_str(&mut b, "blocks");
    b.extend_from_slice(&[b']', 0x94, b'(']); // blocks list, memo 4
    b.extend_from_slice(&[b'}', 0x94, b'(']); // B, memo 5
    short_str(&mut b, "size");
    b.extend_from_slice(&[b'K', 1, b'u']);
    for _ in 0..999 {
        b.extend_from_slice(&[b'h', 5]);
    }
    b.extend_from_slice(b"eu"); // blocks done, S done
    for _ in 0..99_999 {
        b.push(b'j');
        b.extend_from_slice(&3u32.to_le_bytes());
    }
    b.extend_from_slice(b"es.");
    let msg = refused("memo fan-out", b);
    assert!(msg.contains("through shared (memo) references"), "{msg}");
}

fn real_file(name: &str) -> Vec<u8> {
    std::fs::read(trace(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn truncation_at_every_thousandth_byte_is_a_clear_error() {
    for name in ["mlp_train.pickle", "oom_fragmentation.at_oom.pickle"] {
        let full = real_file(name);
        for cut in (1..full.len()).step_by(1000) {
            let msg = refused(&format!("{name} cut at {cut}"), full[..cut].to_vec());
            assert!(
                msg.contains("truncated") || msg.contains("ends at byte"),
                "{name} cut at {cut}: {msg}"
            );
        }
    }
}

#[test]
fn gzip_bombs_stop_at_the_limit() {
    // A 4 GiB string announced, 320 MiB of it sent: it compresses ~1000:1 and the ratio cap stops it.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut head = P4.to_vec();
    head.push(0x8d);
    head.extend_from_slice(&(4u64 << 30).to_le_bytes());
    enc.write_all(&head).expect("gzip");
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..320 {
        enc.write_all(&zeros).expect("gzip");
    }
    let bomb = enc.finish().expect("gzip");
    let msg = refused("gzip bomb", bomb);
    assert!(
        msg.contains("decompressed data exceeds the limit") || msg.contains("exceeds the"),
        "{msg}"
    );

    // A classic bomb of zeros fails at the first opcode, long before inflating it all.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for _ in 0..1024 {
        enc.write_all(&zeros).expect("gzip");
    }
    let msg = refused("zero bomb", enc.finish().expect("gzip"));
    assert!(msg.contains("unrecognised format"), "{msg}");
}

#[test]
fn a_corrupt_gzip_stream_is_reported_as_such() {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&real_file("mlp_train.pickle")).expect("gzip");
    let mut gz = enc.finish().expect("gzip");
    let n = gz.len();
    for b in &mut gz[n / 2..n / 2 + 64] {
        *b ^= 0x5a;
    }
    let msg = refused("corrupt gzip", gz);
    assert!(msg.contains("gzip") || msg.contains("pickle"), "{msg}");
}

/// Imports `bytes` and returns whether it was accepted, checking it is fast and not a panic.
fn answered(what: &str, bytes: Vec<u8>) -> Result<(), String> {
    let start = Instant::now();
    let result = std::panic::catch_unwind(|| import_bytes(bytes));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{what}: took {:?}",
        start.elapsed()
    );
    match result {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => panic!("{what}: the importer panicked"),
    }
}

#[test]
fn logs_and_exports_cut_anywhere_or_mangled_never_panic() {
    for name in [
        "nvidia_smi_gpu.csv",
        "nvidia_smi_dmon.txt",
        "nvidia_smi_pmon.txt",
        "pynvml_log.jsonl",
        "cuda_alloc.json",
        "cuda_alloc.sqlite",
    ] {
        let full = std::fs::read(trace(name)).expect("trace");
        let step = (full.len() / 150).max(1);
        for cut in (1..full.len()).step_by(step) {
            if let Err(msg) = answered(&format!("{name} cut at {cut}"), full[..cut].to_vec()) {
                assert!(!msg.is_empty(), "{name} cut at {cut}: empty error");
            }
        }
        // Bytes overwritten in the middle: an error naming the problem, or a (partial) read.
        for at in (0..full.len()).step_by(step * 7) {
            let mut mangled = full.clone();
            for b in mangled.iter_mut().skip(at).take(64) {
                *b = b.wrapping_mul(31).wrapping_add(7);
            }
            let _ = answered(&format!("{name} mangled at {at}"), mangled);
        }
    }
    // One line longer than the cap is refused by line number, before it is all read.
    let mut long = b"timestamp, index, memory.used [MiB]\n".to_vec();
    long.extend(std::iter::repeat_n(b'9', 3 << 20));
    long.push(b'\n');
    let msg = answered("a 3 MiB line", long).expect_err("refused");
    assert!(msg.starts_with("line 2: longer than"), "{msg}");
}
