//! memlens-core's analyses on small hand-built tables, where every expected number can be worked out by
//! hand: usage and peaks, lifetimes, the segment-map replay, fragmentation, OOM classification
//! and leak candidates.

use memlens_api::{OomCause, SourceInfo};

use memlens_core::analysis::categories::FrameRules;
use memlens_core::analysis::fragmentation::fragmentation_index;
use memlens_core::analysis::leaks::leak_candidates;
use memlens_core::analysis::lifetimes::allocation_lifetimes;
use memlens_core::analysis::oom_cause::{classify, remedies, OomFacts};
use memlens_core::analysis::segment_map::segment_map_at;
use memlens_core::analysis::usage::usage_over_time;
use memlens_core::analysis::DeviceEvents;
use memlens_core::report::analyze_device;
use memlens_core::stacks::StackResolver;
use memlens_core::tables::{Action, BlockState, SnapshotColumns, SnapshotTables};

const MIB: i64 = 1 << 20;
const SEG: i64 = 0x7f00_0000_0000;

/// A one-device trace built entry by entry, with the final segment state given as blocks.
struct Trace {
    c: SnapshotColumns,
    t: i64,
}

impl Trace {
    fn new() -> Trace {
        Trace {
            c: SnapshotColumns {
                source: SourceInfo {
                    has_time_us: true,
                    ..SourceInfo::default()
                },
                ..SnapshotColumns::default()
            },
            t: 1_000_000,
        }
    }
    fn stack(&mut self, function: &str) -> u32 {
        let f = self.c.frames.intern_frame(function, "train.py", 10);
        self.c.frames.intern_stack(&[f])
    }
    /// A stack of `(function, file)` frames, innermost first.
    fn stack_of(&mut self, frames: &[(&str, &str)]) -> u32 {
        let ids: Vec<u32> = frames
            .iter()
            .map(|(function, file)| self.c.frames.intern_frame(function, file, 10))
            .collect();
        self.c.frames.intern_stack(&ids)
    }
    fn entry(&mut self, action: Action, addr: i64, size: i64, stack: u32) -> &mut Self {
        self.t += 10;
        self.c.trace.push(action, addr, size, 0, self.t, stack);
        self
    }
    /// The final state: one segment at `SEG` of `total` bytes made of `blocks`
    /// (`(size, requested, state)` in address order).
    fn segment(&mut self, total: i64, blocks: &[(i64, i64, BlockState)]) -> &mut Self {
        let seg = self.c.segments.len() as u32;
        let allocated: i64 = blocks.iter().filter(|b| b.2 != BlockState::Inactive).map(|b| b.0).sum();
        let requested: i64 = blocks.iter().filter(|b| b.2 != BlockState::Inactive).map(|b| b.1).sum();
        self.c.segments.push(
            0,
            SEG,
            total,
            allocated,
            allocated,
            requested,
            0,
            "large".into(),
            (0, 0),
            false,
            0,
        );
        let mut addr = SEG;
        for &(size, req, state) in blocks {
            self.c.blocks.push(0, seg, addr, size, req, state, 0);
            addr += size;
        }
        self
    }
    fn tables(mut self) -> SnapshotTables {
        let n = self.c.trace.len() as u32;
        self.c.device_ranges = vec![(0, (0, n))];
        self.c.into_tables().expect("tables")
    }
}

/// segment_alloc 2 MiB; alloc A (1000 B → a 1 KiB block) and B (512 B) in it; free A.
fn two_allocations() -> SnapshotTables {
    let mut tr = Trace::new();
    let s = tr.stack("forward");
    tr.entry(Action::SegmentAlloc, SEG, 2 * MIB, s)
        .entry(Action::Alloc, SEG, 1000, s)
        .entry(Action::Alloc, SEG + 1024, 512, s)
        .entry(Action::FreeRequested, SEG, 1000, s)
        .entry(Action::FreeCompleted, SEG, 1000, s)
        .segment(
            2 * MIB,
            &[
                (1024, 0, BlockState::Inactive),
                (512, 512, BlockState::ActiveAllocated),
                (2 * MIB - 1536, 0, BlockState::Inactive),
            ],
        );
    tr.tables()
}

#[test]
fn usage_counts_requested_bytes_and_reserved_segments() {
    let t = two_allocations();
    let ev = DeviceEvents::new(&t, 0).expect("events");
    let u = usage_over_time(&t, &ev).expect("usage");
    assert_eq!(u.allocated_from(0).collect::<Vec<_>>(), [0, 1000, 1512, 1512, 512]);
    assert_eq!(u.reserved.values().collect::<Vec<_>>(), vec![2 * MIB; 5]);
    assert_eq!(u.reserved.changes().collect::<Vec<_>>(), vec![(0, 2 * MIB)]);
    assert_eq!((u.peak_allocated, u.peak_allocated_idx), (1512, Some(2)));
    assert_eq!((u.initial_allocated, u.initial_reserved()), (0, 0));
    assert_eq!((u.final_allocated, u.final_reserved()), (512, 2 * MIB));
}

#[test]
fn lifetimes_pair_allocs_with_their_completed_frees() {
    let t = two_allocations();
    let ev = DeviceEvents::new(&t, 0).expect("events");
    let lt = allocation_lifetimes(&t, &ev).expect("lifetimes");
    assert_eq!(lt.height(), 2);
    let alloc = lt
        .column("alloc_idx")
        .and_then(|c| c.i32().cloned())
        .expect("alloc_idx");
    let free = lt.column("free_idx").and_then(|c| c.i32().cloned()).expect("free_idx");
    let pairs: Vec<(Option<i32>, Option<i32>)> = alloc.iter().zip(free.iter()).collect();
    assert!(pairs.contains(&(Some(1), Some(4))), "{pairs:?}");
    assert!(pairs.contains(&(Some(2), Some(-1))), "{pairs:?}");
}

#[test]
fn the_segment_map_replays_back_from_the_final_state() {
    let t = two_allocations();
    let ev = DeviceEvents::new(&t, 0).expect("events");
    // At the end: the snapshot itself.
    let end = segment_map_at(&t, &ev, Some(4)).expect("map");
    assert_eq!(end.reserved_bytes, 2 * MIB);
    assert_eq!(end.active_bytes, 512);
    assert_eq!(end.largest_free_block_bytes, 2 * MIB - 1536);
    // After B's alloc, A's 1 KiB block is live again and nothing is free before B.
    let peak = segment_map_at(&t, &ev, Some(2)).expect("map");
    assert_eq!(peak.active_bytes, 1536);
    assert_eq!(peak.free_bytes, 2 * MIB - 1536);
    assert_eq!(peak.rounding_waste_bytes, 24);
    // Before the first entry the segment did not exist yet.
    let before = segment_map_at(&t, &ev, None).expect("map");
    assert_eq!((before.reserved_bytes, before.segments.len()), (0, 0));
}

#[test]
fn fragmentation_at_the_peak_and_its_index() {
    let t = two_allocations();
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    let a = analyze_device(&t, 0, &stacks, &FrameRules::default()).expect("analysis");
    assert_eq!(a.summary.peak_allocated_bytes, 1512);
    assert_eq!(a.summary.peak_reserved_bytes, 2 * MIB);
    let f = a.summary.fragmentation_at_peak.expect("at the peak");
    assert_eq!(f.reserved_free_bytes, 2 * MIB - 1536);
    assert_eq!(f.largest_free_block_bytes, 2 * MIB - 1536);
    assert_eq!(f.fragmentation_index, 0.0);
    // Free memory in two equal blocks: half of it is out of reach of one request.
    assert!((fragmentation_index(200, 100) - 0.5).abs() < 1e-12);
    assert_eq!(fragmentation_index(0, 0), 0.0);
}

#[test]
fn ooms_are_told_apart_by_what_stood_in_the_way() {
    let at = |reserved_free: i64, largest: i64, device_free: i64| OomFacts {
        requested: 2 * MIB,
        allocated: Some(3 * MIB),
        reserved: Some(3 * MIB + reserved_free),
        reserved_free: Some(reserved_free),
        largest_free_block: Some(largest),
        device_free: Some(device_free),
        ..Default::default()
    };
    // Enough free in the segments, but no block fits: fragmentation.
    let split = at(3 * MIB, MIB, 0);
    assert_eq!(classify(&split), OomCause::Fragmentation);
    let r = remedies(
        OomCause::Fragmentation,
        &split,
        memlens_api::OomPhase::Unknown,
        None,
        None,
    );
    assert!(r[0].note.contains("expandable_segments:True"), "{:?}", r[0]);
    // The device had it free, the process was capped.
    assert_eq!(classify(&at(0, 0, 10 * MIB)), OomCause::Limit);
    // Neither: live tensors filled it.
    assert_eq!(classify(&at(MIB, MIB, 0)), OomCause::Capacity);
}

#[test]
fn an_oom_entry_is_explained_with_the_state_at_the_failure() {
    let mut tr = Trace::new();
    let s = tr.stack("forward");
    tr.entry(Action::SegmentAlloc, SEG, 4 * MIB, s);
    // Four 1 MiB tensors, every other one freed: 2 MiB free in two 1 MiB holes.
    for k in 0..4 {
        tr.entry(Action::Alloc, SEG + k * MIB, MIB, s);
    }
    for k in [0, 2] {
        tr.entry(Action::FreeRequested, SEG + k * MIB, MIB, s)
            .entry(Action::FreeCompleted, SEG + k * MIB, MIB, s);
    }
    tr.entry(Action::Oom, 0, 2 * MIB, s);
    tr.segment(
        4 * MIB,
        &[
            (MIB, 0, BlockState::Inactive),
            (MIB, MIB, BlockState::ActiveAllocated),
            (MIB, 0, BlockState::Inactive),
            (MIB, MIB, BlockState::ActiveAllocated),
        ],
    );
    let t = tr.tables();
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    let a = analyze_device(&t, 0, &stacks, &FrameRules::default()).expect("analysis");
    assert_eq!(a.summary.oom_count, 1);
    let o = &a.summary.ooms[0];
    assert_eq!(o.requested_bytes, 2 * MIB);
    assert_eq!(o.reserved_free_bytes, 2 * MIB);
    assert_eq!(o.largest_free_block_bytes, MIB);
    assert_eq!(o.cause, OomCause::Fragmentation);
}

#[test]
fn survivors_of_every_iteration_are_a_leak_and_one_off_state_is_not() {
    let mut tr = Trace::new();
    let (weights, temp, leak) = (tr.stack("init"), tr.stack("forward"), tr.stack("history.append"));
    tr.entry(Action::Alloc, 0x10_0000, 8 * MIB, weights);
    let mut starts = Vec::new();
    for i in 0..6i64 {
        starts.push(tr.t + 1);
        let a = 0x100_0000 + i * 0x10_0000;
        tr.entry(Action::Alloc, a, MIB, temp)
            .entry(Action::Alloc, a + MIB, 4096, leak)
            .entry(Action::FreeCompleted, a, MIB, temp);
    }
    let t = tr.tables();
    let ev = DeviceEvents::new(&t, 0).expect("events");
    let lt = allocation_lifetimes(&t, &ev).expect("lifetimes");
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    // Each step holds its three entries (10 µs apart).
    let steps: Vec<(i64, i64)> = starts.iter().map(|&s| (s, s + 29)).collect();
    let (leaks, note) = leak_candidates(&ev, &lt, Some(&steps), &stacks).expect("leaks");
    assert_eq!(note, None);
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert_eq!(leaks[0].stack_id, Some(leak));
    assert_eq!(
        (leaks[0].bytes, leaks[0].count, leaks[0].iterations_seen),
        (6 * 4096, 6, 6)
    );
    assert_eq!(leaks[0].bytes_per_iteration, 4096);
}

/// A run without iterations: `bursts` of `(stack, count, pause after it in µs)`, each made at
/// once, all kept to the end.
fn run_without_iterations(bursts: &[(&str, usize, i64)]) -> SnapshotTables {
    let mut tr = Trace::new();
    let mut addr = 0x100_0000i64;
    for &(function, count, pause) in bursts {
        let s = tr.stack(function);
        for _ in 0..count {
            tr.entry(Action::Alloc, addr, 4096, s);
            addr += 4096;
        }
        tr.t += pause;
    }
    tr.tables()
}

fn leaks_of(t: &SnapshotTables) -> (Vec<memlens_api::LeakCandidate>, Option<String>) {
    let ev = DeviceEvents::new(t, 0).expect("events");
    let lt = allocation_lifetimes(t, &ev).expect("lifetimes");
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    leak_candidates(&ev, &lt, None, &stacks).expect("leaks")
}

#[test]
fn bursts_kept_to_the_end_are_not_a_leak_and_say_why() {
    // Three bursts from three call sites, and three from one helper: no loop, no growth.
    for bursts in [
        vec![
            ("build_model", 10, 700_000),
            ("make_buffers", 4, 1_900_000),
            ("make_cache", 20, 0),
        ],
        vec![("helper", 10, 700_000), ("helper", 4, 1_900_000), ("helper", 20, 0)],
    ] {
        let (leaks, note) = leaks_of(&run_without_iterations(&bursts));
        assert!(leaks.is_empty(), "{bursts:?}: {leaks:?}");
        assert!(
            note.as_deref()
                .is_some_and(|n| n.contains("leak detection needs a loop")),
            "{note:?}"
        );
    }
}

#[test]
fn survivors_growing_at_many_moments_are_a_leak_without_iterations() {
    // One stack keeps a tensor at each of 6 moments spread irregularly over the run (no rhythm
    // to take iterations from); a one-off burst before it.
    let mut bursts = vec![("setup", 8, 300_000)];
    for pause in [1_000_000, 3_000_000, 500_000, 2_000_000, 1_500_000, 0] {
        bursts.push(("history.append", 1, pause));
    }
    let (leaks, note) = leaks_of(&run_without_iterations(&bursts));
    assert!(note.is_some());
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    let l = &leaks[0];
    assert_eq!(l.stack, vec!["train.py:10 history.append".to_owned()]);
    assert_eq!((l.count, l.bytes, l.iterations_seen), (6, 6 * 4096, 6));
}

#[test]
fn a_first_step_failing_in_backward_is_read_from_its_frames_alone() {
    // A model made on the device (no `.to()`), its batch made by the script, a forward through
    // `nn.Module`, then backward on the autograd thread (no Python frames): the first gradient
    // is kept, a temporary freed, and the next gradient fails. No ranges anywhere.
    let mut tr = Trace::new();
    let init = tr.stack_of(&[("__init__", "torch/nn/modules/linear.py"), ("main", "train.py")]);
    let batch = tr.stack_of(&[("main", "train.py")]);
    let forward = tr.stack_of(&[
        ("forward", "model.py"),
        ("_call_impl", "torch/nn/modules/module.py"),
        ("main", "train.py"),
    ]);
    let autograd = tr.stack_of(&[]);
    let (p, k) = (4 * MIB, 64 << 10);
    tr.entry(Action::SegmentAlloc, SEG, 64 * MIB, init);
    let mut at = SEG;
    let mut blocks = Vec::new();
    let mut put = |tr: &mut Trace, size: i64, stack: u32, blocks: &mut Vec<(i64, i64, BlockState)>| {
        tr.entry(Action::Alloc, at, size, stack);
        blocks.push((size, size, BlockState::ActiveAllocated));
        at += size;
    };
    for _ in 0..3 {
        put(&mut tr, p, init, &mut blocks);
    }
    put(&mut tr, k, batch, &mut blocks);
    for _ in 0..3 {
        put(&mut tr, 2 * p, forward, &mut blocks);
    }
    put(&mut tr, p, autograd, &mut blocks);
    tr.entry(Action::Alloc, at, 2 * MIB, autograd)
        .entry(Action::FreeRequested, at, 2 * MIB, autograd)
        .entry(Action::FreeCompleted, at, 2 * MIB, autograd)
        .entry(Action::Oom, 0, p, autograd);
    let used: i64 = blocks.iter().map(|b| b.0).sum();
    blocks.push((64 * MIB - used, 0, BlockState::Inactive));
    tr.segment(64 * MIB, &blocks);
    let t = tr.tables();
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    let a = analyze_device(&t, 0, &stacks, &FrameRules::default()).expect("analysis");
    let o = &a.summary.ooms[0];
    assert_eq!(o.phase, memlens_api::OomPhase::Backward);
    let live = |c: memlens_api::Category| {
        o.live_categories
            .iter()
            .filter(|x| x.category == c)
            .map(|x| x.bytes)
            .sum::<i64>()
    };
    use memlens_api::Category as C;
    assert_eq!(live(C::Parameter), 3 * p, "{:?}", o.live_categories);
    assert_eq!(live(C::Input), k);
    assert_eq!(live(C::Activation), 6 * p);
    assert_eq!(live(C::Gradient), p);
    assert_eq!(live(C::Other) + live(C::Temporary) + live(C::Cache), 0);
}

#[test]
fn sgd_steps_that_allocate_nothing_are_found_by_their_zero_grads_on_any_machine() {
    // Three steps of SGD with momentum as a Windows run records them: the first step makes the
    // momentum buffer, the later ones allocate nothing; each zero_grad frees the gradient.
    use memlens_core::analysis::phases::with_inferred_optimizer_steps;
    let mut tr = Trace::new();
    let forward = tr.stack("forward");
    let momentum = tr.stack_of(&[("_init_group", r"C:\venv\Lib\site-packages\torch\optim\sgd.py")]);
    let zero_grad = tr.stack_of(&[("zero_grad", r"C:\venv\Lib\site-packages\torch\optim\optimizer.py")]);
    for step in 0..3i64 {
        let a = 0x100_0000 + step * 0x10_0000;
        tr.entry(Action::Alloc, a, MIB, forward)
            .entry(Action::Alloc, a + MIB, 4096, 0)
            .entry(Action::FreeCompleted, a, MIB, forward);
        if step == 0 {
            tr.entry(Action::Alloc, 0x10_0000, 4096, momentum);
        }
        tr.entry(Action::FreeCompleted, a + MIB, 4096, zero_grad);
    }
    let t = tr.tables();
    let ev = DeviceEvents::new(&t, 0).expect("events");
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    let names: Vec<String> = with_inferred_optimizer_steps(&[], &ev, &stacks)
        .into_iter()
        .map(|p| p.name)
        .collect();
    let (step, by_zero_grad, zero) = (
        "Optimizer.step#inferred from optimizer frames",
        "Optimizer.step#inferred from the zero_grad after it",
        "Optimizer.zero_grad#inferred from optimizer frames",
    );
    assert_eq!(names, [step, zero, by_zero_grad, zero, by_zero_grad, zero]);
}
