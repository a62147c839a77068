//! The fuzz targets' files, replayed by the stable suite: every seed in
//! `core/fuzz/seeds/<format>/` (small cuts of real traces) imports with its own format's importer
//! and is recognised as that format by the guesser, and every input in
//! `core/fuzz/regressions/<target>/` (one that once crashed a target) now ends in a value or an
//! error, never a panic (and, for the differential target, decodes alike both ways).

use std::path::{Path, PathBuf};

use memlens_api::Format;
use memlens_core::importers::pytorch_snapshot::flat_reads_agree;
use memlens_core::importers::{parse_source, ImportOptions, REGISTRY};
use memlens_core::source::{Source, SourceLimits};
use memlens_core::ImportError;
use memlens_tests::repo_root;

fn fuzz_dir(kind: &str) -> PathBuf {
    repo_root().join("core/fuzz").join(kind)
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

fn source(path: &Path) -> Result<Source, ImportError> {
    Source::open(path, SourceLimits::default())
}

fn source_of(bytes: &[u8]) -> Result<Source, ImportError> {
    Source::from_reader(
        Box::new(std::io::Cursor::new(bytes.to_vec())),
        bytes.len() as u64,
        SourceLimits::default(),
    )
}

/// The differential target: its inputs once decoded differently with trace entries read flat
/// than by the general machine, and must now agree.
const DIFFERENTIAL: &str = "pytorch_snapshot_flat";

/// Runs `f`, turning a panic into a test failure that names the file.
fn no_panic<T>(path: &Path, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| panic!("{}: panicked", path.display()))
}

#[test]
fn every_seed_imports_with_its_formats_importer_and_is_sniffed_as_it() {
    let mut checked = 0;
    for f in memlens_api::FORMATS {
        let seeds = files_in(&fuzz_dir("seeds").join(f.name));
        assert!(!seeds.is_empty(), "no fuzz seeds for {}", f.name);
        let (_, importer) = REGISTRY.iter().find(|(g, _)| *g == f.format).expect("importer");
        for seed in seeds {
            let imported = no_panic(&seed, || importer.import(source(&seed)?, &ImportOptions::default()));
            if let Err(e) = imported {
                panic!("{}: {e}", seed.display());
            }
            let parsed = parse_source(source(&seed).expect("open"), &ImportOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", seed.display()));
            assert_eq!(parsed.format, f.format, "{}", seed.display());
            checked += 1;
        }
    }
    assert!(checked >= memlens_api::FORMATS.len());
}

#[test]
fn every_regression_input_ends_in_a_value_or_an_error() {
    let dirs = std::fs::read_dir(fuzz_dir("regressions")).expect("core/fuzz/regressions");
    let mut replayed = 0;
    for dir in dirs.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()) {
        let target = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        for input in files_in(&dir) {
            let bytes = std::fs::read(&input).expect("read");
            // Importer targets replay through their importer; the others through the guesser.
            let format = Format::from_name(&target);
            replayed += 1;
            let _ = no_panic(&input, || {
                let src = source_of(&bytes)?;
                match format.and_then(|f| REGISTRY.iter().find(|(g, _)| *g == f)) {
                    Some((_, importer)) => importer.import(src, &ImportOptions::default()).map(|_| ()),
                    None => parse_source(src, &ImportOptions::default()).map(|_| ()),
                }
            });
            // As the target replays it: an input that makes no source (an empty one, kept
            // from a run whose leak check fired on it) is not compared, and the flat side is
            // read ahead.
            if let (DIFFERENTIAL, Ok(mut flat), Ok(machine)) = (target.as_str(), source_of(&bytes), source_of(&bytes)) {
                flat.read_ahead = true;
                if let Err(e) = flat_reads_agree(flat, machine, &ImportOptions::default()) {
                    panic!("{}: {e}", input.display());
                }
            }
        }
    }
    assert!(replayed > 0, "no regression inputs found");
}
