//! XLA's out-of-memory texts as JAX users posted them (traces/jax-texts, SOURCES.md names each
//! post): every wording and dump shape is read to its printed figures, the same failure
//! printed twice counts once, the allocator's "not a failure" retries count not at all, and
//! each is explained in JAX's terms with remedies and their numbers.

use memlens_api::{OomBackend, OomCause, OomExplanation, RemedyAction, XlaOomText, XlaOomWording};
use memlens_core::pipeline::summarize_file;
use memlens_tests::trace;

fn ooms(name: &str) -> Vec<OomExplanation> {
    let s = summarize_file(&trace(&format!("jax-texts/{name}.txt"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    s.devices.into_iter().flat_map(|d| d.ooms).collect()
}

fn one(name: &str) -> (OomExplanation, XlaOomText) {
    let mut all = ooms(name);
    assert_eq!(all.len(), 1, "{name}: {all:#?}");
    let o = all.remove(0);
    let text = o.text.clone().expect("read from text");
    assert_eq!(text.backend, OomBackend::Xla, "{name}");
    (o, text.xla.expect("XLA's facts"))
}

fn exception(o: &OomExplanation) -> Option<&str> {
    o.text.as_ref().and_then(|t| t.exception.as_deref())
}

fn actions(o: &OomExplanation) -> Vec<RemedyAction> {
    o.remedies.iter().map(|r| r.action).collect()
}

#[test]
fn each_wording_gives_its_request_and_exception() {
    for (name, requested, exc, wording) in [
        (
            "xla-runtime-error-alphafold",
            7_406_166_528,
            Some("jaxlib.xla_extension.XlaRuntimeError"),
            XlaOomWording::OutOfMemory,
        ),
        (
            "runtime-error-colabfold-65",
            14_285_187_448,
            Some("RuntimeError"),
            XlaOomWording::OutOfMemory,
        ),
        (
            "resource-exhausted-wrapped-jax-788",
            5_520_758_552,
            None,
            XlaOomWording::OutOfMemory,
        ),
        (
            "out-of-memory-allocating-llnerf-9",
            20_029_400_304,
            Some("jaxlib.xla_extension.XlaRuntimeError"),
            XlaOomWording::OutOfMemory,
        ),
        (
            "bare-resource-exhausted-jaxline-11",
            285_212_672,
            None,
            XlaOomWording::OutOfMemory,
        ),
        (
            "failed-to-allocate-request-mesh-transformer-66",
            33_554_432,
            Some("RuntimeError"),
            XlaOomWording::FailedToAllocateRequest,
        ),
        (
            "tpu-allocation-would-exceed-openxla-docs",
            107_374_182_400,
            Some("XlaRuntimeError"),
            XlaOomWording::AllocationWouldExceedMemory,
        ),
    ] {
        let (o, x) = one(name);
        assert_eq!(o.requested_bytes, requested, "{name}");
        assert_eq!(exception(&o), exc, "{name}");
        assert_eq!(x.wording, wording, "{name}");
        assert!(
            o.remedy.starts_with("XLA ran out of memory allocating"),
            "{name}: {}",
            o.remedy
        );
        assert!(actions(&o).contains(&RemedyAction::SmallerBatch), "{name}");
    }
}

#[test]
fn the_log_line_and_the_exception_are_one_failure() {
    // XLA's `Execution of replica 0 failed:` line, then the Python RuntimeError: one OOM seen twice.
    let (o, _) = one("failed-to-allocate-request-mesh-transformer-66");
    assert_eq!(exception(&o), Some("RuntimeError"));
    assert_eq!(
        o.stack.last().map(String::as_str),
        Some("/drive4/user1/GPT_J/mesh-transformer-jax/mesh_transformer/transformer_shard.py:272:__init__")
    );
    // Three retries the allocator says are not failures, and the one error.
    let (o, x) = one("bfc-not-a-failure-then-oom-nemos-345");
    assert_eq!(o.requested_bytes, 3_199_993_600);
    assert_eq!(x.allocator, None, "a retry names no failure's allocator");
}

#[test]
fn the_buffer_assignment_gives_the_program_s_needs_and_the_remedies_their_numbers() {
    let (o, x) = one("xla-runtime-error-buffer-assignment-afprofile");
    let b = x.buffer_assignment.expect("stats");
    let mib = |v: f64| (v * (1u64 << 20) as f64).round() as i64;
    let gib = |v: f64| (v * (1u64 << 30) as f64).round() as i64;
    assert_eq!(b.parameter_bytes, Some(mib(372.76)));
    assert_eq!(b.constant_bytes, Some((48.5 * 1024.0) as i64));
    assert_eq!(b.maybe_live_out_bytes, Some(gib(9.64)));
    assert_eq!(b.preallocated_temp_bytes, Some(gib(4.44)));
    assert_eq!(b.total_bytes, Some(gib(14.44)));
    assert_eq!(b.total_fragmentation_bytes, Some(mib(680.30)));
    let by = |a: RemedyAction| o.remedies.iter().find(|r| r.action == a).map(|r| r.saves_bytes);
    assert_eq!(
        by(RemedyAction::ActivationCheckpointing),
        Some(gib(4.44) / 2),
        "half the temporaries"
    );
    assert_eq!(by(RemedyAction::Bf16Activations), Some(gib(4.44) / 2));
    assert_eq!(
        by(RemedyAction::ShardStates),
        Some(mib(372.76) - mib(372.76) / 4),
        "over 4 devices"
    );
    assert_eq!(
        by(RemedyAction::DonateBuffers),
        Some(mib(372.76)),
        "the inputs, at most the outputs"
    );
    let (_, x) = one("xla-runtime-error-peak-buffers-jax-13428");
    let peak = &x.buffer_assignment.expect("stats").peak_buffers;
    assert_eq!(peak.len(), 2);
    assert_eq!(peak[0].bytes, 6 << 20);
    assert_eq!(peak[0].shape.as_deref(), Some("f32[4096,128,3]"));
    assert_eq!(
        peak[0].op.as_deref(),
        Some("jit(concatenate)/jit(main)/concatenate[dimension=0]")
    );
    assert_eq!(
        peak[0].source.as_deref(),
        Some("/media/gccrcv/Data/Opensources/multinerf/internal/models.py:689")
    );
    assert_eq!(
        (peak[1].bytes, peak[1].op.as_deref()),
        (384 << 10, Some("entry parameter"))
    );
}

#[test]
fn the_bfc_dump_is_read_before_the_error_it_explains() {
    let (o, x) = one("bfc-fragmentation-line-t5x-870");
    assert_eq!(
        o.requested_bytes, 29_995_136_128,
        "the error's figure, not the allocator's rounded one"
    );
    assert_eq!(x.allocator.as_deref(), Some("GPU_0_bfc"));
    assert_eq!(x.memory_map_in_use, Some(2.0 / 100.0), "2 marks of 100 in use");
    assert_eq!(
        x.buffer_assignment.as_ref().and_then(|b| b.preallocated_temp_bytes),
        Some((27.93 * (1u64 << 30) as f64).round() as i64)
    );
    assert_eq!(
        o.cause,
        OomCause::Limit,
        "a pool 98 % free that cannot give the request: larger than the pool"
    );
    assert_eq!(actions(&o)[0], RemedyAction::RaiseCap);
    let (o, x) = one("bfc-stats-reactant-2632");
    let gib = |v: f64| (v * (1u64 << 30) as f64).round() as i64;
    assert_eq!(
        (x.limit_bytes, x.in_use_bytes, x.max_in_use_bytes),
        (Some(gib(89.77)), Some(gib(81.0)), Some(gib(81.0)))
    );
    assert_eq!(
        (x.num_allocs, x.max_alloc_size_bytes, x.largest_free_block_bytes),
        (Some(3), Some(gib(27.0)), Some(0))
    );
    assert_eq!(x.pool_bytes, Some(gib(89.77)));
    assert_eq!(o.cause, OomCause::Limit);
    assert!(o.text.as_ref().expect("text").missing.is_empty() || o.requested_bytes == 0);
    let (o, x) = one("bfc-bin-table-tensorflow-56019");
    assert_eq!(x.bins.len(), 5);
    let b = &x.bins[3];
    assert_eq!((b.bin_bytes, b.total_chunks, b.chunks_in_use), (33_554_432, 14, 13));
    assert_eq!(
        (b.allocated_bytes, b.in_use_bytes),
        (
            ((650.33 * (1u64 << 20) as f64).round()) as i64,
            ((604.50 * (1u64 << 20) as f64).round()) as i64
        )
    );
    assert_eq!(
        o.allocated_bytes,
        x.bins.iter().map(|b| b.in_use_bytes).sum::<i64>(),
        "in use summed over the bins"
    );
}

#[test]
fn the_driver_refusing_the_pool_is_another_process() {
    let (o, x) = one("failed-to-allocate-from-device-jax-788");
    assert_eq!(x.driver_refused_bytes, Some(3_640_655_872));
    assert_eq!(x.wording, XlaOomWording::FailedToAllocateRequest);
    assert_eq!(o.cause, OomCause::OtherProcesses);
    let first = &o.remedies[0];
    assert_eq!(first.action, RemedyAction::FreeOtherProcesses);
    assert!(
        first.note.contains("XLA_PYTHON_CLIENT_PREALLOCATE=false"),
        "{}",
        first.note
    );
}

#[test]
fn uploaded_with_the_profile_taken_at_it_the_error_says_what_was_live() {
    // What memlens.jax.on_oom uploads: the error's text and the device memory profile.
    let files = [
        trace("jax-texts/xla-runtime-error-alphafold.txt"),
        trace("jax-cpu/jax_cpu_eager.prof"),
    ];
    let out = memlens_core::pipeline::analyze_paths(&files).expect("analyses");
    let text = out.files.iter().find(|f| f.file.ends_with(".txt")).expect("the text");
    let o = &text.devices[0].ooms[0];
    let by = |c: memlens_api::Category| o.live_categories.iter().find(|x| x.category == c).map(|x| x.bytes);
    // The eager profile's trees, to the byte (traces/jax-cpu/jax_cpu_eager.truth.json).
    assert_eq!(by(memlens_api::Category::Parameter), Some(395_520));
    assert_eq!(by(memlens_api::Category::OptimizerState), Some(791_044));
    assert_eq!(by(memlens_api::Category::Gradient), Some(395_520));
    assert!(!o.live_stacks.is_empty());
    assert!(
        o.remedy
            .contains("The device memory profile taken at the error (jax_cpu_eager.prof)"),
        "{}",
        o.remedy
    );
    assert_eq!(text.devices[0].verdict, o.remedy);
}
