//! Where in inference an OOM stands: Hugging Face generation's prefill (the prompt's forward,
//! the cache made) or a decode step (one token a sequence, the cache grown), read from the
//! failing allocation's frames and the forwards generation ran before it; or a forward under a
//! `torch.no_grad()` / `torch.inference_mode()` decorator outside generation.

use memlens_api::OomPhase;
use rustc_hash::FxHashMap;

use crate::analysis::kv_cache::is_generation_frame;
use crate::analysis::DeviceEvents;
use crate::stacks::StackResolver;

/// What an allocation's frames say of generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InGeneration {
    Outside,
    /// `generate()` setting up a request (`_prepare_*`, `generate` itself): a new request.
    Setup,
    /// Generation's loop between forwards (logits, processors, the token ids grown).
    Loop,
    /// The model's forward called by generation.
    Model,
}

fn function_of(frame: &str) -> &str {
    frame.rsplit(':').next().unwrap_or("")
}

fn in_generation(frames: &[String]) -> InGeneration {
    let Some(innermost) = frames.iter().find(|f| is_generation_frame(f)) else {
        return InGeneration::Outside;
    };
    if frames.iter().any(|f| f.contains("torch/nn/modules/module.py")) {
        return InGeneration::Model;
    }
    let f = function_of(innermost);
    if f == "generate" || f.starts_with("_prepare") {
        InGeneration::Setup
    } else {
        InGeneration::Loop
    }
}

/// Whether frames show a function decorated with `torch.no_grad()` or
/// `torch.inference_mode()` (PyTorch's context-manager decorator).
fn under_no_grad_decorator(frames: &[String]) -> bool {
    frames
        .iter()
        .any(|f| f.contains("torch/utils/_contextlib.py") || f.contains("torch/autograd/grad_mode.py"))
}

/// The inference phase of the OOM at entry `oom` (`None`: not inference, as far as its frames
/// say). `phase` is what the training reading found; only a forward becomes a no_grad one.
pub(super) fn inference_phase(
    ev: &DeviceEvents,
    stacks: &StackResolver,
    oom: usize,
    phase: OomPhase,
) -> Option<OomPhase> {
    if oom >= ev.len() {
        return None;
    }
    let own = stacks.frames(ev.stack().at(oom));
    let kind = in_generation(&own);
    if kind == InGeneration::Outside {
        return (phase == OomPhase::Forward && under_no_grad_decorator(&own)).then_some(OomPhase::InferenceForward);
    }
    if own.iter().any(|f| function_of(f) == "_prefill") {
        return Some(OomPhase::Prefill);
    }
    // The forwards generation finished in this request before the failure.
    let (mut done, mut in_forward) = (0usize, false);
    let mut seen: FxHashMap<u32, InGeneration> = FxHashMap::default();
    let alloc = crate::tables::Action::Alloc as u8;
    let stack = ev.stack();
    for (i, _) in ev.action().iter().enumerate().take(oom).filter(|(_, &a)| a == alloc) {
        let s = stack.at(i);
        match *seen.entry(s).or_insert_with(|| in_generation(&stacks.frames(s))) {
            InGeneration::Setup => (done, in_forward) = (0, false),
            InGeneration::Model => in_forward = true,
            InGeneration::Loop if in_forward => (done, in_forward) = (done + 1, false),
            _ => {}
        }
    }
    if in_forward && kind == InGeneration::Loop {
        done += 1;
    }
    // In the loop after the first forward, the prefill's logits are still being read.
    let decode = match kind {
        InGeneration::Loop => done > 1,
        _ => done > 0,
    };
    Some(if decode { OomPhase::Decode } else { OomPhase::Prefill })
}
