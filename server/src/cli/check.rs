//! `memlens check NEW --baseline BASE`: a regression gate for CI. Each side is a snapshot file
//! or a report's share link (`http…/r/ID`), or the baseline a job's last good run
//! (`--baseline-job http…/j/ID`); the new run is held to limits on how far its
//! allocated peak, reserved peak and categories may grow from the baseline's. Exit 0 within
//! the limits, 1 past one, 2 when a side cannot be read. Prints a short verdict, the JSON
//! (`--json`), or a pull-request comment (`--format markdown`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use memlens_api::{
    bytes_label, signed_bytes_label, signed_ratio_label, CategoryLimit, CheckMeasure, CheckOutcome, Limit,
};
use memlens_core::analysis::check::{parse_category_limit, parse_limit};

use super::render::print_json;
use crate::app::check::{Baseline, CheckRequest, DEFAULT_MAX_PEAK_INCREASE_ARG};

#[derive(Args)]
pub struct CheckArgs {
    /// The new run: a snapshot file or a report link (`https://memlens.example/r/ID`).
    pub new: String,
    /// The baseline run: a snapshot file or a report link.
    #[arg(long, required_unless_present = "baseline_job", conflicts_with = "baseline_job")]
    pub baseline: Option<String>,
    /// The baseline is a job's last good run: its last analysed run that broke no limit
    /// (`https://memlens.example/j/ID`).
    #[arg(long, value_name = "JOB_LINK")]
    pub baseline_job: Option<String>,
    /// How far the allocated peak may grow: a percentage of the baseline's (`5%`) or a size
    /// (`512MiB`).
    #[arg(long, value_name = "LIMIT", default_value = DEFAULT_MAX_PEAK_INCREASE_ARG, value_parser = parse_limit)]
    pub max_peak_increase: Limit,
    /// How far the reserved peak may grow (unchecked when not given).
    #[arg(long, value_name = "LIMIT", value_parser = parse_limit)]
    pub max_reserved_increase: Option<Limit>,
    /// How far one category's bytes at the peak may grow, `CATEGORY=LIMIT`
    /// (`activation=10%`); repeat for several.
    #[arg(long, value_name = "CATEGORY=LIMIT", value_parser = parse_category_limit)]
    pub max_category_increase: Vec<CategoryLimit>,
    /// Print the JSON answer (the same as `--format json`).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// How long to wait for a linked report still being analysed, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub wait: u64,
    /// Category rules for files on disk, as for `memlens analyze`.
    #[arg(long, value_name = "FILE")]
    pub category_rules: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A short verdict and the numbers behind it.
    Text,
    /// A pull-request comment.
    Markdown,
    Json,
}

impl CheckArgs {
    /// The request these arguments make.
    pub fn request(&self) -> CheckRequest {
        CheckRequest {
            new: self.new.clone(),
            baseline: match (&self.baseline, &self.baseline_job) {
                (Some(b), _) => Baseline::Run(b.clone()),
                (None, Some(job)) => Baseline::LastGoodOfJob(job.clone()),
                (None, None) => unreachable!("clap requires one"),
            },
            max_peak_increase: self.max_peak_increase,
            max_reserved_increase: self.max_reserved_increase,
            max_category_increase: self.max_category_increase.clone(),
            wait: Duration::from_secs(self.wait),
            category_rules: self.category_rules.clone(),
        }
    }
}

pub fn check(args: CheckArgs) -> ExitCode {
    let outcome = match crate::app::check::check(&args.request()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("memlens: {e}");
            return ExitCode::from(2);
        }
    };
    let format = if args.json { OutputFormat::Json } else { args.format };
    match format {
        OutputFormat::Json => {
            if print_json(&outcome) != ExitCode::SUCCESS {
                return ExitCode::from(2);
            }
        }
        OutputFormat::Text => print!("{}", text(&outcome)),
        OutputFormat::Markdown => print!("{}", markdown(&outcome)),
    }
    ExitCode::from(if outcome.passed { 0 } else { 1 })
}

/// One measure's row: its name, both sides, the change, its limit and whether it held.
struct Row {
    name: String,
    baseline: i64,
    new: i64,
    limit: Option<Limit>,
    broken: bool,
}

fn rows(o: &CheckOutcome) -> Vec<Row> {
    let t = &o.thresholds;
    let broken = |m: CheckMeasure, c| o.violations.iter().any(|v| v.measure == m && v.category == c);
    let mut rows = vec![
        Row {
            name: "allocated peak".into(),
            baseline: o.baseline.peak_allocated_bytes,
            new: o.new.peak_allocated_bytes,
            limit: t.max_peak_increase,
            broken: broken(CheckMeasure::PeakAllocated, None),
        },
        Row {
            name: "reserved peak".into(),
            baseline: o.baseline.peak_reserved_bytes,
            new: o.new.peak_reserved_bytes,
            limit: t.max_reserved_increase,
            broken: broken(CheckMeasure::PeakReserved, None),
        },
    ];
    for c in &o.by_category {
        rows.push(Row {
            name: format!("{} at the peak", c.category.name()),
            baseline: c.baseline_bytes,
            new: c.new_bytes,
            limit: t
                .max_category_increase
                .iter()
                .find(|l| l.category == c.category)
                .map(|l| l.limit),
            broken: broken(CheckMeasure::Category, Some(c.category)),
        });
    }
    rows
}

impl Row {
    fn change(&self) -> String {
        let d = self.new - self.baseline;
        format!(
            "{} ({})",
            signed_bytes_label(d),
            signed_ratio_label(memlens_api::delta_ratio(d, self.baseline))
        )
    }
    fn limit_label(&self) -> String {
        self.limit.map_or("—".to_owned(), |l| l.to_string())
    }
}

/// The verdict first, then each measure on one line, then the stacks that moved most.
fn text(o: &CheckOutcome) -> String {
    let mut s = format!("{}\n", o.verdict);
    s += &format!("new       {}\nbaseline  {}\n", o.new.label, o.baseline.label);
    for r in rows(o) {
        let mark = match (r.limit, r.broken) {
            (None, _) => "",
            (Some(_), false) => "  ok",
            (Some(_), true) => "  EXCEEDED",
        };
        s += &format!(
            "  {:<28} {:>11} → {:>11}  {:<24} limit {}{mark}\n",
            r.name,
            bytes_label(r.baseline),
            bytes_label(r.new),
            r.change(),
            r.limit_label()
        );
    }
    if o.stacks_compared {
        s += "stacks that moved most at the peak:\n";
        for d in o.largest_stack_deltas.iter().take(5) {
            let stack = d.stack_line().unwrap_or_else(|| "(no stack)".to_owned());
            s += &format!("  {:>11}  {stack}\n", signed_bytes_label(d.delta_bytes));
        }
    } else {
        s += "stacks not compared (give two files, or two reports of one server)\n";
    }
    s
}

/// A pull-request comment: a heading with the outcome, the verdict, a table of the measures,
/// and the stacks that moved most folded away.
fn markdown(o: &CheckOutcome) -> String {
    let mut s = if o.passed {
        "### ✅ memlens: memory within limits\n\n".to_owned()
    } else {
        "### ❌ memlens: memory regression\n\n".to_owned()
    };
    s += &format!("{}\n\n", o.verdict);
    s += &format!(
        "New: `{}` · baseline: `{}`\n\n",
        o.new.label.replace('`', "'"),
        o.baseline.label.replace('`', "'")
    );
    s += "| measure | baseline | new | change | limit | |\n|---|--:|--:|--:|--:|---|\n";
    for r in rows(o) {
        let mark = match (r.limit, r.broken) {
            (None, _) => "",
            (Some(_), false) => "✅",
            (Some(_), true) => "❌",
        };
        s += &format!(
            "| {} | {} | {} | {} | {} | {mark} |\n",
            r.name,
            bytes_label(r.baseline),
            bytes_label(r.new),
            r.change(),
            r.limit_label()
        );
    }
    if o.stacks_compared && !o.largest_stack_deltas.is_empty() {
        s += "\n<details><summary>Stacks that moved most at the peak</summary>\n\n| change | stack |\n|--:|---|\n";
        for d in &o.largest_stack_deltas {
            let stack = d.stack_line().unwrap_or_else(|| "(no stack)".to_owned());
            s += &format!(
                "| {} | `{}` |\n",
                signed_bytes_label(d.delta_bytes),
                stack.replace('`', "'").replace('|', "\\|")
            );
        }
        s += "\n</details>\n";
    }
    s
}
