//! A JAX out-of-memory error explained in JAX's terms, from what XLA printed
//! ([`crate::importers::oom_message::xla`]): the cause — another process holding the GPU (two
//! JAX processes each preallocating 75 %, or one that left a notebook open), the allocator's
//! limit (the preallocated pool, `XLA_PYTHON_CLIENT_MEM_FRACTION` of it when set), the BFC
//! allocator's fragmentation, or the device's capacity — and the remedies with their numbers:
//! `jax.checkpoint` / `nn.remat`, a smaller batch, bf16, sharding over devices, donating the
//! step's buffers, the pool's fraction, preallocation.
//!
//! What each remedy saves comes from the text's own figures: the buffer assignment's
//! temporaries (what `jax.checkpoint`, bf16 and a smaller batch shrink), its parameters (what
//! sharding and donation save), the allocator's limit, bytes in use and largest free block.

use memlens_api::{
    OomBackend, OomCause, OomExplanation, OomPhase, OomText, Remedy, RemedyAction, XlaOomText, XlaOomWording,
};

use super::oom_cause::{human, SHARD_GPUS};
use crate::evidence::OomMessage;

/// JAX's default preallocation: 75 % of the GPU's memory (`XLA_PYTHON_CLIENT_MEM_FRACTION`).
pub const DEFAULT_MEM_FRACTION: f64 = 0.75;
/// The most of a GPU a pool should take, leaving the CUDA context and cuDNN/cuBLAS their room.
pub const MOST_MEM_FRACTION: f64 = 0.95;

/// The memory map's share in use at or below which the pool counts as mostly free.
const MOSTLY_FREE: f64 = 0.1;

/// What to do next time to see what was live (the device memory profile, uploaded).
pub const CAPTURE_NEXT_TIME: &str = "import memlens.jax\nmemlens.jax.on_oom(server=\"http://YOUR-MEMLENS:8080\")  # wraps your step: at the next RESOURCE_EXHAUSTED it saves jax.profiler.device_memory_profile() and uploads it with the message\n# or, without memlens' client:\n# except Exception: jax.profiler.save_device_memory_profile(\"oom.prof\"); raise";

/// The facts a text gives, in one place.
struct Facts<'a> {
    requested: i64,
    xla: &'a XlaOomText,
    /// The pool's free bytes (limit less in use), when both are printed.
    free_in_pool: Option<i64>,
}

/// What stood in the way.
fn cause(f: &Facts) -> OomCause {
    let x = f.xla;
    if x.driver_refused_bytes.is_some() {
        return OomCause::OtherProcesses;
    }
    if let (Some(free), Some(largest)) = (f.free_in_pool, x.largest_free_block_bytes) {
        if free >= f.requested && largest < f.requested {
            return OomCause::Fragmentation;
        }
    }
    if x.wording == XlaOomWording::AllocationWouldExceedMemory {
        return OomCause::Capacity;
    }
    // A pool mostly free that could not give the request: the request is larger than the pool.
    if x.limit_bytes.is_some() || x.memory_map_in_use.is_some_and(|u| u <= MOSTLY_FREE) {
        return OomCause::Limit;
    }
    OomCause::Unknown
}

fn remedy(action: RemedyAction, saves_bytes: i64, note: String) -> Remedy {
    Remedy {
        action,
        saves_bytes,
        note,
    }
}

/// The remedies that make the failing program smaller, from the buffer assignment's figures
/// (temporaries: activations and workspaces; parameters: the step's inputs).
fn smaller_program(f: &Facts, missing: Option<i64>) -> Vec<Remedy> {
    let stats = f.xla.buffer_assignment.as_ref();
    let temp = stats.and_then(|s| s.preallocated_temp_bytes).filter(|&t| t > 0);
    let params = stats.and_then(|s| s.parameter_bytes).filter(|&p| p > 0);
    let outputs = stats.and_then(|s| s.maybe_live_out_bytes).filter(|&o| o > 0);
    let mut out = Vec::new();
    let batch_note = match (temp, missing) {
        (Some(t), Some(m)) if m < t => format!(
            "Run a smaller batch: the program's temporaries are {} and {} more were needed, so a batch of at most \
             {:.0} % of this one fits if they scale with it (keep the effective batch with gradient accumulation: \
             optax.MultiSteps).",
            human(t),
            human(m),
            (t - m) as f64 * 100.0 / t as f64
        ),
        (Some(t), _) => format!(
            "Run a smaller batch: the program's temporaries ({}) grow with it (keep the effective batch with \
             optax.MultiSteps).",
            human(t)
        ),
        _ if f.requested > 0 => format!(
            "Run a smaller batch: the failing allocation was {} (keep the effective batch with optax.MultiSteps).",
            human(f.requested)
        ),
        _ => "Run a smaller batch (keep the effective batch with optax.MultiSteps).".to_owned(),
    };
    out.push(remedy(
        RemedyAction::SmallerBatch,
        missing.unwrap_or(f.requested),
        batch_note,
    ));
    let t = temp.unwrap_or(f.requested);
    if t == 0 {
        return out;
    }
    let of = match temp {
        Some(_) => format!("the {} of temporaries", human(t)),
        None => format!(
            "the failing {}, if it is an activation (the text prints no buffer assignment to say)",
            human(t)
        ),
    };
    out.push(remedy(
        RemedyAction::ActivationCheckpointing,
        t / 2,
        format!(
            "Rematerialise the repeated blocks (jax.checkpoint / jax.remat, flax's nn.remat, equinox's \
             filter_checkpoint): what the forward keeps for the backward is dropped and recomputed; about half of \
             {of} is saved at the price of a second forward."
        ),
    ));
    out.push(remedy(
        RemedyAction::Bf16Activations,
        t / 2,
        format!("Compute in bfloat16 (the model's dtype=jnp.bfloat16, params kept in float32): half of {of}."),
    ));
    if let Some(p) = params {
        let n = SHARD_GPUS;
        out.push(remedy(
            RemedyAction::ShardStates,
            p - p / n,
            format!(
                "Shard the parameters and optimizer state over devices (jax.sharding.NamedSharding over a Mesh, \
                 FSDP-style): over {n} devices each holds a quarter of the {} of inputs.",
                human(p)
            ),
        ));
        let donated = outputs.map_or(p, |o| o.min(p));
        out.push(remedy(
            RemedyAction::DonateBuffers,
            donated,
            format!(
                "Donate the step's inputs (jax.jit(step, donate_argnums=(0, 1)) for params and opt_state): the new \
                 ones reuse the old ones' buffers instead of {} more held beside them.",
                human(donated)
            ),
        ));
    }
    out
}

/// Remedies for the cause itself (the pool, another process, fragmentation).
fn for_the_cause(cause: OomCause, f: &Facts, missing: Option<i64>) -> Vec<Remedy> {
    let x = f.xla;
    match cause {
        OomCause::OtherProcesses => vec![remedy(
            RemedyAction::FreeOtherProcesses,
            x.driver_refused_bytes.unwrap_or(0),
            format!(
                "The driver refused the allocator {}: another process holds the GPU. Each JAX process preallocates \
                 75 % of it at its first operation, so a second one finds a quarter: set XLA_PYTHON_CLIENT_PREALLOCATE=false \
                 in both, or XLA_PYTHON_CLIENT_MEM_FRACTION=.45 in each, or stop the other (a notebook left open).",
                human(x.driver_refused_bytes.unwrap_or(0))
            ),
        )],
        OomCause::Fragmentation => vec![remedy(
            RemedyAction::Defragment,
            0,
            format!(
                "The pool had {} free but its largest free block was {}: the BFC allocator's memory is fragmented. \
                 Keep preallocation on (XLA_PYTHON_CLIENT_PREALLOCATE unset: one region, less fragmentation), free \
                 arrays you no longer need (del, or donate them), and allocate the large buffers first.",
                human(f.free_in_pool.unwrap_or(0)),
                human(x.largest_free_block_bytes.unwrap_or(0))
            ),
        )],
        OomCause::Limit => {
            let (Some(limit), Some(need)) = (x.limit_bytes, x.in_use_bytes.map(|u| u + f.requested)) else {
                return vec![remedy(
                    RemedyAction::RaiseCap,
                    0,
                    format!(
                        "The pool was {:.0} % free and could not give {}: the request is larger than the pool. \
                         JAX preallocates 75 % of the GPU by default; XLA_PYTHON_CLIENT_MEM_FRACTION up to .95 \
                         gives it a fifth more, and past that the step must shrink.",
                        (1.0 - x.memory_map_in_use.unwrap_or(0.0)) * 100.0,
                        human(f.requested)
                    ),
                )];
            };
            if f.requested == 0 {
                return vec![remedy(
                    RemedyAction::RaiseCap,
                    0,
                    format!(
                        "The allocator's limit is {} with {} in use, and the text does not say what the failing \
                         request was. If that limit is JAX's default 75 % of the GPU (about {}), \
                         XLA_PYTHON_CLIENT_MEM_FRACTION up to .95 gives the pool a fifth more.",
                        human(limit),
                        human(need),
                        human((limit as f64 / DEFAULT_MEM_FRACTION) as i64)
                    ),
                )];
            }
            let gpu = limit as f64 / DEFAULT_MEM_FRACTION;
            let fraction = need as f64 / gpu;
            let note = if fraction <= MOST_MEM_FRACTION {
                format!(
                    "The allocator's limit is {} and this step needed {} in it. If that limit is JAX's default 75 % \
                     of the GPU (about {}), XLA_PYTHON_CLIENT_MEM_FRACTION={:.2} holds it; if you had set a lower \
                     fraction, raise it.",
                    human(limit),
                    human(need),
                    human(gpu as i64),
                    (fraction + 0.005).min(MOST_MEM_FRACTION)
                )
            } else {
                format!(
                    "The allocator's limit is {} and this step needed {}: more than {:.0} % of a GPU whose 75 % is \
                     that limit; raising XLA_PYTHON_CLIENT_MEM_FRACTION will not be enough — make the step smaller.",
                    human(limit),
                    human(need),
                    MOST_MEM_FRACTION * 100.0
                )
            };
            vec![remedy(RemedyAction::RaiseCap, missing.unwrap_or(0), note)]
        }
        _ => Vec::new(),
    }
}

/// One sentence of what the text says, then the cause and the first remedy.
fn verdict(cause: OomCause, f: &Facts, m: &OomMessage, remedies: &[Remedy]) -> String {
    let x = f.xla;
    let mut s = if m.requested.is_some() {
        format!("XLA ran out of memory allocating {}", human(f.requested))
    } else {
        "XLA's allocator ran out of memory (the text does not say for how much)".to_owned()
    };
    if let Some(a) = &x.allocator {
        s += &format!(" in {a}");
    }
    if let (Some(limit), Some(used)) = (x.limit_bytes, x.in_use_bytes) {
        s += &format!(": {} of its {} limit in use", human(used), human(limit));
        if let Some(largest) = x.largest_free_block_bytes {
            s += &format!(", largest free block {}", human(largest));
        }
    }
    s.push('.');
    if let Some(total) = x.buffer_assignment.as_ref().and_then(|b| b.total_bytes) {
        s += &format!(" The failing program needed {} in all.", human(total));
    }
    s += match cause {
        OomCause::OtherProcesses => " Cause: another process on the GPU (preallocation: each JAX process takes 75 %).",
        OomCause::Fragmentation => " Cause: the BFC allocator's fragmentation.",
        OomCause::Limit => " Cause: the allocator's limit (the preallocated pool).",
        OomCause::Capacity => " Cause: the device's capacity.",
        _ => "",
    };
    if let Some(first) = remedies.first() {
        s += &format!(" First remedy: {}", first.note);
    }
    s
}

/// The facts with what the chunk table adds where the `Stats:` block is absent: bytes in use
/// and in chunks, summed over the bins.
fn with_bins(xla: &XlaOomText) -> XlaOomText {
    let mut x = xla.clone();
    if !x.bins.is_empty() {
        x.in_use_bytes = x.in_use_bytes.or(Some(x.bins.iter().map(|b| b.in_use_bytes).sum()));
        x.pool_bytes = x.pool_bytes.or(Some(x.bins.iter().map(|b| b.allocated_bytes).sum()));
    }
    x
}

/// One XLA failure, explained.
pub fn explain(m: &OomMessage, printed: &XlaOomText) -> OomExplanation {
    let xla = &with_bins(printed);
    let requested = m.requested.unwrap_or(0);
    let free_in_pool = xla.limit_bytes.zip(xla.in_use_bytes).map(|(l, u)| (l - u).max(0));
    let facts = Facts {
        requested,
        xla,
        free_in_pool,
    };
    let missing = free_in_pool.map(|free| (requested - free).max(0));
    let cause = cause(&facts);
    let mut remedies = for_the_cause(cause, &facts, missing);
    remedies.extend(smaller_program(&facts, missing));
    let remedy_text = verdict(cause, &facts, m, &remedies);
    let mut missing_figures = m.missing.clone();
    for (name, absent) in [
        ("limit", xla.limit_bytes.is_none()),
        ("in_use", xla.in_use_bytes.is_none()),
        ("largest_free_block", xla.largest_free_block_bytes.is_none()),
    ] {
        if absent {
            missing_figures.push(name.to_owned());
        }
    }
    OomExplanation {
        event_index: 0,
        time_us: None,
        requested_bytes: requested,
        device_free_bytes: None,
        reserved_bytes: xla.pool_bytes.or(xla.limit_bytes).unwrap_or(0),
        allocated_bytes: xla.in_use_bytes.unwrap_or(0),
        reserved_free_bytes: free_in_pool.unwrap_or(0),
        largest_free_block_bytes: xla.largest_free_block_bytes.unwrap_or(0),
        cause,
        phase: OomPhase::Unknown,
        allowed_bytes: xla.limit_bytes,
        device_total_bytes: xla.device_memory_bytes,
        processes: Vec::new(),
        non_pytorch_bytes: None,
        private_pool_bytes: None,
        remedy: remedy_text,
        remedies,
        fits: None,
        live_stacks: Vec::new(),
        live_categories: Vec::new(),
        stack: m.traceback.iter().rev().take(12).rev().cloned().collect(),
        text: Some(OomText {
            line: m.line,
            rank: m.rank,
            exception: m.exception.clone(),
            backend: OomBackend::Xla,
            missing: missing_figures,
            capture_next_time: CAPTURE_NEXT_TIME.to_owned(),
            xla: Some(printed.clone()),
            max_new_tokens: None,
            max_length: None,
        }),
    }
}

/// A report holding XLA's out-of-memory text and the device memory profile taken at it (what
/// `memlens.jax.on_oom` uploads): each XLA failure gets what the profile shows live at that
/// instant on its device — by category and by stack — and the verdict says it. What the failing
/// computation itself was making (its temporaries) is not in a profile; the buffer assignment's
/// stats, when printed, say that.
pub fn join_profiles_to_messages(files: &mut [memlens_api::FileSummary]) {
    use memlens_api::{CategoryBytes, Format};
    let profiles: Vec<(String, memlens_api::DeviceSummary)> = files
        .iter()
        .filter(|f| f.format == Format::JaxDeviceMemoryProfile)
        .flat_map(|f| {
            let name = std::path::Path::new(&f.file)
                .file_name()
                .map_or_else(|| f.file.clone(), |n| n.to_string_lossy().into_owned());
            f.devices.iter().map(move |d| (name.clone(), d.clone()))
        })
        .collect();
    if profiles.is_empty() {
        return;
    }
    for f in files.iter_mut().filter(|f| f.format.is_text_evidence()) {
        for d in f.devices.iter_mut() {
            let Some((file, p)) = profiles.iter().find(|(_, p)| p.device == d.device) else {
                continue;
            };
            let xla_ooms = d
                .ooms
                .iter_mut()
                .filter(|o| o.text.as_ref().is_some_and(|t| t.xla.is_some()));
            for o in xla_ooms {
                o.live_categories = p
                    .categories
                    .iter()
                    .filter(|c| c.bytes_at_peak > 0)
                    .map(|c| CategoryBytes {
                        category: c.category,
                        bytes: c.bytes_at_peak,
                    })
                    .collect();
                o.live_stacks = p.peak_stacks.clone();
                let made_of: Vec<String> = o
                    .live_categories
                    .iter()
                    .map(|c| format!("{} {}", c.category.name().replace('_', " "), human(c.bytes)))
                    .collect();
                o.remedy += &format!(
                    " The device memory profile taken at the error ({file}) holds {} live on this device: {}; \
                     the failing computation's own temporaries are not in it.",
                    human(p.peak_allocated_bytes),
                    made_of.join(", ")
                );
            }
            d.verdict = crate::analysis::verdict::device_verdict(d);
        }
    }
}
