//! The GB-scale benches' generator (`scripts/gen-snapshot`) writes what it says it writes: a
//! small run of it, analysed, has exactly the peak, reservation and leak it declares (so the
//! figures measured on its 2 GB files are figures of a consistent snapshot, and memlens reads
//! the pickler's shape it imitates exactly).

use std::process::Command;

use memlens_core::pipeline::summarize_file;
use memlens_tests::repo_root;

/// Runs `scripts/gen-snapshot` with `args` into `path`: what it declares.
fn generate(path: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new("python3")
        .arg(repo_root().join("scripts/gen-snapshot"))
        .arg(path)
        .args(args)
        .output()
        .expect("python3 runs scripts/gen-snapshot");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("the generator's JSON")
}

/// Both shapes it writes: two frames an entry shared by every activation (the smallest entries,
/// the most for a file's size), and `--frames 8`: a stack of eight frames, fetched by
/// LONG_BINGET, for each of the 64 activations and the leak (entries of a real trace's size).
#[test]
fn a_generated_snapshot_has_the_peak_and_leak_its_generator_declares() {
    for (args, stacks, leak_frames) in [
        (&["--entries", "60000"][..], 2, 2),
        (&["--entries", "60000", "--frames", "8"][..], 65, 8),
    ] {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("generated.pickle");
        let declared = generate(&path, args);
        let says = |key: &str| {
            declared[key]
                .as_i64()
                .unwrap_or_else(|| panic!("no {key} in {declared}"))
        };

        let summary = summarize_file(&path).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let [d] = summary.devices.as_slice() else {
            panic!("{args:?}: one device, not {}", summary.devices.len())
        };
        assert_eq!(d.event_count as i64, says("entries"), "{args:?}");
        assert_eq!(d.peak_allocated_bytes, says("peak_allocated_bytes"), "{args:?}");
        assert_eq!(d.peak_reserved_bytes, says("reserved_bytes"), "{args:?}");
        assert_eq!(d.final_allocated_bytes, says("leaked_bytes"), "{args:?}");
        // The trace's stacks and the segment's blocks' empty one.
        assert_eq!(summary.source.stack_count, stacks + 1, "{args:?}");
        let [leak] = d.leaks.as_slice() else {
            panic!("{args:?}: one leak site: {:#?}", d.leaks)
        };
        assert_eq!(leak.bytes_per_iteration, says("leak_bytes_per_iteration"));
        assert_eq!(leak.bytes, says("leaked_bytes"));
        assert_eq!(leak.count as i64, says("iterations"));
        assert_eq!(leak.stack.len(), leak_frames, "{args:?}: {:#?}", leak.stack);
    }
}

/// A long run with each iteration's phases named (`--annotate`: forward, backward, the
/// optimizer step): every iteration's activations are placed as activations, every step's
/// leak as optimizer state — found per allocation with a search over thousands of iterations
/// (a scan of them all per allocation took 28 s on 5 M entries).
#[test]
fn an_annotated_long_run_places_activations_and_step_state_by_its_phases() {
    use memlens_api::{Category, CategoryRule};
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("annotated.pickle");
    let declared = generate(&path, &["--entries", "200000", "--annotate"]);
    let iterations = declared["iterations"].as_u64().expect("iterations") as usize;
    assert!(iterations > 1000, "{iterations} iterations");

    let summary = summarize_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let d = &summary.devices[0];
    // Each iteration: its own range, forward, backward and the step.
    assert_eq!(d.phases.len(), 4 * iterations);
    let category = |c: Category| {
        d.categories
            .iter()
            .find(|s| s.category == c)
            .unwrap_or_else(|| panic!("no {c:?} in {:#?}", d.categories))
    };
    let activations = category(Category::Activation);
    assert_eq!(activations.count, 64 * iterations);
    assert_eq!(activations.max_bytes, 64 * (8 << 20));
    assert!(activations
        .rules
        .iter()
        .all(|r| r.rule == CategoryRule::ForwardFreedInBackward));
    let state = category(Category::OptimizerState);
    assert_eq!(state.count, iterations);
    assert_eq!(state.max_bytes, declared["leaked_bytes"].as_i64().expect("leaked"));
}

/// A training-like loop (`--steps`) whose steps only one kind of evidence tells apart: step
/// ranges, AdamW steps at each step's end (whose temporaries, freed at the step's end, carry
/// the optimizer's stack and are no second step), or only the allocation rhythm (AdamW's frames
/// scattered through backward, an optimizer stepped from gradient hooks: evidence that yields
/// more steps than the loop has, so the rhythm is read instead). Each finds the loop's steps,
/// one per step, and the planted leak to the byte. 3,000 steps: analysed by a scan of every
/// step for each allocation (as `locate` did without its index for these shapes), this took
/// minutes; it takes a second or two in a debug build.
#[test]
fn a_long_loop_has_its_steps_and_its_leak_found_from_every_kind_of_evidence() {
    use memlens_api::IterationEvidence;
    for (evidence, found_by) in [
        ("ranges", IterationEvidence::StepRanges),
        ("optimizer", IterationEvidence::OptimizerSteps),
        ("rhythm", IterationEvidence::AllocationRhythm),
    ] {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("loop.pickle");
        let declared = generate(&path, &["--steps", "3000", "--evidence", evidence]);
        let says = |key: &str| {
            declared[key]
                .as_i64()
                .unwrap_or_else(|| panic!("no {key} in {declared}"))
        };
        let summary = summarize_file(&path).unwrap_or_else(|e| panic!("{evidence}: {e}"));
        let d = &summary.devices[0];
        assert_eq!(d.event_count as i64, says("entries"), "{evidence}");
        assert_eq!(d.peak_allocated_bytes, says("peak_allocated_bytes"), "{evidence}");
        assert_eq!(d.iterations.evidence, found_by, "{evidence}");
        assert_eq!(d.iterations.count as i64, says("steps"), "{evidence}");
        let leak = d.leaks.first().unwrap_or_else(|| panic!("{evidence}: no leak"));
        assert_eq!(leak.bytes, says("leaked_bytes"), "{evidence}");
        assert_eq!(leak.bytes_per_iteration, says("leak_bytes_per_iteration"), "{evidence}");
        assert_eq!(
            leak.stack.first().map(String::as_str),
            declared["leak_frame"].as_str(),
            "{evidence}"
        );
    }
}
