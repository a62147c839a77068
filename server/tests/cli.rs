//! The `memlens analyze` command line, run as a process on real traces.

use std::path::PathBuf;
use std::process::Command;

fn memlens() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memlens"))
}

fn trace(name: &str) -> PathBuf {
    manifest_dir().join("../traces").join(name)
}

#[test]
fn json_output_has_the_documented_fields() {
    let out = memlens()
        .args(["analyze", "--json"])
        .arg(trace("oom_fragmentation.pickle"))
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let d = &v["files"][0]["devices"][0];
    for key in [
        "device",
        "peak_allocated_bytes",
        "peak_time_us",
        "peak_reserved_bytes",
        "alloc_count",
        "oom_count",
        "leaks",
        "ooms",
    ] {
        assert!(d.get(key).is_some(), "missing {key}");
    }
    assert_eq!(d["peak_allocated_bytes"], 5152702464_i64);
    assert_eq!(d["oom_count"], 2);
    let oom = &d["ooms"][1];
    for key in [
        "time_us",
        "requested_bytes",
        "largest_free_block_bytes",
        "reserved_free_bytes",
        "remedy",
    ] {
        assert!(oom.get(key).is_some(), "oom missing {key}");
    }
    assert!(d["peak_time_us"].as_i64().is_some_and(|t| t > 1_700_000_000_000_000));
}

#[test]
fn several_files_and_text_output() {
    let out = memlens()
        .arg("analyze")
        .arg(trace("leak.pickle"))
        .arg(trace("mlp_train.pickle"))
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("leak.pickle") && text.contains("mlp_train.pickle"),
        "{text}"
    );
    assert!(text.contains("peak allocated  547.7 MiB"), "{text}");
    assert!(text.contains("leak candidates 2"), "{text}");
}

#[test]
fn a_diff_leads_with_its_verdict_and_summarises_long_series() {
    // Forty variable-length steps without and with expandable segments.
    let run = |json: bool| {
        let mut c = memlens();
        c.arg("diff");
        if json {
            c.arg("--json");
        }
        let out = c
            .arg(trace("anatomy/varlen_plain.pickle.gz"))
            .arg(trace("anatomy/varlen_expandable.pickle.gz"))
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let v: serde_json::Value = serde_json::from_str(&run(true)).expect("JSON");
    let headline = v["headline"].as_str().expect("headline");
    assert!(
        headline.starts_with("expandable segments (on in B) cut the fragmentation at the peak 0.98 → 0.49;"),
        "{headline}"
    );
    assert!(headline.contains("allocated peak unchanged"), "{headline}");
    assert!(headline.contains("reserved −1.46 GiB"), "{headline}");
    assert_eq!(v["a"]["iteration_peaks"].as_array().map(Vec::len), Some(40));
    let text = run(false);
    assert_eq!(text.lines().next(), Some(headline));
    let peaks: Vec<&str> = text.lines().filter(|l| l.contains("peak per iteration")).collect();
    assert_eq!(peaks.len(), 2, "{text}");
    for line in peaks {
        assert!(line.contains("(40 iterations): lowest 3.20 GiB, median"), "{line}");
        assert!(line.contains("highest 15.31 GiB"), "{line}");
    }
}

#[test]
fn unreadable_input_is_one_line_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("memlens-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let bad = dir.join("notes.txt");
    std::fs::write(&bad, "not a trace\n").expect("write");
    let cases = [
        // Text is read for OOM messages, memory summaries and nvidia-smi screens: none here.
        (bad.clone(), "no out-of-memory message"),
        (dir.join("missing.pickle"), "cannot read"),
    ];
    for (path, problem) in cases {
        let out = memlens().arg("analyze").arg(&path).output().expect("runs");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&path.display().to_string()) && err.contains(problem),
            "{err}"
        );
    }
    let truncated = dir.join("cut.pickle");
    let full = std::fs::read(trace("mlp_train.pickle")).expect("read");
    std::fs::write(&truncated, &full[..full.len() / 2]).expect("write");
    let out = memlens().arg("analyze").arg(&truncated).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cut.pickle: pickle: input ends at byte"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

// The checkout at run time: cargo and nextest set CARGO_MANIFEST_DIR for the test process; the
// compile-time value can be stale when a shared target directory serves several checkouts.
#[test]
fn a_reader_that_leaves_early_ends_the_output_quietly() {
    use std::io::Read;
    // Eight copies of a trace's JSON (187 KB) are more than a pipe holds (64 KiB): the command
    // is still writing when its reader leaves.
    let mut child = memlens()
        .args(["analyze", "--json"])
        .args(std::iter::repeat_n(trace("leak.pickle"), 8))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut head = [0u8; 16];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut head)
        .expect("the first bytes");
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
        "{:?}: {err}",
        out.status
    );
}

fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
