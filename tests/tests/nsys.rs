//! Nsight Systems exports (SQLite and JSON): the CUDA driver's allocations from the shared traces' nsys
//! capture (a CUDA 11.8 program allocating weights and per-step activations, leaking one 16 MiB
//! buffer per step). Expected numbers come from replaying `CUDA_GPU_MEMORY_USAGE_EVENTS` with
//! Python's sqlite3 (device memory, memKind 2: alloc adds `bytes`, dealloc removes the matching
//! allocation): peak 1,975,517,184 B; 6 × 16 MiB still allocated at the end.

use memlens_core::importers::{import_source, ImportOptions};
use memlens_core::pipeline::analyze_paths;
use memlens_core::source::{Source, SourceLimits};
use memlens_tests::trace;

fn import_error(bytes: Vec<u8>) -> String {
    let len = bytes.len() as u64;
    let result = std::panic::catch_unwind(|| {
        let source = Source::from_reader(Box::new(std::io::Cursor::new(bytes)), len, SourceLimits::default())?;
        import_source(source, &ImportOptions::default()).map(|_| ())
    });
    match result {
        Ok(Err(e)) => e.to_string(),
        Ok(Ok(())) => panic!("accepted"),
        Err(_) => panic!("the importer panicked"),
    }
}

#[test]
fn driver_allocations_peak_and_the_per_step_leak() {
    let out = analyze_paths(&[trace("cuda_alloc.sqlite")]).unwrap_or_else(|e| panic!("{e}"));
    let f = &out.files[0];
    assert_eq!(f.format, memlens_api::Format::NsysSqlite);
    assert!(
        f.source.notes.iter().any(|n| n.contains("driver allocations")),
        "{:?}",
        f.source.notes
    );
    assert!(
        f.source
            .notes
            .iter()
            .any(|n| n.contains("1 pinned/pageable host, 1 managed")),
        "{:?}",
        f.source.notes
    );
    assert_eq!(f.devices.len(), 1);
    let d = &f.devices[0];
    assert_eq!(d.alloc_count, 286);
    assert_eq!(d.peak_allocated_bytes, 1_975_517_184);
    assert_eq!(d.peak_reserved_bytes, 1_975_517_184);
    assert_eq!(d.initial_allocated_bytes, 0);
    assert_eq!(d.final_allocated_bytes, 6 * (16 << 20));
    // Epoch times: the session started at utcEpochNs 1795962324413896712.
    assert!(
        d.peak_time_us.is_some_and(|t| t > 1_795_962_324_413_896),
        "{:?}",
        d.peak_time_us
    );
    assert_eq!(d.leaks.len(), 1, "{:?}", d.leaks);
    let leak = &d.leaks[0];
    assert_eq!((leak.count, leak.bytes), (6, 6 * (16 << 20)));
    assert_eq!(
        leak.stack,
        vec!["cudaMalloc [cuda]".to_owned(), "16.0 MiB [size]".to_owned()]
    );
}

#[test]
fn other_sqlite_files_and_damaged_exports_are_refused_clearly() {
    let dir = std::env::temp_dir().join(format!("memlens-nsys-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // A SQLite database that is not an Nsight export.
    let other = dir.join("other.sqlite");
    let _ = std::fs::remove_file(&other);
    {
        let c = rusqlite::Connection::open(&other).expect("db");
        c.execute_batch("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .expect("sql");
    }
    let err = import_error(std::fs::read(&other).expect("read"));
    assert!(err.contains("not an Nsight Systems export"), "{err}");
    // The real export without its memory table (as nsys writes it without --cuda-memory-usage).
    let stripped = dir.join("stripped.sqlite");
    std::fs::copy(trace("cuda_alloc.sqlite"), &stripped).expect("copy");
    {
        let c = rusqlite::Connection::open(&stripped).expect("db");
        c.execute_batch("DROP TABLE CUDA_GPU_MEMORY_USAGE_EVENTS;")
            .expect("sql");
    }
    let err = import_error(std::fs::read(&stripped).expect("read"));
    assert!(err.contains("--cuda-memory-usage=true"), "{err}");
    // A truncated export.
    let full = std::fs::read(trace("cuda_alloc.sqlite")).expect("read");
    let err = import_error(full[..full.len() / 2].to_vec());
    assert!(err.starts_with("Nsight Systems export: SQLite:"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_json_export_of_the_same_capture_reads_the_same() {
    let sqlite = analyze_paths(&[trace("cuda_alloc.sqlite")]).unwrap_or_else(|e| panic!("{e}"));
    let json = analyze_paths(&[trace("cuda_alloc.json")]).unwrap_or_else(|e| panic!("{e}"));
    let (a, b) = (&sqlite.files[0].devices[0], &json.files[0].devices[0]);
    assert_eq!(json.files[0].format, memlens_api::Format::NsysJson);
    assert_eq!(
        (
            b.alloc_count,
            b.peak_allocated_bytes,
            b.final_allocated_bytes,
            b.peak_event_index
        ),
        (
            a.alloc_count,
            a.peak_allocated_bytes,
            a.final_allocated_bytes,
            a.peak_event_index
        )
    );
    assert_eq!(b.leaks.len(), 1);
    assert_eq!(
        b.leaks[0].stack, a.leaks[0].stack,
        "runtime call names resolved through the string table"
    );
    assert_eq!(
        b.peak_stacks.iter().map(|g| (&g.stack, g.bytes)).collect::<Vec<_>>(),
        a.peak_stacks.iter().map(|g| (&g.stack, g.bytes)).collect::<Vec<_>>()
    );
    // Without a session start on the epoch, times count from the capture's start.
    assert!(json.files[0]
        .source
        .notes
        .iter()
        .any(|n| n.contains("since the capture began")));
    assert!(b.peak_time_us.is_some_and(|t| t < 10_000_000), "{:?}", b.peak_time_us);
}

#[test]
fn an_export_in_wal_mode_reads_and_leaves_nothing_in_the_temp_folder() {
    // This test process's own temp folder (nextest runs each test in a process of its own).
    let scratch = std::env::temp_dir().join(format!("memlens-nsys-wal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("scratch");
    let wal = scratch.join("wal.sqlite");
    std::fs::copy(trace("cuda_alloc.sqlite"), &wal).expect("copy");
    {
        let c = rusqlite::Connection::open(&wal).expect("db");
        let mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).expect("wal");
        assert_eq!(mode, "wal");
    }
    let bytes = std::fs::read(&wal).expect("read");
    assert_eq!(bytes[18..20], [2, 2], "the header says WAL");
    std::fs::remove_file(&wal).expect("remove");
    std::env::set_var("TMPDIR", &scratch);
    let len = bytes.len() as u64;
    let source =
        Source::from_reader(Box::new(std::io::Cursor::new(bytes)), len, SourceLimits::default()).expect("open");
    import_source(source, &ImportOptions::default()).expect("a WAL-mode export imports");
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .expect("scratch")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(left.is_empty(), "left in the temp folder: {left:?}");
}
