//! What a run that keeps no frames leaves out — the whole usage series, the lifetimes'
//! addresses — is left out, not computed another way: on every device of every committed
//! snapshot, the lifetimes without addresses are those with them less the column, and the
//! allocated bytes the analyses read entry by entry are the series a run keeping frames stores.

use memlens_core::analysis::lifetimes::{allocation_lifetimes, allocation_lifetimes_with, Addresses};
use memlens_core::analysis::usage::{deltas, usage_over_time};
use memlens_core::int_slice::IntSlice;
use memlens_core::stack_ids::StackIds;

#[test]
fn frames_left_out_are_the_kept_ones_less_what_is_left_out() {
    let devices = memlens_tests::for_each_committed_device(|name, t, ev| {
        let device = ev.device;
        let kept = allocation_lifetimes(t, ev).expect("lifetimes");
        let left = allocation_lifetimes_with(t, ev, Addresses::Left).expect("lifetimes");
        // The addresses are held as the trace holds them (512-byte units after its base where
        // they fit, else i64): each an alloc's own address from the trace.
        let less = kept.drop_many(["addr", "addr_units", "addr_base"]);
        let addresses = memlens_core::columns::addresses(&kept).expect("addresses");
        let narrow = |a: IntSlice| matches!(a, IntSlice::U32 { .. });
        assert_eq!(narrow(addresses), narrow(ev.addr()), "{name}: device {device}");
        assert!(left.equals_missing(&less), "{name}: device {device}");
        // Sizes below 4 GiB are held as u32: each an alloc's own size from the trace.
        let size = kept.column("size").and_then(|c| c.u32().cloned()).expect("u32 sizes");
        let alloc_idx = kept
            .column("alloc_idx")
            .and_then(|c| c.i32().cloned())
            .expect("alloc_idx");
        // Stack ids below 65,536 are held as u16 in the lifetimes, and the trace's sizes and
        // stacks as codes of their few pairs: each an alloc's own stack from the trace.
        let stack = StackIds::of(&kept, "stack").expect("stack ids");
        assert!(
            matches!(stack, StackIds::U16(_))
                && matches!(ev.stack(), StackIds::Coded { .. })
                && matches!(ev.size(), IntSlice::Coded { .. }),
            "{name}: device {device}"
        );
        for (row, (s, a)) in size.into_no_null_iter().zip(alloc_idx.into_no_null_iter()).enumerate() {
            if let Ok(a) = usize::try_from(a) {
                assert_eq!(i64::from(s), ev.size().at(a), "{name}: device {device}, entry {a}");
                assert_eq!(stack.at(row), ev.stack().at(a), "{name}: device {device}, entry {a}");
                assert_eq!(addresses.at(row), ev.addr().at(a), "{name}: device {device}, entry {a}");
            }
        }

        let usage = usage_over_time(t, ev).expect("usage");
        let mut now = usage.initial_allocated;
        let series: Vec<i64> = ev
            .action()
            .iter()
            .zip(ev.size())
            .map(|(&a, s)| {
                now += deltas(a, s).0;
                now
            })
            .collect();
        let frame = usage.frame().expect("frame");
        let stored = memlens_core::columns::usage::allocated(&frame).expect("allocated");
        assert_eq!(stored.to_vec(), series, "{name}: device {device}");
        for i in (0..series.len()).step_by((series.len() / 50).max(1)) {
            assert_eq!(
                usage.allocated_after(i),
                Some(series[i]),
                "{name}: device {device}, entry {i}"
            );
            let before = if i == 0 { usage.initial_allocated } else { series[i - 1] };
            assert_eq!(usage.allocated_before(i), before, "{name}: device {device}, entry {i}");
        }
    });
    assert!(devices >= 10, "only {devices} devices swept");
}
