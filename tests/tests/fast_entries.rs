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

/// A pickle written byte by byte (protocol 4, no FRAMEs), its memo slots counted.
#[derive(Default)]
struct Pickle {
    bytes: Vec<u8>,
    memo: u32,
}

impl Pickle {
    fn op(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }
    /// MEMOIZE: the slot it fills.
    fn memoize(&mut self) -> u32 {
        self.op(&[0x94]);
        self.memo += 1;
        self.memo - 1
    }
    /// A new string, memoized: its slot.
    fn string(&mut self, s: &str) -> u32 {
        self.op(&[0x8c, s.len() as u8]);
        self.op(s.as_bytes());
        self.memoize()
    }
    /// BINGET, or LONG_BINGET past slot 255.
    fn get(&mut self, slot: u32) {
        match u8::try_from(slot) {
            Ok(s) => self.op(&[b'h', s]),
            Err(_) => {
                self.op(b"j");
                self.op(&slot.to_le_bytes());
            }
        }
    }
    fn int(&mut self, v: i32) {
        self.op(b"J");
        self.op(&v.to_le_bytes());
    }
}

/// A writer may store over a memo slot (BINPUT) between trace entries: a key's string, or a
/// frame dict a frames list names. Entries read flat after it read what the slot holds now —
/// not what the keys and lists remembered from the entries before it (`flat.rs`'s
/// `KeysByPosition` and `KnownLists`) say — as the machine reads them.
#[test]
fn entries_read_flat_after_a_memo_slot_is_stored_over_read_what_it_holds_now() {
    use memlens_core::importers::pytorch_snapshot::{decode_snapshot, flat_reads_agree};
    /// `over`: where the entries' `addr` key and their second frame are stored over, if at all.
    fn snapshot(over: Option<Over>) -> Vec<u8> {
        let mut p = Pickle::default();
        p.op(b"\x80\x04}");
        p.memoize();
        p.op(b"(");
        p.string("device_traces");
        p.op(b"]");
        p.memoize();
        p.op(b"(]");
        p.memoize();
        // The first entry, with its new strings and frame dicts, is made by the machine.
        p.op(b"(}");
        p.memoize();
        p.op(b"(");
        let keys = ["action", "alloc", "addr"].map(|s| p.string(s));
        let [action, alloc, addr] = keys;
        p.int(0x1000);
        let size = p.string("size");
        p.int(512);
        let frames = p.string("frames");
        p.op(b"]");
        p.memoize();
        p.op(b"(");
        let frame = |p: &mut Pickle, name: &str| {
            p.op(b"}");
            let slot = p.memoize();
            p.op(b"(");
            p.string("filename");
            p.string("model.py");
            p.string("line");
            p.int(7);
            p.string("name");
            p.string(name);
            p.op(b"u");
            slot
        };
        let (f1, f2) = (frame(&mut p, "forward"), frame(&mut p, "layer"));
        p.op(b"eu");
        // The entries after it, in a batch of their own, are read flat.
        p.op(b"e(");
        for i in 1..9 {
            if i == 5 {
                if let Some(over) = over {
                    match over {
                        // A new string over the `addr` key's slot, then POP.
                        Over::Key => p.op(b"\x8c\x06stream"),
                        // The first frame dict over the second's slot.
                        Over::Frame => p.get(f1),
                    }
                    let slot = match over {
                        Over::Key => addr,
                        Over::Frame => f2,
                    };
                    p.op(&[b'q', slot as u8, b'0']);
                }
            }
            p.op(b"}");
            p.memoize();
            p.op(b"(");
            p.get(action);
            p.get(alloc);
            p.get(addr);
            p.int(0x1000 * (i + 1));
            p.get(size);
            p.int(512);
            p.get(frames);
            p.op(b"]");
            p.memoize();
            p.op(b"(");
            p.get(f1);
            p.get(f2);
            p.op(b"eu");
        }
        p.op(b"ee");
        p.string("segments");
        p.op(b"]");
        p.memoize();
        p.op(b"u.");
        p.bytes
    }
    #[derive(Clone, Copy, Debug)]
    enum Over {
        Key,
        Frame,
    }
    let options = ImportOptions::default();
    let source = |bytes: &[u8]| {
        let len = bytes.len() as u64;
        Source::from_reader(
            Box::new(std::io::Cursor::new(bytes.to_vec())),
            len,
            SourceLimits::default(),
        )
        .expect("source")
    };
    let plain = decode_snapshot(source(&snapshot(None)), &options).expect("decodes");
    for over in [None, Some(Over::Key), Some(Over::Frame)] {
        let bytes = snapshot(over);
        assert_eq!(
            flat_reads_agree(source(&bytes), source(&bytes), &options),
            Ok(()),
            "{over:?}"
        );
        let decoded = decode_snapshot(source(&bytes), &options).expect("decodes");
        assert_eq!(
            decoded == plain,
            over.is_none(),
            "{over:?}: the store over a slot changes what is read"
        );
    }
}
