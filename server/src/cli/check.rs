//! `memlens check NEW --baseline BASE`: a regression gate for CI. Each side is a snapshot file
//! or a report's share link (`http…/r/ID`), or the baseline a job's last good run
//! (`--baseline-job http…/j/ID`); the new run is held to limits on how far its
//! allocated peak, reserved peak and categories may grow from the baseline's. Exit 0 within
//! the limits, 1 past one, 2 when a side cannot be read. Prints a short verdict, the JSON
//! (`--json`), or a pull-request comment (`--format markdown`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use memlens_api::{
    bytes_label, signed_bytes_label, signed_ratio_label, AnalyzeOutput, CategoryLimit, CheckMeasure, CheckOutcome,
    DeviceSummary, ErrorBody, JobView, Limit, ReportState, Thresholds,
};
use memlens_core::analysis::check::{check_run, checked_device, parse_category_limit, parse_limit, RunDelta};
use memlens_core::pipeline::{run_with, Input, NoSink};

use super::diff::compare_files;
use super::error::{CommandError, Unusable};
use super::render::print_json;

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
    #[arg(long, value_name = "LIMIT", default_value = "5%", value_parser = parse_limit)]
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

/// Why a side could not be read (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum SideError {
    #[error(transparent)]
    File(#[from] CommandError),
    #[error("{link}: {problem}")]
    Link { link: String, problem: String },
}

/// One side as given: a file on disk or a report on a server.
enum Side {
    File(PathBuf),
    Report { link: String, server: String, id: String },
}

impl Side {
    /// A link is `http(s)://HOST[/PREFIX]/r/ID` (a query or fragment after it is ignored);
    /// anything else is a path.
    fn parse(given: &str) -> Result<Side, SideError> {
        if !(given.starts_with("http://") || given.starts_with("https://")) {
            return Ok(Side::File(PathBuf::from(given)));
        }
        let bad = || SideError::Link {
            link: given.to_owned(),
            problem: "not a report link (expected http…/r/ID)".into(),
        };
        let path_end = given.find(['?', '#']).unwrap_or(given.len());
        let (server, id) = given[..path_end].rsplit_once("/r/").ok_or_else(bad)?;
        let id = id.trim_end_matches('/');
        if id.is_empty() || id.contains('/') {
            return Err(bad());
        }
        Ok(Side::Report {
            link: given.to_owned(),
            server: server.to_owned(),
            id: id.to_owned(),
        })
    }
}

/// A job's last analysed run that broke none of its limits, other than `new` itself.
fn last_good_run(job_link: &str, new: &Side) -> Result<Side, SideError> {
    let fail = |problem: String| SideError::Link {
        link: job_link.to_owned(),
        problem,
    };
    let path_end = job_link.find(['?', '#']).unwrap_or(job_link.len());
    let (server, id) = job_link[..path_end]
        .rsplit_once("/j/")
        .filter(|(s, id)| {
            (s.starts_with("http://") || s.starts_with("https://")) && !id.is_empty() && !id.contains('/')
        })
        .ok_or_else(|| fail("not a job link (expected http…/j/ID)".into()))?;
    let job: JobView =
        get_json(job_link, &format!("{server}/api/jobs/{id}"))?.ok_or_else(|| fail("the job is not ready".into()))?;
    let new_id = match new {
        Side::Report { id, .. } => Some(id.as_str()),
        Side::File(_) => None,
    };
    let run = job
        .runs
        .iter()
        .rev()
        .find(|r| r.state == ReportState::Ready && r.regression.is_none() && Some(r.id.as_str()) != new_id)
        .ok_or_else(|| {
            fail(format!(
                "job {:?} has no analysed run without a regression yet",
                job.name
            ))
        })?;
    Ok(Side::Report {
        link: format!("{server}{}", run.url),
        server: server.to_owned(),
        id: run.id.clone(),
    })
}

/// A report's summary, once its analysis is done (a 202 is waited on until `wait` runs out).
fn report_summary(link: &str, server: &str, id: &str, wait: Duration) -> Result<AnalyzeOutput, SideError> {
    let url = format!("{server}/api/reports/{id}");
    let start = Instant::now();
    loop {
        match get_json::<AnalyzeOutput>(link, &url)? {
            Some(summary) => return Ok(summary),
            None if start.elapsed() < wait => std::thread::sleep(Duration::from_secs(1)),
            None => {
                return Err(SideError::Link {
                    link: link.to_owned(),
                    problem: format!("still being analysed after {} s", wait.as_secs()),
                })
            }
        }
    }
}

/// `GET url` read as JSON; `None` on 202 (not ready yet). Errors name `link`.
fn get_json<T: serde::de::DeserializeOwned>(link: &str, url: &str) -> Result<Option<T>, SideError> {
    let fail = |problem: String| SideError::Link {
        link: link.to_owned(),
        problem,
    };
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .timeout_read(Duration::from_secs(300))
        .build();
    match agent.get(url).call() {
        Ok(resp) if resp.status() == 202 => Ok(None),
        Ok(resp) => serde_json::from_reader(resp.into_reader())
            .map(Some)
            .map_err(|e| fail(format!("unexpected answer from {url}: {e}"))),
        Err(ureq::Error::Status(code, resp)) => {
            let text = resp.into_string().unwrap_or_default();
            let why = serde_json::from_str::<ErrorBody>(&text).map_or(text, |e| e.error);
            Err(fail(format!("the server answered {code}: {why}")))
        }
        Err(e) => Err(fail(format!("cannot reach the server: {e}"))),
    }
}

/// A side's summary and the device it is compared on, for sides that are not both files or
/// both reports of one server.
struct Summarised {
    label: String,
    out: AnalyzeOutput,
    file_index: usize,
    device: i64,
}

fn summarised(side: &Side, args: &CheckArgs) -> Result<Summarised, SideError> {
    let (label, out) = match side {
        Side::File(path) => {
            let rules = memlens_core::analysis::categories::FrameRules::load(args.category_rules.as_deref())
                .map_err(CommandError::from)?;
            let out = run_with(vec![Input::path(path)], Default::default(), &rules, &mut NoSink)
                .map_err(CommandError::from)?;
            (path.display().to_string(), out)
        }
        Side::Report { link, server, id } => (link.clone(), report_summary(link, server, id, wait(args))?),
    };
    let (file_index, device) = checked_device(&out)
        .map(|(fi, d)| (fi, d.device))
        .ok_or_else(|| match side {
            Side::File(p) => CommandError::unusable(p.display().to_string(), Unusable::NoSnapshotWithDevice).into(),
            Side::Report { link, .. } => SideError::Link {
                link: link.clone(),
                problem: "the report has no allocator snapshot with a device".into(),
            },
        })?;
    Ok(Summarised {
        label: format!("{label} · {}", memlens_api::device_label(device)),
        out,
        file_index,
        device,
    })
}

impl Summarised {
    fn device(&self) -> &DeviceSummary {
        self.out.files[self.file_index]
            .devices
            .iter()
            .find(|d| d.device == self.device)
            .expect("chosen from these devices")
    }
}

fn wait(args: &CheckArgs) -> Duration {
    Duration::from_secs(args.wait)
}

/// The check: by the server when both sides are reports of one server (stacks compared
/// there), by this process otherwise (stacks compared when both sides are files).
fn outcome(args: &CheckArgs, thresholds: &Thresholds) -> Result<CheckOutcome, SideError> {
    let new = Side::parse(&args.new)?;
    let base = match (&args.baseline, &args.baseline_job) {
        (Some(b), _) => Side::parse(b)?,
        (None, Some(job)) => last_good_run(job, &new)?,
        (None, None) => unreachable!("clap requires one"),
    };
    let delta = match (&new, &base) {
        (Side::File(n), Side::File(b)) => compare_files((n, None), (b, None), args.category_rules.as_deref())
            .map(|c| RunDelta::from_comparison(&c))
            .map_err(SideError::File)?,
        (
            Side::Report {
                link: nl,
                server: ns,
                id: ni,
            },
            Side::Report {
                link: bl,
                server: bs,
                id: bi,
            },
        ) if ns == bs => {
            // Both analysed first: a report still being analysed is waited on, one that
            // failed is named.
            let (n, b) = (
                report_summary(nl, ns, ni, wait(args))?,
                report_summary(bl, bs, bi, wait(args))?,
            );
            let mut query = vec![("new", ni.clone()), ("baseline", bi.clone())];
            query.extend(thresholds.max_peak_increase.map(|l| ("max_peak_increase", l.to_arg())));
            query.extend(
                thresholds
                    .max_reserved_increase
                    .map(|l| ("max_reserved_increase", l.to_arg())),
            );
            if !thresholds.max_category_increase.is_empty() {
                let pairs: Vec<String> = thresholds
                    .max_category_increase
                    .iter()
                    .map(|c| format!("{}={}", c.category.name(), c.limit.to_arg()))
                    .collect();
                query.push(("max_category_increase", pairs.join(",")));
            }
            let qs = serde_urlencoded::to_string(&query).map_err(|e| SideError::Link {
                link: nl.clone(),
                problem: e.to_string(),
            })?;
            let mut out: CheckOutcome =
                get_json(nl, &format!("{ns}/api/check?{qs}"))?.ok_or_else(|| SideError::Link {
                    link: nl.clone(),
                    problem: "the check is not ready".into(),
                })?;
            let label = |link: &str, s: &AnalyzeOutput| {
                let device = checked_device(s).map_or(String::new(), |(_, d)| memlens_api::device_label(d.device));
                format!("{link} · {device}")
            };
            (out.new.label, out.baseline.label) = (label(nl, &n), label(bl, &b));
            return Ok(out);
        }
        _ => {
            let (n, b) = (summarised(&new, args)?, summarised(&base, args)?);
            RunDelta::from_summaries((&n.label, n.device()), (&b.label, b.device()))
        }
    };
    Ok(check_run(delta, thresholds))
}

impl CheckArgs {
    fn thresholds(&self) -> Thresholds {
        Thresholds {
            max_peak_increase: Some(self.max_peak_increase),
            max_reserved_increase: self.max_reserved_increase,
            max_category_increase: self.max_category_increase.clone(),
        }
    }
}

/// The check `args` asks for (what `--json` prints); the error names the side that could not
/// be read.
pub fn run_check(args: &CheckArgs) -> Result<CheckOutcome, SideError> {
    outcome(args, &args.thresholds())
}

/// The summary of the report a share link names (`http…/r/ID`), once analysed (a report being
/// analysed is waited on for `wait`); the error names the link.
pub fn report_at(link: &str, wait: Duration) -> Result<AnalyzeOutput, SideError> {
    match Side::parse(link)? {
        Side::Report { link, server, id } => report_summary(&link, &server, &id, wait),
        Side::File(_) => Err(SideError::Link {
            link: link.to_owned(),
            problem: "not a report link (expected http…/r/ID)".into(),
        }),
    }
}

pub fn check(args: CheckArgs) -> ExitCode {
    let thresholds = args.thresholds();
    let outcome = match outcome(&args, &thresholds) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_paths_are_told_apart() {
        match Side::parse("https://memlens.example/team/r/abc123?x=1").unwrap() {
            Side::Report { server, id, .. } => {
                assert_eq!(server, "https://memlens.example/team");
                assert_eq!(id, "abc123");
            }
            Side::File(_) => panic!("a link"),
        }
        assert!(matches!(Side::parse("runs/r/new.pickle").unwrap(), Side::File(_)));
        assert!(Side::parse("http://memlens.example/compare/a/b").is_err());
        assert!(Side::parse("http://memlens.example/r/").is_err());
    }
}
