//! A comparison's verdict, A → B in one sentence: what changed most — the allocated peak,
//! reserved memory, fragmentation at the peak — first and by how much, what drove it (a
//! category, a stack), the rest after it, and the allocator setting the two runs differ in
//! when there is one (`expandable segments cut the fragmentation at the peak 0.33 → 0.11; reserved
//! +666.0 MiB; allocated peak unchanged`).

use memlens_api::{bytes_label, CategoryDelta, ComparedRun, StackDelta};

/// A change below this share of the larger side is "unchanged".
const UNCHANGED: f64 = 0.005;
/// A fragmentation index change below this is "unchanged".
const FRAGMENTATION_UNCHANGED: f64 = 0.05;

/// What the two runs' allocator settings differ in, as the subject of the verdict
/// (`expandable segments`), from each side's `expandable_segments` and `PYTORCH_CUDA_ALLOC_CONF`.
pub struct SettingChange {
    pub subject: String,
}

impl SettingChange {
    /// `None` when nothing is known to differ.
    pub fn between(a: (Option<bool>, Option<&str>), b: (Option<bool>, Option<&str>)) -> Option<SettingChange> {
        let expandable = |s: (Option<bool>, Option<&str>)| {
            s.0.or_else(|| s.1.map(|c| c.replace(' ', "").contains("expandable_segments:True")))
        };
        match (expandable(a), expandable(b)) {
            (Some(x), Some(y)) if x != y => Some(SettingChange {
                subject: if y {
                    "expandable segments (on in B)".to_owned()
                } else {
                    "turning expandable segments off (in B)".to_owned()
                },
            }),
            _ => match (a.1, b.1) {
                (Some(x), Some(y)) if x != y => Some(SettingChange {
                    subject: format!("PYTORCH_CUDA_ALLOC_CONF {y} (was {x})"),
                }),
                _ => None,
            },
        }
    }
}

/// One change and how much it weighs (its share of the larger side, or the index change).
struct Change {
    weight: f64,
    /// As the lead of the sentence (after its subject).
    lead: String,
    /// As one of the clauses after it.
    clause: String,
}

fn signed(b: i64) -> String {
    if b >= 0 {
        format!("+{}", bytes_label(b))
    } else {
        format!("−{}", bytes_label(-b))
    }
}

/// A change named `what` from `a` to `b` (as shown), with its signed size when it has one;
/// "unchanged" when it weighs less than `floor`.
fn change(what: &str, (a, b): (String, String), rose: bool, delta: Option<String>, weight: f64, floor: f64) -> Change {
    if weight < floor {
        let same = format!("{what} unchanged ({b})");
        return Change {
            weight,
            lead: same.clone(),
            clause: same,
        };
    }
    let verb = if rose { "raised" } else { "cut" };
    let (lead, clause) = match delta {
        Some(d) => (
            format!("{verb} the {what} {a} → {b} ({d})"),
            format!("{what} {d} ({a} → {b})"),
        ),
        None => (format!("{verb} the {what} {a} → {b}"), format!("{what} {a} → {b}")),
    };
    Change { weight, lead, clause }
}

/// The change from `a` to `b` bytes, named `what` (`allocated peak`, `reserved`).
fn bytes_change(what: &str, a: i64, b: i64) -> Change {
    let weight = (b - a).abs() as f64 / a.max(b).max(1) as f64;
    let shown = (bytes_label(a), bytes_label(b));
    change(what, shown, b > a, Some(signed(b - a)), weight, UNCHANGED)
}

fn fragmentation_change(a: f64, b: f64) -> Change {
    let shown = (format!("{a:.2}"), format!("{b:.2}"));
    let what = "fragmentation at the peak";
    change(what, shown, b > a, None, (b - a).abs(), FRAGMENTATION_UNCHANGED)
}

/// What drove the allocated peak's change from A to B: the category and the stack that moved
/// most in its direction (`activation +1.2 GiB, most from model.py:55 forward`).
fn peak_driver(delta_b_minus_a: i64, cats: &[CategoryDelta], stacks: &[StackDelta]) -> Option<String> {
    let toward = |d: i64| d != 0 && (-d).signum() == delta_b_minus_a.signum();
    let cat = cats
        .iter()
        .filter(|c| toward(c.delta_bytes))
        .max_by_key(|c| c.delta_bytes.abs())?;
    let mut s = format!("{} {}", cat.category.name(), signed(-cat.delta_bytes));
    if let Some(line) = stacks
        .iter()
        .filter(|d| toward(d.delta_bytes))
        .max_by_key(|d| d.delta_bytes.abs())
        .and_then(StackDelta::stack_line)
    {
        s.push_str(&format!(", most from {line}"));
    }
    Some(s)
}

/// The verdict of A → B, its largest change first.
pub fn verdict(
    a: &ComparedRun,
    b: &ComparedRun,
    cats: &[CategoryDelta],
    stacks: &[StackDelta],
    setting: Option<&SettingChange>,
) -> String {
    let mut peak = bytes_change("allocated peak", a.peak_allocated_bytes, b.peak_allocated_bytes);
    if peak.weight >= UNCHANGED {
        if let Some(driver) = peak_driver(b.peak_allocated_bytes - a.peak_allocated_bytes, cats, stacks) {
            peak.lead.push_str(&format!(": {driver}"));
            peak.clause.push_str(&format!(": {driver}"));
        }
    }
    let mut changes = vec![
        peak,
        bytes_change("reserved", a.peak_reserved_bytes, b.peak_reserved_bytes),
    ];
    if let (Some(fa), Some(fb)) = (&a.fragmentation_at_peak, &b.fragmentation_at_peak) {
        changes.push(fragmentation_change(fa.fragmentation_index, fb.fragmentation_index));
    }
    // The largest change leads (the peak on a tie: it is what fits or not).
    let lead = (0..changes.len())
        .rev()
        .max_by(|&x, &y| changes[x].weight.total_cmp(&changes[y].weight).then(y.cmp(&x)))
        .unwrap_or(0);
    let first = &changes[lead];
    let mut s = if first.weight < UNCHANGED {
        format!("B matches A: {}", first.clause)
    } else {
        match setting {
            Some(c) => format!("{} {}", c.subject, first.lead),
            None => format!("B {}", first.lead),
        }
    };
    for (k, c) in changes.iter().enumerate() {
        if k != lead {
            s.push_str("; ");
            s.push_str(&c.clause);
        }
    }
    s.push('.');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_api::{Category, FragmentationPoint};

    const GIB: i64 = 1 << 30;

    fn run(peak: i64, reserved: i64, fragmentation: f64) -> ComparedRun {
        ComparedRun {
            label: String::new(),
            report: None,
            file: String::new(),
            file_index: 0,
            device: 0,
            rank: None,
            peak_allocated_bytes: peak,
            peak_reserved_bytes: reserved,
            fragmentation_at_peak: Some(FragmentationPoint {
                event_index: 0,
                time_us: None,
                reserved_bytes: reserved,
                active_bytes: peak,
                reserved_free_bytes: reserved - peak,
                largest_free_block_bytes: 0,
                fragmentation_index: fragmentation,
            }),
            oom_count: 0,
            oom_causes: Vec::new(),
            iterations: 0,
            iteration_peaks: Vec::new(),
            steady_by_category: Vec::new(),
        }
    }

    #[test]
    fn the_largest_change_leads_with_what_drove_it() {
        let cats = [CategoryDelta {
            category: Category::Activation,
            bytes_a: 6 * GIB,
            bytes_b: 2 * GIB,
            delta_bytes: 4 * GIB,
        }];
        let v = verdict(
            &run(8 * GIB, 9 * GIB, 0.3),
            &run(4 * GIB, 8 * GIB, 0.31),
            &cats,
            &[],
            None,
        );
        assert_eq!(
            v,
            "B cut the allocated peak 8.00 GiB → 4.00 GiB (−4.00 GiB): activation −4.00 GiB; \
             reserved −1.00 GiB (9.00 GiB → 8.00 GiB); fragmentation at the peak unchanged (0.31)."
        );
    }

    #[test]
    fn a_setting_the_runs_differ_in_is_the_subject() {
        let on = SettingChange::between((Some(false), None), (Some(true), None));
        let v = verdict(
            &run(8 * GIB, 10 * GIB, 0.6),
            &run(8 * GIB, 9 * GIB, 0.1),
            &[],
            &[],
            on.as_ref(),
        );
        assert!(
            v.starts_with("expandable segments (on in B) cut the fragmentation at the peak 0.60 → 0.10; "),
            "{v}"
        );
        assert!(v.contains("allocated peak unchanged (8.00 GiB)"), "{v}");
        let conf = SettingChange::between(
            (None, Some("expandable_segments:True")),
            (None, Some("garbage_collection_threshold:0.6")),
        );
        assert_eq!(
            conf.map(|c| c.subject),
            Some("turning expandable segments off (in B)".to_owned())
        );
        let conf = SettingChange::between(
            (None, Some("max_split_size_mb:128")),
            (None, Some("max_split_size_mb:512")),
        );
        assert_eq!(
            conf.map(|c| c.subject),
            Some("PYTORCH_CUDA_ALLOC_CONF max_split_size_mb:512 (was max_split_size_mb:128)".to_owned())
        );
    }

    #[test]
    fn runs_alike_say_so() {
        let v = verdict(&run(8 * GIB, 9 * GIB, 0.3), &run(8 * GIB, 9 * GIB, 0.3), &[], &[], None);
        assert!(v.starts_with("B matches A: "), "{v}");
    }
}
