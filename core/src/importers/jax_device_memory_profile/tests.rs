//! The JAX profile reader on real profiles (traces/jax-cpu, made on the CPU backend by
//! traces/capture/jax_cpu_profiles.py) and on hand-made protobufs.

use prost::Message;

use super::pprof::{Function, Label, Line, Location, Profile, Sample, ValueType};
use super::*;
use crate::source::SourceLimits;

fn source_of(bytes: Vec<u8>) -> Source {
    let len = bytes.len() as u64;
    Source::from_reader(Box::new(std::io::Cursor::new(bytes)), len, SourceLimits::default()).expect("source")
}

fn columns_of(bytes: Vec<u8>) -> Result<SnapshotColumns, ImportError> {
    match IMPORTER.import(source_of(bytes), &ImportOptions::default())? {
        Parsed::Snapshot(c) => Ok(*c),
        _ => panic!("not a snapshot"),
    }
}

/// Why `bytes` were refused.
fn refused(bytes: Vec<u8>) -> String {
    columns_of(bytes).expect_err("refused").to_string()
}

/// A frame: function, file, line.
type Frame<'a> = (&'a str, &'a str, i64);

/// A sample to write: kind, device label, count, bytes, frames innermost first.
type TestSample<'a> = (&'a str, Option<&'a str>, i64, i64, &'a [Frame<'a>]);

/// A profile of `samples`.
fn profile(samples: &[TestSample]) -> Vec<u8> {
    let mut strings = vec![String::new()];
    let mut id = |s: &str| -> i64 {
        if let Some(i) = strings.iter().position(|x| x == s) {
            return i as i64;
        }
        strings.push(s.to_owned());
        strings.len() as i64 - 1
    };
    let mut p = Profile {
        sample_type: vec![
            ValueType {
                r#type: id("allocations"),
                unit: id("count"),
            },
            ValueType {
                r#type: id("space"),
                unit: id("bytes"),
            },
        ],
        ..Profile::default()
    };
    for (kind, device, count, bytes, frames) in samples {
        let mut labels = vec![Label {
            key: id("kind"),
            str: id(kind),
            ..Label::default()
        }];
        if let Some(d) = device {
            labels.push(Label {
                key: id("device"),
                str: id(d),
                ..Label::default()
            });
        }
        let mut location_id = Vec::new();
        for (name, file, line) in frames.iter() {
            let fid = p.function.len() as u64 + 1;
            p.function.push(Function {
                id: fid,
                name: id(name),
                filename: id(file),
                ..Function::default()
            });
            let lid = p.location.len() as u64 + 1;
            p.location.push(Location {
                id: lid,
                line: vec![Line {
                    function_id: fid,
                    line: *line,
                }],
                ..Location::default()
            });
            location_id.push(lid);
        }
        p.sample.push(Sample {
            location_id,
            value: vec![*count, *bytes],
            label: labels,
            ..Sample::default()
        });
    }
    p.string_table = strings;
    p.encode_to_vec()
}

#[test]
fn buffers_become_one_segment_and_one_active_block_each_on_their_device() {
    let frames: &[(&str, &str, i64)] = &[("zeros", "jax/_src/numpy/lax_numpy.py", 10), ("main", "/w/train.py", 3)];
    let bytes = profile(&[
        ("buffer", Some("cuda:1"), 3, 3 * 4096, frames),
        ("executable", None, 2, 700, &[]),
        ("buffer", Some("cuda:0"), 1, 512, &[]),
    ]);
    let c = columns_of(bytes).expect("imports");
    assert_eq!(c.segments.len(), 4);
    assert_eq!(c.segments.device, [1, 1, 1, 0]);
    assert_eq!(c.blocks.size, [4096, 4096, 4096, 512]);
    assert!(c.blocks.state.iter().all(|&s| s == BlockState::ActiveAllocated as u8));
    assert!(c.trace.is_empty(), "a profile is one instant: no trace");
    let first = c.blocks.stack[0] as usize;
    let (a, b) = (c.frames.offsets[first] as usize, c.frames.offsets[first + 1] as usize);
    let names: Vec<&str> = c.frames.flat[a..b]
        .iter()
        .map(|&f| c.frames.names[f as usize].as_str())
        .collect();
    assert_eq!(names, ["zeros", "main"], "innermost first, as the file has them");
    assert!(
        c.source
            .notes
            .iter()
            .any(|n| n.contains("2 compiled executables with 700 bytes")),
        "{:?}",
        c.source.notes
    );
    assert!(
        c.source
            .notes
            .iter()
            .any(|n| n.contains("cuda:0 as device 0, cuda:1 as device 1")),
        "{:?}",
        c.source.notes
    );
}

#[test]
fn device_labels_give_their_numbers() {
    assert_eq!(device_number("cuda:3"), Some(3));
    assert_eq!(device_number("TFRT_CPU_0"), Some(0));
    assert_eq!(device_number("TPU_2(process=0,(0,1,0,0))"), Some(2));
    assert_eq!(device_number("7"), Some(7));
    assert_eq!(device_number("cpu"), None);
}

#[test]
fn what_is_not_a_jax_profile_is_refused_naming_what_it_is() {
    let mut strings = vec![
        String::new(),
        "samples".into(),
        "count".into(),
        "cpu".into(),
        "nanoseconds".into(),
    ];
    let p = Profile {
        sample_type: vec![ValueType { r#type: 1, unit: 2 }, ValueType { r#type: 3, unit: 4 }],
        string_table: std::mem::take(&mut strings),
        ..Profile::default()
    };
    let bytes = p.encode_to_vec();
    assert!(
        IMPORTER.sniff(&bytes),
        "any pprof profile is claimed, and told apart on import"
    );
    let e = refused(bytes);
    assert!(e.contains("[samples/count, cpu/nanoseconds]"), "{e}");
    let e = refused(profile(&[("buffer", None, 1, 8, &[])]));
    assert!(e.contains("without its device label"), "{e}");
    let e = refused(profile(&[("buffer", Some("cuda:0"), 3, 10, &[])]));
    assert!(e.contains("not 3 buffers of one size"), "{e}");
    let e = refused(profile(&[(
        "buffer",
        Some("cuda:0"),
        MAX_BUFFERS + 1,
        MAX_BUFFERS + 1,
        &[],
    )]));
    assert!(e.contains("more than 2097152 buffers"), "{e}");
    assert!(columns_of(b"\x0a\x04\x08\x01\x10\x02\xff\xff".to_vec()).is_err());
}

#[test]
fn text_is_never_taken_for_a_profile() {
    for text in [
        &b"\nTraceback (most recent call last):\n"[..],
        b"\n\n",
        b"\n\x04abcd",
        b"hello",
    ] {
        assert!(!IMPORTER.sniff(text), "{text:?}");
    }
}

/// What the script counted from its live arrays (`live_buffers_by_device`), per device label.
fn truth_bytes(name: &str) -> Vec<(String, i64, i64)> {
    let path = format!("{}/../traces/jax-cpu/{name}.truth.json", env!("CARGO_MANIFEST_DIR"));
    let truth: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("truth")).expect("json");
    truth["live_buffers_by_device"]
        .as_object()
        .expect("by device")
        .iter()
        .map(|(d, v)| {
            (
                d.clone(),
                v["buffers"].as_i64().expect("n"),
                v["nbytes"].as_i64().expect("bytes"),
            )
        })
        .collect()
}

#[test]
fn live_bytes_equal_what_the_script_counted_from_its_arrays() {
    for name in ["jax_cpu_eager", "jax_cpu_train.step1", "jax_cpu_train.step5"] {
        let path = format!("{}/../traces/jax-cpu/{name}.prof", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).expect("profile");
        assert_eq!(&bytes[..2], [0x1f, 0x8b], "JAX writes it gzip-compressed");
        let source = Source::from_reader(
            Box::new(std::io::Cursor::new(bytes.clone())),
            bytes.len() as u64,
            SourceLimits::default(),
        )
        .expect("source");
        assert!(IMPORTER.sniff(&source.head), "{name}");
        let c = columns_of(bytes).expect(name);
        for (label, buffers, nbytes) in truth_bytes(name) {
            let n = device_number(&label).expect("numbered");
            let on: Vec<i64> = c
                .blocks
                .size
                .iter()
                .zip(&c.blocks.device)
                .filter(|(_, &d)| d == n)
                .map(|(s, _)| *s)
                .collect();
            assert_eq!(
                (on.len() as i64, on.iter().sum::<i64>()),
                (buffers, nbytes),
                "{name} on {label}"
            );
        }
    }
}
