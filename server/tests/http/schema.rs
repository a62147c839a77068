//! Reports stored in earlier layouts (`tests/fixtures/store-v*`, written by the code of their
//! day): each opens under today's server and answers its queries, and a report in a layout the
//! server does not read is analysed again from its kept upload, never lost.

use super::*;

/// Each fixture store and the report it holds.
const FIXTURES: &[(&str, &str)] = &[("store-v2", "c331da2492303dbc45acf4bf468466ce")];

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A scratch data directory holding a copy of fixture store `name` as its store.
fn fixture_copy(name: &str) -> TestDir {
    let dir = tmpdir(name);
    copy_tree(&manifest_dir().join("tests/fixtures").join(name), &dir.join("store"));
    dir
}

/// The peaks of a summary's first file's first device, as stored in a fixture or answered.
fn peaks(summary: &Value) -> (i64, i64) {
    let d = &summary["files"][0]["devices"][0];
    (
        d["peak_allocated_bytes"].as_i64().expect("peak allocated"),
        d["peak_reserved_bytes"].as_i64().expect("peak reserved"),
    )
}

fn stored_summary(name: &str, id: &str) -> Value {
    let path = manifest_dir()
        .join("tests/fixtures")
        .join(name)
        .join(format!("reports/{id}/data/summary.json"));
    serde_json::from_slice(&std::fs::read(path).expect("fixture summary")).expect("json")
}

#[test]
fn every_stored_layout_opens_and_answers_under_todays_server() {
    if skipped_on_shared_store("the fixtures are embedded stores") {
        return;
    }
    for &(name, id) in FIXTURES {
        let s = Server::serve_in(fixture_copy(name), &[]);
        let (code, summary) = get_json(&s, &format!("/api/reports/{id}"));
        assert_eq!(code, 200, "{name}: {summary}");
        assert_eq!(peaks(&summary), peaks(&stored_summary(name, id)), "{name}");
        for q in ["timeline?width=300", "segments", "fragmentation", "stacks/1"] {
            let (code, v) = get_json(&s, &format!("/api/reports/{id}/{q}"));
            assert_eq!(code, 200, "{name} {q}: {v}");
        }
        // The same trace analysed now has the same peaks.
        let fresh = upload_trace(&s, "mlp_train.pickle");
        let fresh_id = fresh["id"].as_str().expect("id");
        assert_eq!(wait_done(&s, fresh_id)["state"], "ready");
        let (_, now) = get_json(&s, &format!("/api/reports/{fresh_id}"));
        assert_eq!(peaks(&summary), peaks(&now), "{name}");
    }
}

#[test]
fn a_report_in_a_layout_the_server_does_not_read_is_analysed_again_from_its_upload() {
    if skipped_on_shared_store("the fixtures are embedded stores") {
        return;
    }
    let (name, id) = FIXTURES[0];
    let dir = fixture_copy(name);
    let schema = dir.join(format!("store/reports/{id}/data/schema.json"));
    std::fs::write(&schema, br#"{"version":0}"#).expect("an unreadable layout");
    let s = Server::serve_on(&dir, &[]);
    let (code, v) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 202, "answered as being processed again: {v}");
    assert_eq!(wait_done(&s, id)["state"], "ready");
    let (code, summary) = get_json(&s, &format!("/api/reports/{id}"));
    assert_eq!(code, 200, "{summary}");
    assert_eq!(peaks(&summary), peaks(&stored_summary(name, id)));
    let rewritten: Value = serde_json::from_slice(&std::fs::read(&schema).expect("schema")).expect("json");
    assert!(rewritten["version"].as_u64().unwrap_or(0) >= 2, "{rewritten}");
    drop(s);
}
