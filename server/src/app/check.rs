//! `check`: a new run held to limits on how far its allocated peak, reserved peak and
//! categories may grow from a baseline's. The request names its runs as given (paths or
//! links, resolved here once) and its limits typed; the default limit lives here, once.

use std::path::PathBuf;
use std::time::Duration;

use memlens_api::{AnalyzeOutput, CategoryLimit, CheckOutcome, DeviceSummary, Limit, Thresholds};
use memlens_core::analysis::check::{check_run, checked_device, RunDelta};
use memlens_core::pipeline::{run_with, Input};

use super::compare::compare_files;
use super::error::{CommandError, Unusable};
use super::source::{get_json, last_good_run, report_summary, Source, SourceError};

/// How far the allocated peak may grow when the request names no limit: 5 % of the baseline's.
pub const DEFAULT_MAX_PEAK_INCREASE: Limit = Limit::Ratio(0.05);
/// [`DEFAULT_MAX_PEAK_INCREASE`] as a command line writes it.
pub const DEFAULT_MAX_PEAK_INCREASE_ARG: &str = "5%";

/// The baseline a new run is held to.
pub enum Baseline {
    /// A snapshot file or a report link.
    Run(String),
    /// A job's last analysed run that broke no limit (`http…/j/ID`).
    LastGoodOfJob(String),
}

/// A check, as any transport asks for it.
pub struct CheckRequest {
    /// The new run: a snapshot file or a report link.
    pub new: String,
    pub baseline: Baseline,
    pub max_peak_increase: Limit,
    pub max_reserved_increase: Option<Limit>,
    pub max_category_increase: Vec<CategoryLimit>,
    /// How long to wait for a linked report still being analysed.
    pub wait: Duration,
    /// Category rules for files on disk.
    pub category_rules: Option<PathBuf>,
}

/// A check as text names it (the MCP tool's arguments): its runs as given and its limits as
/// `memlens check`'s flags write them, parsed by the same functions.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct CheckSpec {
    /// The new run: a snapshot path or a memlens report link (http…/r/ID).
    pub new: String,
    /// The baseline run: a snapshot path or a report link.
    pub baseline: Option<String>,
    /// The baseline is this job's last good run (http…/j/ID).
    pub baseline_job: Option<String>,
    #[serde(default)]
    pub thresholds: LimitsAsText,
}

/// The limits of a check, as `memlens check`'s flags write them.
#[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
pub struct LimitsAsText {
    /// `5%` (the default) or a size (`512MiB`).
    pub max_peak_increase: Option<String>,
    /// How far the reserved peak may grow (unchecked when not given).
    pub max_reserved_increase: Option<String>,
    /// Per category (parameter, gradient, optimizer_state, activation, temporary, input, cache,
    /// other): `10%` or a size.
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, String>")]
    pub max_category_increase: serde_json::Map<String, serde_json::Value>,
}

impl CheckSpec {
    /// The request this names, waiting at most `wait` for a linked report still being analysed.
    pub fn request(self, wait: Duration) -> Result<CheckRequest, CommandError> {
        use memlens_core::analysis::check::{parse_category_limit, parse_limit};
        let t = self.thresholds;
        let limit = |s: &Option<String>| s.as_deref().map(parse_limit).transpose();
        let max_category_increase = t
            .max_category_increase
            .iter()
            .map(|(c, l)| {
                let l = l.as_str().map_or_else(|| l.to_string(), str::to_owned);
                parse_category_limit(&format!("{c}={l}"))
            })
            .collect::<Result<Vec<CategoryLimit>, _>>()?;
        let baseline = match (self.baseline, self.baseline_job) {
            (Some(b), None) => Baseline::Run(b),
            (None, Some(job)) => Baseline::LastGoodOfJob(job),
            _ => return Err(CommandError::Usage("give one of baseline and baseline_job")),
        };
        Ok(CheckRequest {
            new: self.new,
            baseline,
            max_peak_increase: limit(&t.max_peak_increase)?.unwrap_or(DEFAULT_MAX_PEAK_INCREASE),
            max_reserved_increase: limit(&t.max_reserved_increase)?,
            max_category_increase,
            wait,
            category_rules: None,
        })
    }
}

impl CheckRequest {
    fn thresholds(&self) -> Thresholds {
        Thresholds {
            max_peak_increase: Some(self.max_peak_increase),
            max_reserved_increase: self.max_reserved_increase,
            max_category_increase: self.max_category_increase.clone(),
        }
    }
}

/// The check a request asks for (what `--json` prints); the error names the run that could not
/// be read.
pub fn check(req: &CheckRequest) -> Result<CheckOutcome, SourceError> {
    outcome(req, &req.thresholds())
}

/// A side's summary and the device it is compared on, for sides that are not both files or
/// both reports of one server.
struct Summarised {
    label: String,
    out: AnalyzeOutput,
    file_index: usize,
    device: i64,
}

fn summarised(side: &Source, req: &CheckRequest) -> Result<Summarised, SourceError> {
    let (label, out) = match side {
        Source::File(path) => {
            let rules = memlens_core::analysis::categories::FrameRules::load(req.category_rules.as_deref())
                .map_err(CommandError::from)?;
            let out = run_with(vec![Input::path(path)], Default::default(), &rules).map_err(CommandError::from)?;
            (path.display().to_string(), out)
        }
        Source::Report { link, server, id } => (link.clone(), report_summary(link, server, id, req.wait)?),
    };
    let (file_index, device) = checked_device(&out)
        .map(|(fi, d)| (fi, d.device))
        .ok_or_else(|| match side {
            Source::File(p) => CommandError::unusable(p.display().to_string(), Unusable::NoSnapshotWithDevice).into(),
            Source::Report { link, .. } => SourceError::Link {
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

/// The check: by the server when both sides are reports of one server (stacks compared
/// there), by this process otherwise (stacks compared when both sides are files).
fn outcome(req: &CheckRequest, thresholds: &Thresholds) -> Result<CheckOutcome, SourceError> {
    let new = Source::parse(&req.new)?;
    let base = match &req.baseline {
        Baseline::Run(b) => Source::parse(b)?,
        Baseline::LastGoodOfJob(job) => last_good_run(job, &new)?,
    };
    let delta = match (&new, &base) {
        (Source::File(n), Source::File(b)) => compare_files((n, None), (b, None), req.category_rules.as_deref())
            .map(|c| RunDelta::from_comparison(&c))
            .map_err(SourceError::File)?,
        (
            Source::Report {
                link: nl,
                server: ns,
                id: ni,
            },
            Source::Report {
                link: bl,
                server: bs,
                id: bi,
            },
        ) if ns == bs => {
            // Both analysed first: a report still being analysed is waited on, one that
            // failed is named.
            let (n, b) = (
                report_summary(nl, ns, ni, req.wait)?,
                report_summary(bl, bs, bi, req.wait)?,
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
            let qs = serde_urlencoded::to_string(&query).map_err(|e| SourceError::Link {
                link: nl.clone(),
                problem: e.to_string(),
            })?;
            let mut out: CheckOutcome =
                get_json(nl, &format!("{ns}/api/check?{qs}"))?.ok_or_else(|| SourceError::Link {
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
            let (n, b) = (summarised(&new, req)?, summarised(&base, req)?);
            RunDelta::from_summaries((&n.label, n.device()), (&b.label, b.device()))
        }
    };
    Ok(check_run(delta, thresholds))
}
