//! One test per message shape: every figure read back exactly, the shape's missing figures
//! named, and the logs' structure (ranks, tracebacks, repeats). The fixtures are in
//! `traces/oom_text/` (written from the allocator's format sources) and `traces/oom/` (real
//! messages captured on an H100 with PyTorch 2.11, `traces/capture/oom_phases.py`).

use memlens_api::OomBackend;

use super::*;
use crate::importers::common::text_lines::numbered_lines as lines;

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

fn one(text: &str) -> OomMessage {
    let mut m = find_oom_messages(&lines(text));
    assert_eq!(m.len(), 1, "{m:?}");
    m.remove(0)
}

/// `v` printed with two decimals in `unit`, as PyTorch's `format_size` does, read back.
fn p(v: f64, unit: i64) -> i64 {
    let hundredths = (v * 100.0).round() as i64;
    (hundredths as i128 * unit as i128 * 2 + 100) as i64 / 200
}

#[test]
fn the_2018_shape_with_cached() {
    let m = one(include_str!("../../../../traces/oom_text/cuda_2018_cached.txt"));
    assert_eq!(m.exception.as_deref(), Some("RuntimeError"));
    assert_eq!(m.requested, Some(20 * MIB));
    assert_eq!(m.device, Some(0));
    assert_eq!(m.device_total, Some(p(11.17, GIB)));
    assert_eq!(m.allocated, Some(p(10.66, GIB)));
    assert_eq!(m.device_free, Some(p(2.06, MIB)));
    assert_eq!(m.reserved, Some(p(10.72, GIB)));
    assert!(m.missing.is_empty(), "{:?}", m.missing);
}

#[test]
fn the_1x_shape_with_reserved_in_total() {
    let m = one(include_str!("../../../../traces/oom_text/cuda_19_reserved.txt"));
    assert_eq!(m.requested, Some(2 * GIB));
    assert_eq!(m.reserved, Some(p(13.51, GIB)));
    assert_eq!(m.reserved_unallocated, Some(p(13.51, GIB) - p(12.47, GIB)));
    assert!(m.missing.is_empty());
}

#[test]
fn the_113_shape_with_a_cap() {
    let m = one(include_str!("../../../../traces/oom_text/cuda_113_allowed.txt"));
    assert_eq!(m.exception.as_deref(), Some("torch.cuda.OutOfMemoryError"));
    assert_eq!(m.allowed, Some(8 * GIB));
    assert_eq!(m.device_free, Some(p(70.98, GIB)));
    assert_eq!(m.reserved, Some(p(7.75, GIB)));
}

#[test]
fn the_21_shape_with_its_typo_and_a_process() {
    let m = one(include_str!("../../../../traces/oom_text/cuda_21_capacty.txt"));
    assert_eq!(m.device_total, Some(p(23.65, GIB)));
    assert_eq!(m.device_free, Some(p(1.20, GIB)));
    assert_eq!(m.processes.len(), 1);
    assert_eq!(m.processes[0].pid, Some(28913));
    assert_eq!(m.processes[0].bytes, p(22.44, GIB));
    assert_eq!(m.allocated, Some(p(14.14, GIB)));
    assert_eq!(m.reserved, Some(p(14.14, GIB) + p(7.81, GIB)));
}

#[test]
fn private_pools_are_taken_out_of_the_live_bytes() {
    let m = one(include_str!("../../../../traces/oom_text/cuda_24_private_pools.txt"));
    assert_eq!(m.exception.as_deref(), Some("torch.OutOfMemoryError"));
    assert_eq!(m.private_pool, Some(p(30.50, GIB)));
    assert_eq!(m.allocated, Some(p(76.02, GIB) - p(30.50, GIB)));
    assert_eq!(m.reserved, Some(p(76.02, GIB) + p(156.41, MIB)));
    assert!(m.processes.iter().any(|x| x.this_process && x.bytes == p(77.24, GIB)));
}

#[test]
fn a_real_211_message_under_a_cap() {
    let m = one(include_str!("../../../../traces/oom/fwd_first.error.txt"));
    assert_eq!(m.requested, Some(128 * MIB));
    assert_eq!(m.allowed, Some(p(13.90, GIB)));
    assert_eq!(m.device_total, Some(p(79.18, GIB)));
    assert_eq!(
        m.traceback.last().map(|f| f.ends_with(":apply_rotary_pos_emb")),
        Some(true)
    );
    assert!(m.missing.is_empty());
}

#[test]
fn torchrun_ranks_are_kept_apart_and_repeats_counted_once() {
    let m = find_oom_messages(&lines(include_str!("../../../../traces/oom_text/torchrun_ranks.log")));
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!((m[0].rank, m[0].device, m[0].occurrences), (Some(1), Some(1), 2));
    assert_eq!((m[1].rank, m[1].device, m[1].occurrences), (Some(0), Some(0), 1));
    assert!(m[0].traceback.iter().any(|f| f.contains("torch/nn/modules/module.py")));
    assert!(m[1].traceback.iter().any(|f| f.contains("torch/optim/adamw.py")));
}

#[test]
fn rocm_mps_xpu_and_cuda_malloc_async() {
    let hip = one(include_str!("../../../../traces/oom_text/hip_oom.txt"));
    assert_eq!(hip.backend, OomBackend::Hip);
    assert_eq!(hip.requested, Some(p(1.96, GIB)));
    let mps = one(include_str!("../../../../traces/oom_text/mps_oom.txt"));
    assert_eq!(mps.backend, OomBackend::Mps);
    assert_eq!(mps.allocated, Some(p(17.79, GIB)));
    assert_eq!(mps.other_allocations, Some(p(364.75, MIB)));
    assert_eq!(mps.allowed, Some(p(18.13, GIB)));
    assert_eq!(mps.requested, Some(256 * MIB));
    let xpu = one(include_str!("../../../../traces/oom_text/xpu_oom.txt"));
    assert_eq!(xpu.backend, OomBackend::Xpu);
    assert!(xpu.missing.is_empty(), "{:?}", xpu.missing);
    let asy = one(include_str!("../../../../traces/oom_text/cuda_malloc_async.txt"));
    assert_eq!(asy.backend, OomBackend::CudaMallocAsync);
    assert_eq!(asy.requested, Some(GIB));
    assert_eq!(asy.allowed, Some(8 * GIB));
    assert_eq!(asy.device_free, Some(p(70.12, GIB)));
}

#[test]
fn an_exabyte_request_and_a_message_cut_short() {
    let eb = one(include_str!("../../../../traces/oom_text/exabyte.txt"));
    assert_eq!(eb.requested, Some(1 << 60));
    let cut = one(include_str!("../../../../traces/oom_text/truncated.txt"));
    assert_eq!(cut.exception.as_deref(), Some("OutOfMemoryError"));
    assert_eq!(cut.requested, Some(p(3725.29, GIB)));
    for f in ["device_total", "device_free", "allocated", "reserved"] {
        assert!(cut.missing.iter().any(|m| m == f), "{f}: {:?}", cut.missing);
    }
}

#[test]
fn a_message_wrapped_over_lines_is_joined() {
    let m = one(include_str!("../../../../traces/oom_text/wrapped_issue_paste.txt"));
    assert_eq!(m.line, 3);
    assert_eq!(m.reserved_unallocated, Some(p(214.52, MIB)));
    assert_eq!(m.reserved, Some(p(22.46, GIB) + p(214.52, MIB)));
    assert!(m.missing.is_empty(), "{:?}", m.missing);
}

#[test]
fn text_without_a_message_has_none() {
    assert!(find_oom_messages(&lines(include_str!("../../../../traces/oom_text/no_oom.txt"))).is_empty());
}
