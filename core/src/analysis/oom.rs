//! OutOfMemory explanations: at each `oom` entry, the numbers that say why the request failed
//! and a concrete remedy.

use memlens_api::{OomCause, OomExplanation};
use polars::prelude::*;

use super::fragmentation::Fragmentation;
use super::peak::{live_groups_at, NoStackEvidence};
use super::usage::Usage;
use super::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::Action;

fn human(b: i64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1 << 20) as f64 {
        format!("{:.1} MiB", b / (1 << 20) as f64)
    } else {
        format!("{} KiB", (b / 1024.0).round())
    }
}

/// Every OOM of the device, explained. `frag.at` must hold the state at each OOM entry.
pub fn explain_ooms(
    ev: &DeviceEvents,
    usage: &Usage,
    frag: &Fragmentation,
    lifetimes: &DataFrame,
    stacks: &StackResolver,
    expandable: bool,
    evidence: &NoStackEvidence,
) -> PolarsResult<Vec<OomExplanation>> {
    let mut out = Vec::new();
    for i in ev.indices_of(Action::Oom) {
        let st = frag.at.get(&i).copied().unwrap_or_default();
        let requested = ev.size().at(i);
        let device_free = ev.device_free(i);
        let allocated = usage.allocated_before(i);
        let reserved = usage.reserved_before(i);
        let (cause, remedy) = remedy(requested, st.free, st.largest_free, device_free, expandable);
        out.push(OomExplanation {
            event_index: i,
            time_us: ev.time_us(i),
            requested_bytes: requested,
            device_free_bytes: device_free,
            reserved_bytes: reserved,
            allocated_bytes: allocated,
            reserved_free_bytes: st.free,
            largest_free_block_bytes: st.largest_free,
            cause,
            remedy,
            live_stacks: live_groups_at(lifetimes, i.checked_sub(1), 5, stacks, evidence)?,
            live_categories: Vec::new(),
            stack: stacks.user_frames(ev.stack().at(i)),
        });
    }
    Ok(out)
}

/// Classifies a failed request and says what to do.
pub fn remedy(
    requested: i64,
    free: i64,
    largest: i64,
    device_free: Option<i64>,
    expandable: bool,
) -> (OomCause, String) {
    let (req, fr, lg) = (human(requested), human(free), human(largest));
    if requested <= free && largest < requested {
        let text = if expandable {
            format!(
                "Fragmentation: {fr} is reserved but free, yet the largest free range is {lg}, smaller than the {req} request, even with expandable segments. \
                 Allocate large long-lived tensors before many small ones, free references earlier so freed ranges coalesce, \
                 or set PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.8 so cached blocks are reclaimed before the cap is hit."
            )
        } else {
            let split_mb = (requested >> 20).clamp(1, 1 << 20);
            format!(
                "Fragmentation: {fr} is reserved but free, split into blocks of at most {lg}, so no block fits the {req} request. \
                 Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so freed pages can be remapped into one contiguous range; \
                 or max_split_size_mb:{split_mb} so large cached blocks are not split by smaller requests; \
                 or allocate the large tensor before the many smaller long-lived ones."
            )
        };
        return (OomCause::Fragmentation, text);
    }
    if let Some(df) = device_free {
        if df >= requested {
            return (
                OomCause::Limit,
                format!(
                    "The device still had {} free, so a per-process cap stopped the {req} request (torch.cuda.set_per_process_memory_fraction \
                     or a memory limit): raise the cap, or reduce memory as for a full device — smaller batch, activation checkpointing, bf16. \
                     Only {fr} of the reserved memory was free (largest block {lg}).",
                    human(df)
                ),
            );
        }
    }
    (
        OomCause::Capacity,
        format!(
            "Out of capacity: the {req} request exceeds the {fr} reserved-but-free memory{}. Reduce the batch size or sequence length, \
             use activation checkpointing or bf16/fp16, release tensors kept across iterations (see leak candidates), \
             or shard parameters and optimizer state (FSDP/ZeRO).",
            device_free.map(|d| format!(" plus the {} the device had free", human(d))).unwrap_or_default()
        ),
    )
}

/// Names the categories live at the failure and points the remedy at them: a batch that does
/// not fit is told about its activations, state that does not fit about sharding. When the
/// free-but-split memory is no real share of what the process holds (under a tenth), the cause
/// is capacity, whatever the largest free block.
pub fn with_categories(o: &mut OomExplanation, live: Vec<memlens_api::CategoryBytes>) {
    use memlens_api::Category as C;
    let of = |cs: &[C]| -> i64 { live.iter().filter(|c| cs.contains(&c.category)).map(|c| c.bytes).sum() };
    // Under a cap the device's own free memory says nothing about what the process may use;
    // what it holds (reserved) does.
    if o.cause == OomCause::Fragmentation && o.reserved_free_bytes * 10 < o.reserved_bytes {
        o.cause = OomCause::Capacity;
        o.remedy = format!(
            "Out of capacity: live tensors hold {} of the {} reserved; the {} free in split blocks is too small a share \
             for defragmenting to help. {}",
            human(o.allocated_bytes),
            human(o.reserved_bytes),
            human(o.reserved_free_bytes),
            o.remedy
        );
    }
    if !live.is_empty() {
        let parts: Vec<String> = live
            .iter()
            .filter(|c| c.bytes > 0)
            .map(|c| format!("{} {}", c.category.name(), human(c.bytes)))
            .collect();
        o.remedy += &format!(" Live at the failure: {}.", parts.join(", "));
        let per_batch = of(&[C::Activation, C::Temporary, C::Input]);
        let state = of(&[C::Parameter, C::Gradient, C::OptimizerState]);
        if matches!(o.cause, OomCause::Capacity | OomCause::Limit) && of(&[C::Activation]) > 0 {
            o.remedy += &format!(
                " A smaller batch or activation checkpointing shrinks the {} that grows with the batch; sharding \
                 (FSDP/ZeRO) or a lighter optimizer the {} of parameters, gradients and optimizer state (try memlens whatif).",
                human(per_batch),
                human(state)
            );
        }
    }
    o.live_categories = live;
}
