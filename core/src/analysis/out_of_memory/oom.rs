//! OutOfMemory explanations of a snapshot: at each `oom` entry, the allocator's numbers there,
//! the cause ([`super::oom_cause::classify`], shared with OOMs read from text), the failed step
//! ([`super::failed_step`]: its phase, what is live in the user's terms, how much of the batch
//! fits), the remedies with the bytes each saves, and the verdict that leads with them.

use memlens_api::{OomCause, OomExplanation, PhaseRange};
use polars_core::prelude::*;

use super::failed_step::read_failure;
use super::oom_cause::{classify, remedies, verdict, OomFacts};
use crate::analysis::fragmentation::Fragmentation;
use crate::analysis::kv_cache::KvCacheReading;
use crate::analysis::peak::{live_groups_at, NoStackEvidence};
use crate::analysis::usage::Usage;
use crate::analysis::DeviceEvents;
use crate::stacks::StackResolver;
use crate::tables::Action;

/// Every OOM of the device, explained. `frag.at` must hold the state at each OOM entry, and
/// `lifetimes` its category columns.
#[allow(clippy::too_many_arguments)]
pub fn explain_ooms(
    ev: &DeviceEvents,
    usage: &Usage,
    frag: &Fragmentation,
    lifetimes: &DataFrame,
    stacks: &StackResolver,
    expandable: bool,
    evidence: &NoStackEvidence,
    phases: &[PhaseRange],
    kv: Option<&KvCacheReading>,
) -> PolarsResult<Vec<OomExplanation>> {
    let mut out = Vec::new();
    for i in ev.indices_of(Action::Oom) {
        let st = frag.at.get(&i).copied().unwrap_or_default();
        let facts = OomFacts {
            requested: ev.size().at(i),
            allocated: Some(usage.allocated_before(i)),
            reserved: Some(usage.reserved_before(i)),
            reserved_free: Some(st.free),
            largest_free_block: Some(st.largest_free),
            device_free: ev.device_free(i),
            expandable_segments: expandable,
            ..Default::default()
        };
        let mut cause = classify(&facts);
        let mut reading = read_failure(ev, stacks, phases, lifetimes, usage, i, &facts, cause, kv)?;
        if reading.phase.is_inference() && cause == OomCause::Fragmentation {
            // Split free blocks only decide which request fails when the whole request would
            // not fit anyway: then what stopped it is the cap or the device.
            let whole = classify(&OomFacts {
                reserved_free: None,
                ..facts
            });
            let again = read_failure(ev, stacks, phases, lifetimes, usage, i, &facts, whole, kv)?;
            if again.fits.as_ref().is_some_and(|f| f.batch_fraction < 1.0) {
                (cause, reading) = (whole, again);
            }
        }
        let list = remedies(
            cause,
            &facts,
            reading.phase,
            Some(&reading.summary),
            reading.fits.as_ref(),
        );
        let remedy = verdict(
            cause,
            &facts,
            reading.phase,
            Some(&reading.summary),
            &list,
            reading.fits.as_ref(),
        );
        out.push(OomExplanation {
            event_index: i,
            time_us: ev.time_us(i),
            requested_bytes: facts.requested,
            device_free_bytes: facts.device_free,
            reserved_bytes: usage.reserved_before(i),
            allocated_bytes: usage.allocated_before(i),
            reserved_free_bytes: st.free,
            largest_free_block_bytes: st.largest_free,
            cause,
            phase: reading.phase,
            allowed_bytes: None,
            device_total_bytes: None,
            processes: Vec::new(),
            non_pytorch_bytes: None,
            private_pool_bytes: None,
            remedy,
            remedies: list,
            fits: reading.fits,
            live_stacks: live_groups_at(lifetimes, i.checked_sub(1), 5, stacks, evidence)?,
            live_categories: reading.live,
            stack: stacks.user_frames(ev.stack().at(i)),
            text: None,
        });
    }
    Ok(out)
}
