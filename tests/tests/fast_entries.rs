//! Trace entries read flat (`pickle/flat/`) give exactly the tables the general machine
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

/// The memo slots of a [`TracePickle`]'s keys, action and frame dicts.
struct Slots {
    action: u32,
    alloc: u32,
    addr: u32,
    size: u32,
    frames: u32,
    frame: [u32; 2],
}

/// A one-device snapshot as Python's pickler lays it out: its first trace entry (new strings
/// and frame dicts: made by the machine) alone in a batch, then entries of the same keys and
/// stack in a batch of their own (read flat), written by [`TracePickle::entry`].
struct TracePickle {
    p: Pickle,
    slots: Slots,
}

impl TracePickle {
    fn begin() -> TracePickle {
        let mut p = Pickle::default();
        p.op(b"\x80\x04}");
        p.memoize();
        p.op(b"(");
        p.string("device_traces");
        p.op(b"]");
        p.memoize();
        p.op(b"(]");
        p.memoize();
        p.op(b"(}");
        p.memoize();
        p.op(b"(");
        let [action, alloc, addr] = ["action", "alloc", "addr"].map(|s| p.string(s));
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
        let frame = [frame(&mut p, "forward"), frame(&mut p, "layer")];
        p.op(b"eu");
        p.op(b"e(");
        let slots = Slots {
            action,
            alloc,
            addr,
            size,
            frames,
            frame,
        };
        TracePickle { p, slots }
    }

    /// An alloc at `addr` with the two frames; `then` writes more key/value pairs after those.
    fn entry(&mut self, addr: i32, then: impl FnOnce(&mut Pickle, &Slots)) {
        let (p, s) = (&mut self.p, &self.slots);
        p.op(b"}");
        p.memoize();
        p.op(b"(");
        p.get(s.action);
        p.get(s.alloc);
        p.get(s.addr);
        p.int(addr);
        p.get(s.size);
        p.int(512);
        p.get(s.frames);
        p.op(b"]");
        p.memoize();
        p.op(b"(");
        p.get(s.frame[0]);
        p.get(s.frame[1]);
        p.op(b"e");
        then(p, s);
        p.op(b"u");
    }

    fn end(mut self) -> Vec<u8> {
        self.p.op(b"ee");
        self.p.string("segments");
        self.p.op(b"]");
        self.p.memoize();
        self.p.op(b"u.");
        self.p.bytes
    }
}

fn source_of(bytes: &[u8]) -> Source {
    let len = bytes.len() as u64;
    Source::from_reader(
        Box::new(std::io::Cursor::new(bytes.to_vec())),
        len,
        SourceLimits::default(),
    )
    .expect("source")
}

/// A writer may store over a memo slot (BINPUT) between trace entries: a key's string, or a
/// frame dict a frames list names. Entries read flat after it read what the slot holds now —
/// not what the keys and lists remembered from the entries before it (`flat/seen.rs`'s
/// `KeysByPosition` and `KnownLists`) say — as the machine reads them.
#[test]
fn entries_read_flat_after_a_memo_slot_is_stored_over_read_what_it_holds_now() {
    use memlens_core::importers::pytorch_snapshot::{decode_snapshot, flat_reads_agree};
    #[derive(Clone, Copy, Debug)]
    enum Over {
        /// A new string over the `addr` key's slot.
        Key,
        /// The first frame dict over the second's slot.
        Frame,
    }
    let snapshot = |over: Option<Over>| {
        let mut t = TracePickle::begin();
        for i in 1..9 {
            if let (5, Some(over)) = (i, over) {
                let slot = match over {
                    Over::Key => {
                        t.p.op(b"\x8c\x06stream");
                        t.slots.addr
                    }
                    Over::Frame => {
                        t.p.get(t.slots.frame[0]);
                        t.slots.frame[1]
                    }
                };
                t.p.op(&[b'q', slot as u8, b'0']); // BINPUT, POP
            }
            t.entry(0x1000 * (i + 1), |_, _| {});
        }
        t.end()
    };
    let options = ImportOptions::default();
    let plain = decode_snapshot(source_of(&snapshot(None)), &options).expect("decodes");
    for over in [None, Some(Over::Key), Some(Over::Frame)] {
        let bytes = snapshot(over);
        assert_eq!(
            flat_reads_agree(source_of(&bytes), source_of(&bytes), &options),
            Ok(()),
            "{over:?}"
        );
        let decoded = decode_snapshot(source_of(&bytes), &options).expect("decodes");
        assert_eq!(
            decoded == plain,
            over.is_none(),
            "{over:?}: the store over a slot changes what is read"
        );
    }
}

/// An entry whose `frames` key comes twice — a new list, then None or a list shared from the
/// memo — has the stack of the last; the list's bytes are not remembered as that stack, so the
/// entries after it that list the same frames have their stack.
#[test]
fn a_frames_list_overridden_by_a_second_frames_key_is_not_remembered_as_its_stack() {
    use memlens_core::importers::pytorch_snapshot::{decode_snapshot, flat_reads_agree};
    let options = ImportOptions::default();
    let stacks_of = |bytes: &[u8]| {
        let tables = decode_snapshot(source_of(bytes), &options)
            .expect("decodes")
            .into_tables()
            .expect("tables");
        tables.meta().source.stack_count
    };
    for shared in [false, true] {
        let mut t = TracePickle::begin();
        // (The first entry read flat: its list's bytes are not remembered yet.)
        // A list of the second frame alone, memoized and popped: shared by the entry below.
        t.p.op(b"]");
        let alone = t.p.memoize();
        t.p.op(b"(");
        t.p.get(t.slots.frame[1]);
        t.p.op(b"e0");
        t.entry(0x3000, |p, s| {
            p.get(s.frames);
            match shared {
                true => p.get(alone),
                false => p.op(b"N"),
            }
        });
        for i in 4..8 {
            t.entry(0x1000 * i, |_, _| {});
        }
        let bytes = t.end();
        assert_eq!(
            flat_reads_agree(source_of(&bytes), source_of(&bytes), &options),
            Ok(()),
            "shared: {shared}"
        );
        // The empty stack (None's), the two frames', and the second frame's alone if shared.
        assert_eq!(stacks_of(&bytes), 2 + usize::from(shared), "shared: {shared}");
    }
}

/// Entries read flat by the shape of the one before (`flat/seen.rs`'s `EntryShape`) among
/// entries of other shapes — a pair more, repeating a key the hook reads or naming one it does
/// not — read as the machine reads them: each entry has its own fields, and the last of a key
/// given twice counts.
#[test]
fn entries_of_another_shape_among_entries_of_one_shape_read_as_the_machine_reads_them() {
    use memlens_core::importers::pytorch_snapshot::{decode_snapshot, flat_reads_agree};
    let options = ImportOptions::default();
    let mut t = TracePickle::begin();
    let mut extra = None;
    for i in 1..12 {
        t.entry(0x1000 * (i + 1), |p, s| match i {
            // `size` again: 1024 counts.
            4 | 5 | 9 => {
                p.get(s.size);
                p.int(1024);
            }
            // A key the hook does not read, new then fetched from the memo.
            7 | 8 => {
                match extra {
                    None => extra = Some(p.string("extra")),
                    Some(slot) => p.get(slot),
                }
                p.int(3);
            }
            _ => {}
        });
    }
    let bytes = t.end();
    assert_eq!(flat_reads_agree(source_of(&bytes), source_of(&bytes), &options), Ok(()));
    let tables = decode_snapshot(source_of(&bytes), &options)
        .expect("decodes")
        .into_tables()
        .expect("tables");
    let events = memlens_core::analysis::DeviceEvents::new(&tables, 0).expect("device 0");
    let size = events.size().to_vec();
    let want: Vec<i64> = (0..12)
        .map(|i| if [4, 5, 9].contains(&i) { 1024 } else { 512 })
        .collect();
    assert_eq!(size, want);
}
