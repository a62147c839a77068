//! A recording taken window by window (`memlens.torch.record(every_steps=N)`) analyses as the
//! one snapshot of the whole run: `traces/windows/` holds real snapshots split as a windowed
//! recording sends them (`split.py`), and their analysis equals the whole file's, field by
//! field, with PyTorch's own peak.

use std::io::Read;

use memlens_core::pipeline::{self, Input, OpenInput};
use memlens_tests::{oracle_for, oracle_value, trace, traces_dir};

fn windows_of(name: &str, n: usize) -> Vec<(u64, OpenInput)> {
    (0..n)
        .map(|k| {
            let path = traces_dir()
                .join("windows")
                .join(format!("{name}.window_{k}.pickle.gz"));
            let size = std::fs::metadata(&path).expect("window").len();
            let open: OpenInput = Box::new(move || Ok(Box::new(std::fs::File::open(&path)?) as Box<dyn Read + Send>));
            (size, open)
        })
        .collect()
}

#[test]
fn windows_analyse_as_the_whole_run() {
    let path = trace("gpt_b8.pickle.gz");
    let whole = pipeline::run(vec![Input::path(&path)], Default::default()).expect("whole");
    let joined = pipeline::run(
        vec![Input::windows(path.display().to_string(), windows_of("gpt_b8", 4))],
        Default::default(),
    )
    .expect("windows");
    let (w, j) = (&whole.files[0], &joined.files[0]);
    let peak = oracle_value(&oracle_for(&trace("gpt_b8.pickle.gz")), "requested_bytes.all.peak");
    assert_eq!(j.devices[0].peak_allocated_bytes, peak, "PyTorch's own peak");
    assert!(j.gzip);
    // Everything else as the whole file says it.
    assert_eq!(serde_json::to_value(j).unwrap(), serde_json::to_value(w).unwrap());
}

#[test]
fn a_window_that_is_not_a_snapshot_is_named() {
    let mut windows = windows_of("gpt_b8", 2);
    let text = trace("cupy_outside.nvidia_smi.csv");
    let size = std::fs::metadata(&text).unwrap().len();
    windows.push((
        size,
        Box::new(move || Ok(Box::new(std::fs::File::open(&text)?) as Box<dyn Read + Send>)),
    ));
    let e = pipeline::run(vec![Input::windows("rec.pickle", windows)], Default::default()).expect_err("a CSV window");
    assert!(e.to_string().contains("window 2 is a"), "{e}");
    assert!(e.to_string().starts_with("rec.pickle: "), "{e}");
}
