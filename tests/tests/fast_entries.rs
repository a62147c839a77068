//! Trace entries read flat (`pickle/flat.rs`) give exactly the tables the general machine
//! gives, on every committed snapshot and every shared one (`../shared/traces/pytorch`, with
//! the bench file, when it is there): each decoded both ways, every table compared. The flat
//! decode reads its input through a thread that reads ahead (`pickle/read_ahead.rs`, which
//! `Source::open` turns on for large plain files only), the machine's on its own thread.

use memlens_core::importers::pytorch_snapshot::{decode_snapshot, decode_snapshot_by_machine};
use memlens_core::importers::ImportOptions;
use memlens_core::source::{Source, SourceLimits};
use memlens_tests::{shared_traces_dir, snapshots_in, traces_dir};

#[test]
fn entries_read_flat_give_the_tables_the_machine_gives() {
    let options = ImportOptions::default();
    let mut checked = 0;
    let mut paths = snapshots_in(&traces_dir());
    if let Some(shared) = shared_traces_dir() {
        paths.extend(snapshots_in(&shared.join("pytorch")));
        paths.extend(snapshots_in(&shared.join("bench")));
    }
    for path in paths {
        let open = || Source::open(&path, SourceLimits::default()).expect("open");
        if open().head.first() != Some(&0x80) {
            continue; // a JSON snapshot
        }
        let name = path.display();
        let (mut read_ahead, mut read_here) = (open(), open());
        (read_ahead.read_ahead, read_here.read_ahead) = (true, false);
        let flat = decode_snapshot(read_ahead, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let machine = decode_snapshot_by_machine(read_here, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (flat, machine) = (
            flat.into_tables().expect("tables"),
            machine.into_tables().expect("tables"),
        );
        for ((table, a), b) in memlens_core::tables::TABLE_NAMES
            .iter()
            .zip(flat.frames_ref())
            .zip(machine.frames_ref())
        {
            assert!(a.equals_missing(b), "{name}: {table} differs:\n{a}\n{b}");
        }
        assert!(
            flat.size_stacks.equals_missing(&machine.size_stacks),
            "{name}: size_stacks differ"
        );
        assert_eq!(flat.meta(), machine.meta(), "{name}");
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} snapshots checked");
}

#[test]
fn the_differential_check_tells_two_snapshots_apart() {
    use memlens_core::importers::pytorch_snapshot::flat_reads_agree;
    let (a, b) = (traces_dir().join("mlp_train.pickle"), traces_dir().join("leak.pickle"));
    let open = |p: &std::path::Path| Source::open(p, SourceLimits::default()).expect("open");
    let options = ImportOptions::default();
    assert_eq!(flat_reads_agree(open(&a), open(&a), &options), Ok(()));
    let differ = flat_reads_agree(open(&a), open(&b), &options).expect_err("two snapshots");
    assert!(differ.contains("other columns"), "{differ}");
    let truncated = std::io::Cursor::new(std::fs::read(&a).expect("read")[..5000].to_vec());
    let cut = Source::from_reader(Box::new(truncated), 5000, SourceLimits::default()).expect("source");
    let fails = flat_reads_agree(open(&a), cut, &options).expect_err("one fails");
    assert!(fails.contains("by the machine it fails"), "{fails}");
}
