//! What a run that keeps no frames leaves out — the whole usage series, the lifetimes'
//! addresses — is left out, not computed another way: on every device of every committed
//! snapshot, the lifetimes without addresses are those with them less the column, and the
//! allocated bytes the analyses read entry by entry are the series a run keeping frames stores.

use memlens_core::analysis::lifetimes::{allocation_lifetimes, allocation_lifetimes_with, Addresses};
use memlens_core::analysis::usage::{deltas, usage_over_time};
use memlens_core::tables::int_slice::IntSlice;
use memlens_core::tables::stack_ids::StackIds;

#[test]
fn frames_left_out_are_the_kept_ones_less_what_is_left_out() {
    let devices = memlens_tests::for_each_committed_device(|name, t, ev| {
        let device = ev.device;
        let kept = allocation_lifetimes(t, ev).expect("lifetimes");
        let left = allocation_lifetimes_with(t, ev, Addresses::Left).expect("lifetimes");
        // The addresses are held as the trace holds them (512-byte units after its base where
        // they fit, else i64): each an alloc's own address from the trace.
        let less = kept.drop_many(["addr", "addr_units", "addr_base"]);
        let addresses = memlens_core::tables::columns::addresses(&kept).expect("addresses");
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
        let stored = memlens_core::tables::columns::usage::allocated(&frame).expect("allocated");
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

/// Lifetimes built apart from their addresses read them from the trace as the lifetimes built
/// with them hold them: whole, a run of rows at a time (as an encoder takes them), and for the
/// rows of blocks from before the trace, which only the apart lifetimes keep.
#[test]
fn lifetime_addresses_read_from_the_trace_are_those_held_with_them() {
    use memlens_core::analysis::lifetimes::allocation_lifetimes_apart;
    use memlens_core::stored::AddressForm;
    use polars_core::prelude::Column;
    let mut predating_rows = 0;
    let devices = memlens_tests::for_each_committed_device(|name, t, ev| {
        let device = ev.device;
        let kept = allocation_lifetimes(t, ev).expect("lifetimes");
        let (apart, mut addresses) = allocation_lifetimes_apart(t, ev).expect("lifetimes");
        let less = kept.drop_many(["addr", "addr_units", "addr_base"]);
        assert!(apart.equals_missing(&less), "{name}: device {device}");
        let column = addresses.column(ev, &apart).expect("addresses");
        let held: Vec<&Column> = kept
            .columns()
            .iter()
            .filter(|c| ["addr", "addr_units", "addr_base"].contains(&c.name().as_str()))
            .collect();
        let read = column.columns();
        assert_eq!(held.len(), read.len(), "{name}: device {device}");
        for (&h, r) in held.iter().zip(&read) {
            assert!(
                h.equals_missing(r) && h.name() == r.name(),
                "{name}: device {device}: {}",
                h.name()
            );
        }
        let wanted = memlens_core::tables::columns::addresses(&kept).expect("addresses");
        let n = column.len();
        match column.form() {
            AddressForm::Units { base } => {
                assert!(
                    matches!(wanted, IntSlice::U32 { base: b, .. } if b == base),
                    "{name}: device {device}"
                );
                // Runs of rows that do not start at 0, the last one short.
                let mut units = Vec::with_capacity(n);
                for from in (0..n).step_by(1_000) {
                    units.extend(column.units(from..(from + 1_000).min(n)));
                }
                let IntSlice::U32 { offsets, .. } = wanted else {
                    unreachable!()
                };
                assert_eq!(units, offsets, "{name}: device {device}");
            }
            AddressForm::Wide => {
                assert!(matches!(wanted, IntSlice::I64(_)), "{name}: device {device}");
            }
        }
        let wide: Vec<i64> = (0..n)
            .step_by(777)
            .flat_map(|from| column.wide(from..(from + 777).min(n)))
            .collect();
        assert_eq!(
            wide,
            (0..n).map(|r| wanted.at(r)).collect::<Vec<_>>(),
            "{name}: device {device}"
        );
        let rising = (1..n).all(|r| wanted.at(r - 1) <= wanted.at(r));
        assert_eq!(column.never_decrease(), rising, "{name}: device {device}");
        // Neither end in the trace: a block from before it.
        let alloc = kept
            .column("alloc_idx")
            .and_then(|c| c.i32().cloned())
            .expect("alloc_idx");
        let free = kept
            .column("free_idx")
            .and_then(|c| c.i32().cloned())
            .expect("free_idx");
        predating_rows += alloc
            .into_no_null_iter()
            .zip(free.into_no_null_iter())
            .filter(|&(a, f)| a < 0 && f < 0)
            .count();
        // The addresses kept of some rows are theirs; others are not kept.
        let rows: Vec<usize> = (0..n).step_by(3).collect();
        addresses.keep_addresses_of(ev, &apart, &rows).expect("kept");
        for r in 0..n.min(100) {
            let want = (r % 3 == 0).then(|| wanted.at(r));
            assert_eq!(addresses.kept_at(r), want, "{name}: device {device}, row {r}");
        }
    });
    assert!(devices >= 10, "only {devices} devices swept");
    assert!(predating_rows > 0, "no block from before a trace swept");
}
