//! Documentation derived from the code stays equal to it: `docs/formats.md` is the format
//! table. `MEMLENS_WRITE_DOCS=1` rewrites the file instead of comparing.

use memlens_tests::repo_root;

#[test]
fn docs_formats_md_is_the_format_table() {
    let path = repo_root().join("docs/formats.md");
    let want = memlens_api::formats_markdown();
    if std::env::var_os("MEMLENS_WRITE_DOCS").is_some() {
        std::fs::write(&path, &want).expect("write docs/formats.md");
    }
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "docs/formats.md differs from the format table: run MEMLENS_WRITE_DOCS=1 cargo test -p memlens-tests --test docs"
    );
}
