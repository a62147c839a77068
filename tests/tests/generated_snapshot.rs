//! The GB-scale benches' generator (`scripts/gen-snapshot`) writes what it says it writes: a
//! small run of it, analysed, has exactly the peak, reservation and leak it declares (so the
//! figures measured on its 2 GB files are figures of a consistent snapshot, and memlens reads
//! the pickler's shape it imitates exactly).

use std::process::Command;

use memlens_core::pipeline::summarize_file;
use memlens_tests::repo_root;

#[test]
fn a_generated_snapshot_has_the_peak_and_leak_its_generator_declares() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("generated.pickle");
    let out = Command::new("python3")
        .arg(repo_root().join("scripts/gen-snapshot"))
        .arg(&path)
        .args(["--entries", "60000"])
        .output()
        .expect("python3 runs scripts/gen-snapshot");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let declared: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the generator's JSON");
    let says = |key: &str| {
        declared[key]
            .as_i64()
            .unwrap_or_else(|| panic!("no {key} in {declared}"))
    };

    let summary = summarize_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let [d] = summary.devices.as_slice() else {
        panic!("one device, not {}", summary.devices.len())
    };
    assert_eq!(d.event_count as i64, says("entries"));
    assert_eq!(d.peak_allocated_bytes, says("peak_allocated_bytes"));
    assert_eq!(d.peak_reserved_bytes, says("reserved_bytes"));
    assert_eq!(d.final_allocated_bytes, says("leaked_bytes"));
    let [leak] = d.leaks.as_slice() else {
        panic!("one leak site: {:#?}", d.leaks)
    };
    assert_eq!(leak.bytes_per_iteration, says("leak_bytes_per_iteration"));
    assert_eq!(leak.bytes, says("leaked_bytes"));
    assert_eq!(leak.count as i64, says("iterations"));
}
