//! The remedies of an OOM in inference (prefill, decode, a forward under no_grad): fewer
//! sequences at once, a shorter generation, a narrower key/value cache, bf16 or quantized
//! weights, a cache allocated once instead of grown by `torch.cat` — each sized from what was
//! live at the failure. Never a training remedy: an inference run has no gradients, no
//! optimizer state and no backward to checkpoint for.

use memlens_api::{OomFit, OomPhase, Remedy, RemedyAction};

use super::failure_facts::{human, KvAtFailure, LiveAtFailure};

/// A few words for the verdict's first remedy.
pub fn short_name(a: RemedyAction) -> &'static str {
    match a {
        RemedyAction::ShorterGeneration => "a shorter generation (max_new_tokens)",
        RemedyAction::NarrowerKvCache => "a narrower key/value cache",
        RemedyAction::Bf16Weights => "bf16 weights",
        RemedyAction::StaticKvCache => "a static key/value cache",
        RemedyAction::QuantizeWeights => "quantized weights",
        _ => "the remedy below",
    }
}

/// Remedies sized from what was live at the failure.
pub fn sized(l: &LiveAtFailure, fits: Option<&OomFit>, phase: OomPhase) -> Vec<Remedy> {
    let mut out = Vec::new();
    let fit = fits.filter(|x| x.batch_fraction > 0.0 && x.batch_fraction < 1.0);
    if let Some(fit) = fit {
        let what = if phase == OomPhase::InferenceForward {
            "of the batch at once (split it into smaller batches)"
        } else {
            "of the sequences at once (fewer concurrent sequences; the rest in later batches)"
        };
        out.push(Remedy {
            action: RemedyAction::SmallerBatch,
            saves_bytes: ((1.0 - fit.batch_fraction) * fit.batch_bytes as f64) as i64,
            note: format!(
                "Run {:.0} % {what} (fits.batch_fraction {:.2}).",
                fit.batch_fraction * 100.0,
                fit.batch_fraction
            ),
        });
    }
    let dtype = l.kv.and_then(|k| k.weight_dtype_bytes);
    if let Some(kv) = l.kv.filter(|k| k.bytes_full > 0) {
        out.extend(shorter_generation(&kv, fits, phase));
        out.push(narrower_cache(&kv));
        if kv.grown_by_copy && kv.growth_copy_full > 0 {
            out.push(Remedy {
                action: RemedyAction::StaticKvCache,
                saves_bytes: kv.growth_copy_full,
                note: format!(
                    "Allocate the cache once at full length (generate(..., cache_implementation=\"static\"), or paged \
                     blocks): torch.cat makes each key and value tensor again a token longer every step, {} for the \
                     largest, and leaves the reserve split into blocks a token too short.",
                    human(kv.growth_copy_full)
                ),
            });
        }
    }
    if l.parameter > 0 {
        if dtype == Some(4) {
            out.push(Remedy {
                action: RemedyAction::Bf16Weights,
                saves_bytes: l.parameter / 2,
                note: format!(
                    "Load the weights in bf16 (from_pretrained(..., torch_dtype=torch.bfloat16) or model.to(torch.bfloat16)): \
                     the {} of fp32 weights halve, and the cache, made in the model's dtype, halves with them.",
                    human(l.parameter)
                ),
            });
        }
        let bytes = dtype.unwrap_or(2);
        out.push(Remedy {
            action: RemedyAction::QuantizeWeights,
            saves_bytes: l.parameter - l.parameter / (2 * bytes),
            note: format!(
                "Quantize the weights to 4 bits (bitsandbytes load_in_4bit, GPTQ, AWQ): the {} of {} weights keep {}.",
                human(l.parameter),
                match dtype {
                    Some(4) => "fp32",
                    Some(2) => "bf16",
                    _ => "(taken as bf16)",
                },
                human(l.parameter / (2 * bytes))
            ),
        });
    }
    out
}

/// In a decode step: the longest generation whose cache fits at this batch, when the tokens a
/// sequence are known.
fn shorter_generation(kv: &KvAtFailure, fits: Option<&OomFit>, phase: OomPhase) -> Option<Remedy> {
    if phase != OomPhase::Decode {
        return None;
    }
    let fit = fits.filter(|x| x.batch_fraction > 0.0 && x.batch_fraction < 1.0)?;
    let tokens = kv.tokens_now.filter(|&t| t > 0)?;
    // Where the fraction meets the budget: fixed + x × scaled; at the whole batch, the cache is
    // what must give way.
    let budget = fit.fixed_bytes as f64 + fit.batch_fraction * fit.batch_bytes as f64;
    let cache = (kv.bytes_full + kv.growth_copy_full) as f64;
    let other = fit.batch_bytes as f64 - cache;
    let room = budget - fit.fixed_bytes as f64 - other;
    let ratio = (room / cache).clamp(0.0, 1.0);
    let longest = (tokens as f64 * ratio).floor() as i64;
    let per_token = kv.bytes_full / tokens;
    Some(Remedy {
        action: RemedyAction::ShorterGeneration,
        saves_bytes: (cache * (1.0 - ratio)) as i64,
        note: format!(
            "Generate at most {longest} tokens a sequence in all, prompt included (max_length, or max_new_tokens = {longest} \
             less the prompt): the cache held {tokens} at the failure, and each token costs {} over the {}.",
            human(per_token),
            match kv.sequences {
                Some(b) => format!("{b} sequences"),
                None => "batch".to_owned(),
            }
        ),
    })
}

fn narrower_cache(kv: &KvAtFailure) -> Remedy {
    let cache = kv.bytes_full + kv.growth_copy_full;
    Remedy {
        action: RemedyAction::NarrowerKvCache,
        saves_bytes: cache / 2,
        note: match kv.weight_dtype_bytes {
            Some(4) => format!(
                "Keep the key/value cache in bf16 or fp16 (it is made in the model's dtype: fp32 here): the {} it needs halve.",
                human(cache)
            ),
            _ => format!(
                "A quantized key/value cache (transformers' cache_implementation=\"quantized\", int8/int4; fp8 in vLLM and \
                 SGLang: --kv-cache-dtype fp8) keeps half of the {} a 16-bit cache needs, or less.",
                human(cache)
            ),
        },
    }
}

/// Text gives totals only: the inference remedies, unsized.
pub fn from_text(phase: OomPhase) -> Vec<Remedy> {
    let remedy = |action, note: &str| Remedy {
        action,
        saves_bytes: 0,
        note: note.to_owned(),
    };
    let mut out = vec![remedy(
        RemedyAction::SmallerBatch,
        "Run fewer sequences at once (a smaller batch); to size each remedy, capture a snapshot at the next OOM \
         (memlens.torch.on_oom).",
    )];
    if phase != OomPhase::InferenceForward {
        out.extend([
            remedy(
                RemedyAction::ShorterGeneration,
                "Generate fewer tokens (max_new_tokens / max_length): the key/value cache grows with every one.",
            ),
            remedy(
                RemedyAction::NarrowerKvCache,
                "A bf16 or quantized (fp8, int8) key/value cache halves it or better.",
            ),
            remedy(
                RemedyAction::StaticKvCache,
                "A static cache (cache_implementation=\"static\") is allocated once, not copied by torch.cat every step.",
            ),
        ]);
    }
    out.push(remedy(
        RemedyAction::QuantizeWeights,
        "bf16 weights halve fp32 ones; 4-bit quantized weights keep a quarter of bf16's.",
    ));
    out
}

#[cfg(test)]
mod tests {
    use memlens_api::{OomFit, OomPhase, RemedyAction};

    use super::sized;
    use crate::analysis::failure_facts::{KvAtFailure, LiveAtFailure};

    const GIB: i64 = 1 << 30;

    /// A decode step of an fp32 model whose cache grows by torch.cat: fewer sequences, a shorter
    /// generation, a narrower cache, a static one, bf16 and quantized weights — and nothing of
    /// training however much is called activation.
    #[test]
    fn a_decode_oom_gets_inference_remedies_each_sized() {
        let live = LiveAtFailure {
            parameter: GIB / 2,
            activation: GIB,
            cache: 2 * GIB,
            kv: Some(KvAtFailure {
                bytes_now: 2 * GIB,
                bytes_full: 2 * GIB,
                growth_copy_full: GIB / 8,
                tensors_full: 16,
                tokens_now: Some(1000),
                sequences: Some(32),
                grown_by_copy: true,
                weight_dtype_bytes: Some(4),
            }),
            ..Default::default()
        };
        let fit = OomFit {
            batch_fraction: 0.5,
            limit_bytes: 2 * GIB,
            fixed_bytes: GIB / 2,
            batch_bytes: 3 * GIB,
            how: String::new(),
            generation: None,
        };
        let list = sized(&live, Some(&fit), OomPhase::Decode);
        let saves = |a: RemedyAction| list.iter().find(|r| r.action == a).map(|r| r.saves_bytes);
        assert_eq!(saves(RemedyAction::SmallerBatch), Some(3 * GIB / 2));
        assert_eq!(saves(RemedyAction::StaticKvCache), Some(GIB / 8));
        assert_eq!(saves(RemedyAction::NarrowerKvCache), Some((2 * GIB + GIB / 8) / 2));
        assert_eq!(saves(RemedyAction::Bf16Weights), Some(GIB / 4));
        // At half the batch the budget is 2 GiB: 1.5 GiB above the weights for the whole batch,
        // whose 0.875 GiB beside the cache (and its copy, 2.125 GiB) leave the cache 0.625 GiB:
        // 29.4 % of its 1000 tokens.
        let shorter = list
            .iter()
            .find(|r| r.action == RemedyAction::ShorterGeneration)
            .expect("shorter");
        assert!(shorter.note.contains("at most 294 tokens"), "{}", shorter.note);
        for r in &list {
            assert!(
                !matches!(
                    r.action,
                    RemedyAction::ActivationCheckpointing
                        | RemedyAction::Bf16Activations
                        | RemedyAction::LighterOptimizer
                        | RemedyAction::ShardStates
                        | RemedyAction::CpuOffload
                ),
                "{r:?}"
            );
        }
    }
}
