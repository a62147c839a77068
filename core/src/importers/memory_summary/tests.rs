//! Memory summary tables of both unit families, full and abbreviated: the real ones captured
//! with PyTorch 2.11 (`traces/oom/`) against their own `memory_stats()`, and 1.13's shape
//! (`traces/oom_text/memory_summary_113_shape.txt`: the same counters printed by 1.13's code).

use super::*;
use crate::importers::common::text_lines::numbered_lines as lines;


fn stat(stats: &serde_json::Value, key: &str) -> i64 {
    stats[key].as_i64().unwrap_or_else(|| panic!("{key}"))
}

/// What the table printed for `v` in a column whose `all` value is `all`: rounded down in the
/// unit chosen for that column (2.x's rule), then converted back.
fn printed(v: i64, all: i64) -> i64 {
    let (mut v2, mut pref, mut unit) = (v, all as f64, 1i64);
    for _ in 0..5 {
        if pref < 768.0 * 1024.0 {
            break;
        }
        v2 /= 1024;
        pref /= 1024.0;
        unit *= 1024;
    }
    v2 * unit
}

#[test]
fn a_real_2x_summary_reads_as_its_memory_stats_print() {
    let stats: serde_json::Value =
        serde_json::from_str(include_str!("../../../../traces/oom/fwd_jump.memory_stats.json")).expect("json");
    for text in [
        include_str!("../../../../traces/oom/fwd_jump.memory_summary.txt"),
        include_str!("../../../../traces/oom/fwd_jump.memory_summary_abbreviated.txt"),
    ] {
        let t = find_memory_summaries(&lines(text));
        assert_eq!(t.len(), 1);
        let f = &t[0].facts;
        assert_eq!(f.num_ooms, stat(&stats, "num_ooms"));
        assert_eq!(f.num_alloc_retries, stat(&stats, "num_alloc_retries"));
        let a = f.allocated.expect("allocated");
        let peak = stat(&stats, "allocated_bytes.all.peak");
        assert_eq!(a.peak, printed(peak, peak));
        let cur = stat(&stats, "allocated_bytes.all.current");
        assert_eq!(a.current, printed(cur, cur));
        let r = f.reserved.expect("reserved");
        let rp = stat(&stats, "reserved_bytes.all.peak");
        assert_eq!(r.peak, printed(rp, rp));
        assert!(f.requested.is_some(), "2.x has the requested row");
        let n = f.allocations.expect("allocations");
        assert_eq!(n.current, stat(&stats, "allocation.all.current"));
    }
}

#[test]
fn the_113_shape_has_no_requested_row_and_its_own_units() {
    let t = find_memory_summaries(&lines(include_str!("../../../../traces/oom_text/memory_summary_113_shape.txt")));
    assert_eq!(t.len(), 1);
    let f = &t[0].facts;
    assert!(f.requested.is_none());
    assert_eq!(f.allocated.map(|a| a.peak), Some(16539 << 20));
    assert_eq!(f.reserved.map(|a| a.freed), Some(688128 << 10));
    assert_eq!(f.num_ooms, 1);
}
