//! Files derived from the format table stay equal to it, so that a new format costs its
//! importer's folder and its line in the table: `docs/formats.md`, and each importer's fuzz
//! target (`core/fuzz/fuzz_targets/<format>.rs` with its `[[bin]]` in `core/fuzz/Cargo.toml`),
//! whose seeds (`core/fuzz/seeds/<format>/`, cut from the real traces by
//! `core/fuzz/make_seeds.py`) must exist. `MEMLENS_WRITE_DOCS=1` writes the derived files
//! instead of comparing.

use memlens_api::{FormatInfo, FORMATS};
use memlens_tests::repo_root;

const WRITE_HINT: &str = "run cargo xtask docs (MEMLENS_WRITE_DOCS=1 cargo test -p memlens-tests --test docs)";

fn writing() -> bool {
    std::env::var_os("MEMLENS_WRITE_DOCS").is_some()
}

#[test]
fn docs_formats_md_is_the_format_table() {
    let path = repo_root().join("docs/formats.md");
    let want = memlens_api::formats_markdown();
    if writing() {
        std::fs::write(&path, &want).expect("write docs/formats.md");
    }
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "docs/formats.md differs from the format table: {WRITE_HINT}"
    );
}

/// The fuzz target of one importer.
fn fuzz_target(f: &FormatInfo) -> String {
    format!(
        "//! Fuzz target: the `{name}` importer on arbitrary bytes (never a panic, bounded memory).\n\
         #![no_main]\n\
         libfuzzer_sys::fuzz_target!(|data: &[u8]| memlens_fuzz::import_as(memlens_api::Format::{variant:?}, data));\n",
        name = f.name,
        variant = f.format,
    )
}

/// Its entry in the fuzz crate's manifest.
fn fuzz_bin(f: &FormatInfo) -> String {
    format!(
        "[[bin]]\nname = \"{0}\"\npath = \"fuzz_targets/{0}.rs\"\ntest = false\ndoc = false\nbench = false\n",
        f.name
    )
}

/// The fuzz targets that are not one importer's.
const OTHER_TARGETS: [&str; 3] = ["sniff", "upload", "pytorch_snapshot_flat"];

#[test]
fn every_format_has_its_fuzz_target_and_seeds() {
    let fuzz = repo_root().join("core/fuzz");
    let manifest_path = fuzz.join("Cargo.toml");
    let mut manifest = std::fs::read_to_string(&manifest_path).expect("core/fuzz/Cargo.toml");
    let mut wrong = Vec::new();
    for f in FORMATS {
        let path = fuzz.join(format!("fuzz_targets/{}.rs", f.name));
        let want = fuzz_target(f);
        if writing() {
            std::fs::write(&path, &want).expect("write a fuzz target");
            if !manifest.contains(&fuzz_bin(f)) {
                manifest = format!("{}\n\n{}", manifest.trim_end(), fuzz_bin(f));
                std::fs::write(&manifest_path, &manifest).expect("write core/fuzz/Cargo.toml");
            }
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            wrong.push(format!("{} is not the importer's fuzz target", path.display()));
        }
        if !manifest.contains(&fuzz_bin(f)) {
            wrong.push(format!("core/fuzz/Cargo.toml has no [[bin]] for {}", f.name));
        }
        let seeds = fuzz.join("seeds").join(f.name);
        if std::fs::read_dir(&seeds).map_or(true, |mut d| d.next().is_none()) {
            wrong.push(format!(
                "{} is empty: add the format to core/fuzz/make_seeds.py",
                seeds.display()
            ));
        }
    }
    // No target of a format the table no longer has.
    for entry in std::fs::read_dir(fuzz.join("fuzz_targets")).expect("fuzz_targets") {
        let name = entry
            .expect("entry")
            .path()
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        if !OTHER_TARGETS.contains(&name.as_str()) && !FORMATS.iter().any(|f| f.name == name) {
            wrong.push(format!("fuzz_targets/{name}.rs is no format's"));
        }
    }
    assert!(wrong.is_empty(), "{}\n({WRITE_HINT})", wrong.join("\n"));
}
