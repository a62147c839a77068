//! Every real snapshot reproduces PyTorch's own counters exactly: the peak of requested bytes
//! equals `requested_bytes.all.peak` and the reserved peak equals `reserved_bytes.all.peak`.

use memlens_core::pipeline::summarize_file;
use memlens_tests::{oracle_for, oracle_value, shared_traces_dir, snapshots_in, traces_dir};

fn check_dir(dir: &std::path::Path) -> usize {
    let files = snapshots_in(dir);
    let mut checked = 0;
    for f in &files {
        let oracle = oracle_for(f);
        if !oracle.exists() {
            continue;
        }
        let s = summarize_file(f).unwrap_or_else(|e| panic!("{e}"));
        let d = &s.devices[0];
        assert_eq!(
            d.peak_allocated_bytes,
            oracle_value(&oracle, "requested_bytes.all.peak"),
            "{}: peak_allocated_bytes",
            f.display()
        );
        assert_eq!(
            d.peak_reserved_bytes,
            oracle_value(&oracle, "reserved_bytes.all.peak"),
            "{}: peak_reserved_bytes",
            f.display()
        );
        checked += 1;
    }
    checked
}

#[test]
fn committed_traces_match_their_oracles() {
    assert!(
        check_dir(&traces_dir()) + check_dir(&traces_dir().join("anatomy")) >= 18,
        "expected the committed snapshots in traces/"
    );
}

#[test]
fn shared_traces_match_their_oracles() {
    // The shared folder is beside every checkout and CI clone; without it there is nothing to check.
    let Some(shared) = shared_traces_dir() else {
        eprintln!("../shared/traces is absent; the committed copies are checked by the other test");
        return;
    };
    let n = check_dir(&shared.join("pytorch")) + check_dir(&shared.join("bench"));
    assert!(n >= 11, "expected every shared snapshot to have been checked, got {n}");
}
