//! Comparing two runs and the run overview of several ranks, on real traces: the shared pair
//! gpt_train / gpt_train_ckpt (the same GPT without and with activation checkpointing), and four
//! gloo DDP ranks trained on the H200 with one rank fed longer sequences
//! (traces/capture/ddp_ranks.py). Each rank's peak is its own process's counter.

use memlens_api::{Category, Comparison, RankSource, Side};
use memlens_core::analysis::compare::{compare_runs, CompareSide};
use memlens_core::analysis::run::busiest_device;
use memlens_core::pipeline::Pipeline;
use memlens_core::pipeline::{self, Input, KeepFrames};
use memlens_tests::{oracle_for, oracle_value, snapshots_in, trace, traces_dir};

fn real_peak(name: &str) -> i64 {
    oracle_value(&oracle_for(&trace(name)), "requested_bytes.all.peak")
}

/// `memlens diff A B` as the CLI and the server run it: both files through the pipeline, the
/// busiest device of each.
fn compare_paths(a: &std::path::Path, b: &std::path::Path, width: usize) -> Comparison {
    let mut sink = KeepFrames {
        with_stacks: true,
        ..KeepFrames::default()
    };
    let out = Pipeline::keeping_frames()
        .run(vec![Input::path(a), Input::path(b)], &mut sink)
        .expect("run");
    let side = |i: usize| {
        let f = &out.files[i];
        let d = busiest_device(f).expect("a device");
        CompareSide {
            label: f.file.clone(),
            report: None,
            file: f,
            file_index: i,
            device: d,
            frames: sink.files[i].iter().find(|x| x.device == d.device).expect("frames"),
            stacks: &sink.stacks[i],
            rank: None,
        }
    };
    compare_runs(&side(0), &side(1), width).expect("compare")
}

fn compare(a: &str, b: &str) -> Comparison {
    compare_paths(&trace(a), &trace(b), 600)
}

/// Category deltas and stack deltas each add up to the peak difference.
fn assert_adds_up(c: &Comparison, what: &str) {
    let cats: i64 = c.by_category.iter().map(|d| d.delta_bytes).sum();
    assert_eq!(cats, c.peak_delta_bytes, "{what}: categories");
    let stacks: i64 = c.by_stack.iter().map(|d| d.delta_bytes).sum::<i64>() + c.by_stack_rest_delta_bytes;
    assert_eq!(stacks, c.peak_delta_bytes, "{what}: stacks");
    for d in &c.by_stack {
        assert_eq!(d.delta_bytes, d.bytes_a - d.bytes_b, "{what}");
        match d.only_in {
            Some(Side::A) => assert_eq!(d.count_b, 0, "{what}"),
            Some(Side::B) => assert_eq!(d.count_a, 0, "{what}"),
            None => assert!(d.count_a > 0 && d.count_b > 0, "{what}"),
        }
    }
}

#[test]
fn checkpointing_pair_differs_by_the_oracles_difference_mostly_in_activations() {
    let c = compare("gpt_train.pickle", "gpt_train_ckpt.pickle");
    let want = real_peak("gpt_train.pickle") - real_peak("gpt_train_ckpt.pickle");
    assert_eq!(c.peak_delta_bytes, want);
    assert_eq!(c.a.peak_allocated_bytes, real_peak("gpt_train.pickle"));
    assert_adds_up(&c, "gpt pair");
    let act = c
        .by_category
        .iter()
        .find(|d| d.category == Category::Activation)
        .expect("activations");
    assert!(act.delta_bytes as f64 > 0.9 * want as f64, "{act:?} of {want}");
    assert!(c.headline.contains("activation"), "{}", c.headline);
    // Parameters and optimizer state are the same model's: no difference.
    for k in [Category::Parameter, Category::OptimizerState] {
        let d = c.by_category.iter().find(|d| d.category == k).expect("present");
        assert_eq!(d.delta_bytes, 0, "{k:?}");
    }
    // The runs come from different entry functions: their stacks still match on the frames
    // they share, so no stack is listed as one side's alone with the other side's twin.
    for d in c.by_stack.iter().filter(|d| d.only_in.is_some()) {
        assert!(
            !c.by_stack
                .iter()
                .any(|o| o.only_in.is_some() && o.only_in != d.only_in && o.stack == d.stack),
            "{:?} listed on both sides",
            d.stack
        );
    }
    // Both runs have iteration ranges: aligned iteration by iteration, five each.
    assert_eq!(c.timeline.axis, memlens_api::CompareAxis::Iteration);
    assert_eq!((c.a.iterations, c.b.iterations), (5, 5));
    assert_eq!(c.a.iteration_peaks.iter().max(), Some(&c.a.peak_allocated_bytes));
    assert!(c.timeline.allocated_a.iter().flatten().max() == Some(&c.a.peak_allocated_bytes));
}

#[test]
fn a_run_compared_with_itself_has_no_difference() {
    let c = compare("mlp_train.pickle", "mlp_train.pickle");
    assert_eq!(c.peak_delta_bytes, 0);
    assert!(c.by_stack.is_empty(), "{:?}", c.by_stack);
    assert!(c.by_category.iter().all(|d| d.delta_bytes == 0));
    assert_eq!(c.timeline.allocated_a, c.timeline.allocated_b);
}

#[test]
fn every_pair_of_committed_snapshots_adds_up() {
    let files: Vec<_> = snapshots_in(&traces_dir())
        .into_iter()
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // One of each family keeps the sweep short; shapes of older PyTorch versions included.
            [
                "mlp_train.pt113_shape",
                "leak.pt21_shape",
                "oom_fragmentation.pickle",
                "kv_cache",
                "gpt_b4.",
                "labels",
                "segments_only",
                "leak.two_devices",
            ]
            .iter()
            .any(|k| n.contains(k))
        })
        .collect();
    assert!(files.len() >= 8, "{files:?}");
    for a in &files {
        for b in &files {
            let c = compare_paths(a, b, 50);
            assert_adds_up(&c, &format!("{} vs {}", a.display(), b.display()));
            assert_eq!(c.timeline.allocated_a.len(), 50);
        }
    }
}

#[test]
fn four_ddp_ranks_in_one_run_each_peak_at_its_own_counter_and_the_worst_is_named() {
    // Out of order on purpose: the rank numbers come from the file names.
    let names = [
        "ddp_rank2.pickle.gz",
        "ddp_rank0.pickle.gz",
        "ddp_rank3.pickle.gz",
        "ddp_rank1.pickle.gz",
    ];
    let out = pipeline::run(
        names.iter().map(|n| Input::path(&trace(n))).collect(),
        Default::default(),
    )
    .expect("run");
    let run = out.run.expect("a run overview");
    assert_eq!(run.rank_source, RankSource::FileName);
    assert_eq!(run.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    for r in &run.ranks {
        let name = format!("ddp_rank{}.pickle.gz", r.rank);
        assert_eq!(r.file, trace(&name).display().to_string());
        assert_eq!(r.peak_allocated_bytes, real_peak(&name), "rank {}", r.rank);
        assert_eq!(
            r.peak_reserved_bytes,
            oracle_value(&oracle_for(&trace(&name)), "reserved_bytes.all.peak"),
            "rank {}",
            r.rank
        );
        assert_eq!(names[r.file_index], name);
    }
    assert_eq!(run.worst_rank, 3);
    assert_eq!(run.median_peak_bytes, real_peak("ddp_rank0.pickle.gz"));
    assert_eq!(
        run.spread_bytes,
        real_peak("ddp_rank3.pickle.gz") - real_peak("ddp_rank0.pickle.gz")
    );
    assert!(run.imbalanced);
    // The worst rank against a typical one: the longer sequences are activations and
    // temporaries; the model's parameters and optimizer state are the same on every rank.
    let c = compare("ddp_rank3.pickle.gz", "ddp_rank0.pickle.gz");
    assert_eq!(c.peak_delta_bytes, run.spread_bytes);
    assert_adds_up(&c, "ranks");
    for k in [Category::Parameter, Category::OptimizerState] {
        let d = c.by_category.iter().find(|d| d.category == k).expect("present");
        assert_eq!(d.delta_bytes, 0, "{k:?}");
    }
}

#[test]
fn one_snapshot_is_no_run_and_unnumbered_files_go_by_upload_order() {
    let one = pipeline::analyze_paths(&[trace("mlp_train.pickle")]).expect("run");
    assert!(one.run.is_none());
    let two = pipeline::analyze_paths(&[trace("leak.pickle"), trace("mlp_train.pickle")]).expect("run");
    let run = two.run.expect("overview");
    assert_eq!(run.rank_source, RankSource::UploadOrder);
    assert_eq!(run.ranks[1].file_index, 1);
    assert!(!run.imbalanced || run.max_peak_bytes - run.median_peak_bytes >= 64 << 20);
}

/// Each file after the first is imported while the one before it is analysed: a run's files
/// still come out in their order, each as it does alone, and a file at fault among them fails
/// the run naming it, whichever file was being imported then.
#[test]
fn a_runs_files_imported_ahead_come_out_in_order_each_as_alone() {
    let names = ["leak.pickle", "mlp_train.pickle", "gpt_train.pickle", "labels.pickle"];
    let together = pipeline::analyze_paths(&names.map(trace)).expect("run");
    assert_eq!(together.files.len(), names.len());
    for (i, name) in names.iter().enumerate() {
        let alone = pipeline::analyze_paths(&[trace(name)]).expect("alone");
        assert_eq!(together.files[i], alone.files[0], "{name}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("cut.pickle");
    let whole = std::fs::read(trace("mlp_train.pickle")).expect("read");
    std::fs::write(&bad, &whole[..whole.len() / 2]).expect("write");
    for run in [
        vec![trace("leak.pickle"), bad.clone(), trace("mlp_train.pickle")],
        vec![trace("leak.pickle"), trace("mlp_train.pickle"), bad.clone()],
    ] {
        match pipeline::analyze_paths(&run) {
            Err(pipeline::PipelineError::Input { file, .. }) => assert_eq!(file, bad.display().to_string()),
            other => panic!("a cut file in a run: {:?}", other.map(|o| o.files.len())),
        }
    }
}

#[test]
fn the_diff_of_the_checkpointing_pair_matches_its_reviewed_snapshot() {
    let mut c = compare_paths(&trace("gpt_train.pickle"), &trace("gpt_train_ckpt.pickle"), 24);
    for side in [&mut c.a, &mut c.b] {
        side.label = side.file.rsplit('/').next().unwrap_or_default().to_owned();
        side.file = side.label.clone();
    }
    c.headline = c.headline.replace(&trace("").display().to_string(), "");
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path("../snapshots");
    settings.bind(|| insta::assert_json_snapshot!("diff_gpt_train_vs_ckpt", c));
}

#[test]
fn a_variable_length_pair_s_iteration_peaks_are_each_step_s_whole_peak() {
    // Forty steps of their own batch × sequence, without and with expandable segments.
    let c = compare_paths(
        &trace("anatomy/varlen_plain.pickle.gz"),
        &trace("anatomy/varlen_expandable.pickle.gz"),
        600,
    );
    for r in [&c.a, &c.b] {
        assert_eq!((r.iterations, r.iteration_peaks.len()), (40, 40));
        assert_eq!(r.iteration_peaks.iter().max(), Some(&r.peak_allocated_bytes));
        let lowest = r.iteration_peaks.iter().min().copied().unwrap_or(0);
        assert!(lowest * 4 < r.peak_allocated_bytes, "{:?}", r.iteration_peaks);
    }
    // The same workload step by step: the allocator setting changes no step's allocated peak.
    assert_eq!(c.a.iteration_peaks, c.b.iteration_peaks);
    assert_eq!(c.timeline.axis, memlens_api::CompareAxis::Iteration);
    assert!(
        c.headline
            .starts_with("expandable segments (on in B) cut the fragmentation at the peak"),
        "{}",
        c.headline
    );
}
