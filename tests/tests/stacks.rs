//! Readable stacks on real snapshots: with C++ frames (`stacks="all"`: the shared MLP run and a
//! Hugging Face Llama captured on the H200, traces/capture/hf_llama.py) no list starts with the
//! allocator, the interpreter or the dispatcher; a model's entries name its code, not
//! `nn.Module` plumbing; every empty stack says why; a snapshot of four GPUs whose only OOM is on
//! one of them opens there.

use memlens_api::{AnalyzeOutput, DeviceSummary, NoStackReason};
use memlens_core::pipeline::analyze_paths;
use memlens_core::pipeline::Pipeline;
use memlens_tests::{oracle_for, oracle_value, snapshots_in, trace, traces_dir};

fn analyze(name: &str) -> AnalyzeOutput {
    analyze_paths(&[trace(name)]).expect("analyze")
}

fn device0(name: &str) -> DeviceSummary {
    analyze(name).files.remove(0).devices.remove(0)
}

/// What a reader should never see first: allocator, interpreter, dispatcher, binding frames
/// (prefixes; the allocator anywhere).
const NOT_FIRST: &[&str] = &[
    "c10::",
    "at::_ops::",
    "at::detail::empty",
    "at::native::empty",
    "at::meta::",
    "Py",
    "_Py",
    "__libc",
    "THPVariable",
    "torch::autograd::Engine",
    "VariableType",
    "torch/nn/modules/module.py:1790 _call_impl",
    "torch/nn/modules/module.py:1779 _wrapped_call_impl",
];

#[test]
fn with_cpp_stacks_no_entry_at_the_peak_starts_with_an_allocator_or_interpreter_frame() {
    for name in ["mlp_train_cpp_stacks.pickle", "hf_llama_cpp.pickle.gz"] {
        let d = device0(name);
        assert!(d.peak_stacks.len() >= 5, "{name}");
        for g in &d.peak_stacks {
            if let Some(first) = g.stack.first() {
                assert!(
                    !first.contains("CachingAllocator") && !NOT_FIRST.iter().any(|p| first.starts_with(p)),
                    "{name}: {first}"
                );
            }
            assert!(!g.headline().contains("CachingAllocator"), "{name}: {}", g.headline());
        }
        for o in &d.ooms {
            assert!(o.stack.iter().all(|f| !f.contains("CachingAllocator")), "{name}");
        }
    }
}

#[test]
fn a_hugging_face_model_is_named_by_its_own_code() {
    for name in ["hf_llama.pickle.gz", "hf_llama_cpp.pickle.gz"] {
        let d = device0(name);
        // The peak equals the process's own counter.
        assert_eq!(
            d.peak_allocated_bytes,
            oracle_value(&oracle_for(&trace(name)), "requested_bytes.all.peak"),
            "{name}"
        );
        // The largest entries with frames name transformers' code (or the script), never
        // torch/nn plumbing or a torch op as the code that asked.
        let named: Vec<_> = d.peak_stacks.iter().filter(|g| !g.stack.is_empty()).take(4).collect();
        for g in &named {
            let m = g
                .module
                .as_deref()
                .unwrap_or_else(|| panic!("{name}: no model code in {g:?}"));
            assert!(
                m.starts_with("transformers/") || m.starts_with("hf_llama.py"),
                "{name}: {m}"
            );
            assert!(!g.headline().starts_with("torch/"), "{name}: {}", g.headline());
        }
        assert!(
            named
                .iter()
                .any(|g| g.module.as_deref().is_some_and(|m| m.contains("modeling_llama.py"))),
            "{name}: {named:?}"
        );
        assert!(d.peak_modules.iter().any(|m| m
            .module
            .as_deref()
            .is_some_and(|m| m.starts_with("transformers/models/llama/modeling_llama.py:"))));
        // Paths are short: what follows site-packages/, the script by its own name.
        for g in &d.peak_stacks {
            for f in &g.stack {
                assert!(!f.starts_with('/') && !f.contains("site-packages"), "{name}: {f}");
            }
        }
    }
    // Python-only stacks: the loss gradients made on the autograd thread say so.
    let d = device0("hf_llama.pickle.gz");
    assert!(d
        .peak_stacks
        .iter()
        .any(|g| g.no_stack_reason == Some(NoStackReason::AutogradThread) && g.phase.as_deref() == Some("backward")));
}

#[test]
fn every_empty_stack_carries_a_reason() {
    let mut seen = 0;
    for f in snapshots_in(&traces_dir()) {
        let Ok(out) = analyze_paths(std::slice::from_ref(&f)) else {
            continue;
        };
        for d in out.files.iter().flat_map(|x| &x.devices) {
            let groups = d.peak_stacks.iter().chain(d.ooms.iter().flat_map(|o| &o.live_stacks));
            for g in groups.filter(|g| g.stack.is_empty()) {
                assert!(g.no_stack_reason.is_some(), "{}: {g:?}", f.display());
                seen += 1;
            }
            for l in d.leaks.iter().filter(|l| l.stack.is_empty()) {
                assert!(l.no_stack_reason.is_some(), "{}: {l:?}", f.display());
            }
        }
    }
    assert!(seen >= 10, "only {seen} empty stacks seen");
    // Memory that predates the trace is told apart from memory made on a frame-less thread.
    let before = device0("mlp_train_cpp_stacks.pickle");
    assert!(before
        .peak_stacks
        .iter()
        .any(|g| g.no_stack_reason == Some(NoStackReason::BeforeTrace)));
}

#[test]
fn four_gpus_whose_only_oom_is_on_cuda_1_open_there() {
    let out = analyze("four_gpus.pickle.gz");
    let f = &out.files[0];
    assert_eq!(f.devices.len(), 4);
    assert_eq!(f.focus_device, Some(1));
    let ooms: Vec<_> = f.devices.iter().map(|d| d.oom_count).collect();
    assert_eq!(ooms, vec![0, 1, 0, 0]);
    // Each device is its source run, peak for peak.
    for (device, source) in [
        "ddp_rank0.pickle.gz",
        "gpt_b16_oom.pickle.gz",
        "ddp_rank1.pickle.gz",
        "ddp_rank2.pickle.gz",
    ]
    .iter()
    .enumerate()
    {
        let d = &f.devices[device];
        assert_eq!(d.device, device as i64);
        assert_eq!(
            d.peak_allocated_bytes,
            oracle_value(&oracle_for(&trace(source)), "requested_bytes.all.peak"),
            "cuda:{device}"
        );
    }
    // A single-device file opens on its device.
    assert_eq!(analyze("leak.two_devices.pickle").files[0].focus_device, Some(1));
}

#[test]
fn the_flame_graph_of_a_window_weighs_bytes_by_lifetime_and_stays_bounded() {
    use memlens_core::pipeline::{Input, KeepFrames};
    use memlens_core::query::{flame_graph, Axis};
    let mut sink = KeepFrames {
        with_stacks: true,
        ..KeepFrames::default()
    };
    Pipeline::keeping_frames()
        .run(vec![Input::path(&trace("hf_llama_cpp.pickle.gz"))], &mut sink)
        .expect("run");
    let (dev, stacks) = (&sink.files[0][0], &sink.stacks[0]);
    let g = flame_graph(dev, stacks, Axis::Time, None, None).expect("flame");
    assert!(g.total > 0.0);
    assert_eq!(g.nodes[0].name, "all");
    assert_eq!(g.nodes[0].value, g.total);
    assert!(g.nodes.len() > 10 && g.nodes.len() <= memlens_core::query::MAX_FLAME_NODES);
    // Children lie inside their parent and never outweigh it; no frame a reader never sees.
    for (i, n) in g.nodes.iter().enumerate().skip(1) {
        let parent = g.nodes[..i]
            .iter()
            .rev()
            .find(|p| p.depth + 1 == n.depth)
            .expect("parent");
        assert!(n.offset >= parent.offset - 1e-6 * g.total, "{n:?} outside {parent:?}");
        assert!(
            n.offset + n.value <= parent.offset + parent.value + 1e-6 * g.total,
            "{n:?} outside {parent:?}"
        );
        assert!(
            !n.name.contains("CachingAllocator") && !n.name.starts_with("Py"),
            "{}",
            n.name
        );
    }
    // A window holds less than the whole run.
    let (s, e) = (g.start, g.end);
    let half = flame_graph(dev, stacks, Axis::Time, Some(s + (e - s) / 2), None).expect("flame");
    assert!(half.total < g.total);
}

#[test]
fn frames_of_fx_generated_code_carry_their_node_and_the_model_code_that_made_it() {
    // traces/capture/fx_frames.py: torch.compile(backend="aot_eager") runs FX-generated forward
    // code; the snapshot was taken with augment_with_fx_traces=True.
    use memlens_core::importers::{import_path, import_source, Imported};
    use memlens_core::stacks::StackResolver;
    let file = import_path(&trace("fx_frames.pickle.gz"), Default::default()).expect("import");
    let Imported::Snapshot(t) = file.data else {
        panic!("snapshot")
    };
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    let all: Vec<String> = (0..t.source.stack_count as u32)
        .flat_map(|s| stacks.frames(s))
        .collect();
    assert!(
        all.iter()
            .any(|f| f.starts_with("fx_generated__") && f.ends_with(":forward [fx addmm: aten.addmm.default]")),
        "{all:?}"
    );
    // Generated code is not the model's: the peak names the script that ran it.
    let d = device0("fx_frames.pickle.gz");
    assert!(
        d.peak_modules
            .iter()
            .all(|m| !m.module.as_deref().unwrap_or("").contains("fx_generated")),
        "{:?}",
        d.peak_modules
    );
    // An FX frame's original source trace (PyTorch writes it when the graph kept its nodes'
    // stack traces) becomes the frames that called it, innermost first.
    let json = br#"{"segments": [], "device_traces": [[{"action": "alloc", "addr": 1024, "size": 512,
        "stream": 0, "time_us": 1, "frames": [{"name": "forward", "filename": "fx_generated__abc.py",
        "line": 17, "fx_node_op": "call_function", "fx_node_name": "addmm",
        "fx_node_target": "aten.addmm.default", "fx_original_trace":
        "  File \"/src/model.py\", line 40, in forward\n    return self.block(x)\n  File \"/src/model.py\", line 12, in block\n    y = self.fc(x)\n"}]}]]}"#;
    let source = memlens_core::source::Source::from_reader(
        Box::new(std::io::Cursor::new(json.to_vec())),
        json.len() as u64,
        Default::default(),
    )
    .expect("source");
    let Imported::Snapshot(t) = import_source(source, &Default::default()).expect("json snapshot").data else {
        panic!("snapshot")
    };
    let stacks = StackResolver::new(&t.frames, &t.stack_frames).expect("stacks");
    let frames = (0..t.source.stack_count as u32)
        .map(|s| stacks.frames(s))
        .find(|f| !f.is_empty())
        .expect("a stack");
    assert_eq!(
        frames,
        vec![
            "fx_generated__abc.py:17:forward [fx addmm: aten.addmm.default]",
            "/src/model.py:12:block",
            "/src/model.py:40:forward"
        ]
    );
}
