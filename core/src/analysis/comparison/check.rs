//! The regression gate: a run's memory held to limits on how far it may move from a baseline's
//! ([`check_run`]), and the limits read as people write them ([`parse_limit`],
//! [`parse_category_limit`]: `5%`, `512MiB`, `activation=10%`).

use memlens_api::{
    delta_ratio, signed_bytes_label, signed_ratio_label, AnalyzeOutput, Category, CategoryCheck, CategoryLimit,
    CheckMeasure, CheckOutcome, CheckedRun, Comparison, DeviceSummary, Limit, StackDelta, Thresholds, Violation,
};

use crate::analysis::compare::category_deltas;
use crate::analysis::run::busiest_device;
use crate::importers::common::sizes::{scaled, unit_bytes};

/// How many of the largest stack deltas a check reports.
pub const LARGEST_STACKS: usize = 10;

/// A limit that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThresholdError {
    #[error("{0:?}: expected a percentage (5%) or a size (512MiB, 1.5GiB, 1073741824)")]
    NotALimit(String),
    #[error("{0:?}: expected CATEGORY=LIMIT (activation=10%)")]
    NotACategoryLimit(String),
    #[error("{given:?}: no such category (one of {known})")]
    UnknownCategory { given: String, known: String },
}

/// Reads `5%`, `2.5 %` (a fraction of the baseline) or `512MiB`, `1.5 GiB`, `1073741824`,
/// `100B` (bytes; binary units whatever the spelling, as PyTorch prints them).
pub fn parse_limit(text: &str) -> Result<Limit, ThresholdError> {
    let bad = || ThresholdError::NotALimit(text.to_owned());
    let t = text.trim();
    if let Some(number) = t.strip_suffix('%') {
        let r: f64 = number.trim().parse().map_err(|_| bad())?;
        return (r.is_finite() && r >= 0.0)
            .then_some(Limit::Ratio(r / 100.0))
            .ok_or_else(bad);
    }
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(end);
    let unit = match unit.trim() {
        "" => 1,
        u => unit_bytes(u).ok_or_else(bad)?,
    };
    scaled(number, unit).map(Limit::Bytes).ok_or_else(bad)
}

/// Reads the limits a query gives as text: each `None` or empty is unchecked, except the
/// allocated peak's, which defaults to 5 %; `categories` is `CATEGORY=LIMIT` pairs separated by
/// commas.
pub fn parse_thresholds(
    peak: Option<&str>,
    reserved: Option<&str>,
    categories: Option<&str>,
) -> Result<Thresholds, ThresholdError> {
    fn given(s: Option<&str>) -> Option<&str> {
        s.map(str::trim).filter(|s| !s.is_empty())
    }
    Ok(Thresholds {
        max_peak_increase: match given(peak) {
            Some(p) => Some(parse_limit(p)?),
            None => Thresholds::default_gate().max_peak_increase,
        },
        max_reserved_increase: given(reserved).map(parse_limit).transpose()?,
        max_category_increase: given(categories)
            .map(|c| c.split(',').map(parse_category_limit).collect::<Result<Vec<_>, _>>())
            .transpose()?
            .unwrap_or_default(),
    })
}

/// The file and device a run is checked on: its worst rank in a run of several ranks, else its
/// first file with a device; that file's busiest device.
pub fn checked_device(out: &AnalyzeOutput) -> Option<(usize, &DeviceSummary)> {
    let fi = match &out.run {
        Some(run) => run.ranks.iter().find(|r| r.rank == run.worst_rank)?.file_index,
        None => out.files.iter().position(|f| !f.devices.is_empty())?,
    };
    Some((fi, busiest_device(out.files.get(fi)?)?))
}

/// Reads `CATEGORY=LIMIT` (`activation=10%`, `optimizer_state=1GiB`).
pub fn parse_category_limit(text: &str) -> Result<CategoryLimit, ThresholdError> {
    let (name, limit) = text
        .split_once('=')
        .ok_or_else(|| ThresholdError::NotACategoryLimit(text.to_owned()))?;
    let category = Category::from_name(name.trim()).ok_or_else(|| ThresholdError::UnknownCategory {
        given: name.trim().to_owned(),
        known: Category::ALL.map(Category::name).join(", "),
    })?;
    Ok(CategoryLimit {
        category,
        limit: parse_limit(limit)?,
    })
}

/// What a check compares: each side's peaks and categories, and the stacks when both sides'
/// allocations could be matched.
pub struct RunDelta {
    pub new: CheckedRun,
    pub baseline: CheckedRun,
    /// Each category at each side's allocated peak (`bytes_a`: new, `bytes_b`: baseline).
    pub by_category: Vec<memlens_api::CategoryDelta>,
    /// `None` when the stacks were not compared.
    pub stacks: Option<Vec<StackDelta>>,
}

impl RunDelta {
    /// From a comparison whose A is the new run and B the baseline.
    pub fn from_comparison(c: &Comparison) -> RunDelta {
        let run = |r: &memlens_api::ComparedRun| CheckedRun {
            label: r.label.clone(),
            peak_allocated_bytes: r.peak_allocated_bytes,
            peak_reserved_bytes: r.peak_reserved_bytes,
        };
        RunDelta {
            new: run(&c.a),
            baseline: run(&c.b),
            by_category: c.by_category.clone(),
            stacks: Some(c.by_stack.iter().take(LARGEST_STACKS).cloned().collect()),
        }
    }

    /// From two devices' summaries alone (no stacks): one side a report on a server, the other
    /// a file, say.
    pub fn from_summaries(new: (&str, &DeviceSummary), baseline: (&str, &DeviceSummary)) -> RunDelta {
        let run = |(label, d): (&str, &DeviceSummary)| CheckedRun {
            label: label.to_owned(),
            peak_allocated_bytes: d.peak_allocated_bytes,
            peak_reserved_bytes: d.peak_reserved_bytes,
        };
        RunDelta {
            by_category: category_deltas(new.1, baseline.1),
            new: run(new),
            baseline: run(baseline),
            stacks: None,
        }
    }
}

/// Holds `delta`'s new run to `thresholds` against its baseline.
pub fn check_run(delta: RunDelta, thresholds: &Thresholds) -> CheckOutcome {
    let (new, base) = (&delta.new, &delta.baseline);
    let mut violations = Vec::new();
    let mut hold = |measure, category: Option<Category>, limit: Option<Limit>, base: i64, new: i64| {
        let d = new - base;
        let r = delta_ratio(d, base);
        let Some(limit) = limit.filter(|l| l.is_exceeded_by(d, r)) else {
            return;
        };
        let what = match category {
            Some(c) => format!("{} at the peak", c.name()),
            None if measure == CheckMeasure::PeakReserved => "reserved peak".to_owned(),
            None => "allocated peak".to_owned(),
        };
        violations.push(Violation {
            measure,
            category,
            limit,
            baseline_bytes: base,
            new_bytes: new,
            delta_bytes: d,
            delta_ratio: r,
            message: format!(
                "{what} {} ({}), limit {limit}",
                signed_bytes_label(d),
                signed_ratio_label(r)
            ),
        });
    };
    hold(
        CheckMeasure::PeakAllocated,
        None,
        thresholds.max_peak_increase,
        base.peak_allocated_bytes,
        new.peak_allocated_bytes,
    );
    hold(
        CheckMeasure::PeakReserved,
        None,
        thresholds.max_reserved_increase,
        base.peak_reserved_bytes,
        new.peak_reserved_bytes,
    );
    for cl in &thresholds.max_category_increase {
        let (b, n) = delta
            .by_category
            .iter()
            .find(|c| c.category == cl.category)
            .map_or((0, 0), |c| (c.bytes_b, c.bytes_a));
        hold(CheckMeasure::Category, Some(cl.category), Some(cl.limit), b, n);
    }
    let peak_delta_bytes = new.peak_allocated_bytes - base.peak_allocated_bytes;
    let reserved_delta_bytes = new.peak_reserved_bytes - base.peak_reserved_bytes;
    let peak_delta_ratio = delta_ratio(peak_delta_bytes, base.peak_allocated_bytes);
    let verdict = verdict(&violations, peak_delta_bytes, peak_delta_ratio, &delta);
    CheckOutcome {
        passed: violations.is_empty(),
        verdict,
        peak_delta_bytes,
        peak_delta_ratio,
        reserved_delta_bytes,
        reserved_delta_ratio: delta_ratio(reserved_delta_bytes, base.peak_reserved_bytes),
        by_category: delta
            .by_category
            .iter()
            .map(|c| CategoryCheck {
                category: c.category,
                baseline_bytes: c.bytes_b,
                new_bytes: c.bytes_a,
                delta_bytes: c.delta_bytes,
                delta_ratio: delta_ratio(c.delta_bytes, c.bytes_b),
            })
            .collect(),
        stacks_compared: delta.stacks.is_some(),
        largest_stack_deltas: delta.stacks.clone().unwrap_or_default(),
        thresholds: thresholds.clone(),
        violations,
        new: delta.new,
        baseline: delta.baseline,
    }
}

/// The outcome in one line: what broke (or that nothing did), the allocated peak's move when
/// it is not among them, and the category that drove the peak most.
fn verdict(violations: &[Violation], peak_delta: i64, peak_ratio: Option<f64>, delta: &RunDelta) -> String {
    let peak_move = format!(
        "{} → {}",
        memlens_api::bytes_label(delta.baseline.peak_allocated_bytes),
        memlens_api::bytes_label(delta.new.peak_allocated_bytes)
    );
    let driver = delta
        .by_category
        .iter()
        .filter(|c| c.delta_bytes.signum() == peak_delta.signum() && c.delta_bytes != 0)
        .max_by_key(|c| c.delta_bytes.abs())
        .map(|c| {
            format!(
                "; most from {} {}",
                c.category.name(),
                signed_bytes_label(c.delta_bytes)
            )
        })
        .unwrap_or_default();
    const LISTED: usize = 3;
    let mut broken: Vec<String> = violations.iter().take(LISTED).map(|v| v.message.clone()).collect();
    if violations.len() > LISTED {
        broken.push(format!("{} more", violations.len() - LISTED));
    }
    let peak_broken = violations.iter().any(|v| v.measure == CheckMeasure::PeakAllocated);
    match (broken.is_empty(), peak_broken) {
        (true, _) => format!(
            "passed: allocated peak {} ({}), {peak_move}{driver}",
            signed_bytes_label(peak_delta),
            signed_ratio_label(peak_ratio)
        ),
        (false, true) => format!("regression: {} ({peak_move}){driver}", broken.join("; ")),
        (false, false) => format!(
            "regression: {}; allocated peak {} ({}), {peak_move}",
            broken.join("; "),
            signed_bytes_label(peak_delta),
            signed_ratio_label(peak_ratio)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_api::CategoryDelta;

    fn delta(base: (i64, i64), new: (i64, i64), cats: &[(Category, i64, i64)]) -> RunDelta {
        let run = |label: &str, (a, r): (i64, i64)| CheckedRun {
            label: label.into(),
            peak_allocated_bytes: a,
            peak_reserved_bytes: r,
        };
        RunDelta {
            new: run("new", new),
            baseline: run("base", base),
            by_category: cats
                .iter()
                .map(|&(category, b, n)| CategoryDelta {
                    category,
                    bytes_a: n,
                    bytes_b: b,
                    delta_bytes: n - b,
                })
                .collect(),
            stacks: None,
        }
    }

    #[test]
    fn limits_read_as_people_write_them() {
        assert_eq!(parse_limit("5%"), Ok(Limit::Ratio(0.05)));
        assert_eq!(parse_limit(" 2.5 %"), Ok(Limit::Ratio(0.025)));
        assert_eq!(parse_limit("512MiB"), Ok(Limit::Bytes(512 << 20)));
        assert_eq!(parse_limit("1.5 GiB"), Ok(Limit::Bytes(3 << 29)));
        assert_eq!(parse_limit("1GB"), Ok(Limit::Bytes(1 << 30)));
        assert_eq!(parse_limit("1073741824"), Ok(Limit::Bytes(1 << 30)));
        assert_eq!(parse_limit("100B"), Ok(Limit::Bytes(100)));
        for bad in ["", "%", "five%", "-5%", "12 parsecs", "1.2.3", "GiB"] {
            assert!(parse_limit(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_category_limit("activation=10%"),
            Ok(CategoryLimit {
                category: Category::Activation,
                limit: Limit::Ratio(0.1)
            })
        );
        assert!(matches!(
            parse_category_limit("weights=1%"),
            Err(ThresholdError::UnknownCategory { .. })
        ));
        assert!(parse_category_limit("activation").is_err());
    }

    #[test]
    fn each_limit_kind_passes_within_and_fails_past() {
        let gib = 1i64 << 30;
        // Allocated 10 → 10.6 GiB (+6 %), reserved 12 → 12.5 GiB, activations 4 → 4.6 GiB (+15 %).
        let d = || {
            delta(
                (10 * gib, 12 * gib),
                (10 * gib + 6 * gib / 10, 12 * gib + gib / 2),
                &[
                    (Category::Parameter, 6 * gib, 6 * gib),
                    (Category::Activation, 4 * gib, 4 * gib + 6 * gib / 10),
                ],
            )
        };
        let check = |t: Thresholds| check_run(d(), &t);
        let failed = check(Thresholds::default_gate());
        assert!(!failed.passed);
        assert_eq!(failed.violations.len(), 1);
        assert_eq!(failed.violations[0].measure, CheckMeasure::PeakAllocated);
        assert_eq!(failed.peak_delta_bytes, 6 * gib / 10);
        assert!((failed.peak_delta_ratio.unwrap() - 0.06).abs() < 1e-9);
        assert_eq!(
            failed.verdict,
            "regression: allocated peak +614.4 MiB (+6.0 %), limit 5% (10.00 GiB → 10.60 GiB); most from activation +614.4 MiB"
        );
        let ratio = |r| Some(Limit::Ratio(r));
        assert!(
            check(Thresholds {
                max_peak_increase: ratio(0.07),
                ..Default::default()
            })
            .passed
        );
        // Bytes: 614.4 MiB is past 600 MiB, within 700 MiB.
        let bytes = |b: i64| Some(Limit::Bytes(b << 20));
        assert!(
            !check(Thresholds {
                max_peak_increase: bytes(600),
                ..Default::default()
            })
            .passed
        );
        assert!(
            check(Thresholds {
                max_peak_increase: bytes(700),
                ..Default::default()
            })
            .passed
        );
        // Reserved: +0.5 GiB is +4.2 %.
        let reserved = |r| Thresholds {
            max_reserved_increase: ratio(r),
            ..Default::default()
        };
        assert!(!check(reserved(0.04)).passed);
        assert!(check(reserved(0.05)).passed);
        // A category: activations +15 %; parameters unchanged.
        let category = |c, r| Thresholds {
            max_category_increase: vec![CategoryLimit {
                category: c,
                limit: Limit::Ratio(r),
            }],
            ..Default::default()
        };
        let act = check(category(Category::Activation, 0.1));
        assert_eq!(act.violations.len(), 1);
        assert_eq!(act.violations[0].category, Some(Category::Activation));
        assert!(check(category(Category::Activation, 0.2)).passed);
        assert!(check(category(Category::Parameter, 0.0)).passed);
        // A category absent from both sides has nothing to grow; one new in the run has.
        assert!(check(category(Category::Cache, 0.0)).passed);
        let none = Thresholds::default();
        let all = check(none.clone());
        assert!(all.passed, "no limit: reported, not checked");
        assert!(all
            .verdict
            .starts_with("passed: allocated peak +614.4 MiB (+6.0 %), 10.00 GiB → 10.60 GiB"));
        assert_eq!(all.by_category[1].delta_ratio.map(|r| (r * 100.0).round()), Some(15.0));
    }

    #[test]
    fn a_smaller_run_passes_whatever_the_limits() {
        let d = delta((10, 20), (5, 10), &[(Category::Activation, 10, 5)]);
        let t = Thresholds {
            max_peak_increase: Some(Limit::Bytes(0)),
            max_reserved_increase: Some(Limit::Ratio(0.0)),
            max_category_increase: vec![CategoryLimit {
                category: Category::Activation,
                limit: Limit::Ratio(0.0),
            }],
        };
        let out = check_run(d, &t);
        assert!(out.passed, "{:?}", out.violations);
        assert!(!out.stacks_compared);
    }
}
