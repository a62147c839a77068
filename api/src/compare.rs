//! Two runs side by side (`memlens diff`, `GET /api/compare`, the `/compare/{a}/{b}` page), and
//! the run overview of a report holding several ranks of one job.

use serde::{Deserialize, Serialize};

use crate::{Category, FragmentationPoint, OomCause};

/// One side of a comparison, as a link names it: a report id, optionally with the index of a
/// snapshot file in it and a device (`id`, `id:file`, `id:file:device`); the defaults are file 0
/// and the file's busiest device (highest allocated peak).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideRef {
    pub report: String,
    pub file: Option<usize>,
    pub device: Option<i64>,
}

impl SideRef {
    /// Reads `id`, `id:file` or `id:file:device`; `None` when a part is not a number or empty.
    pub fn parse(s: &str) -> Option<SideRef> {
        let mut parts = s.split(':');
        let report = parts.next().filter(|r| !r.is_empty())?.to_owned();
        let file = match parts.next() {
            Some(f) => Some(f.parse().ok()?),
            None => None,
        };
        let device = match parts.next() {
            Some(d) => Some(d.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(SideRef { report, file, device })
    }
}

impl std::fmt::Display for SideRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.report)?;
        match (self.file, self.device) {
            (Some(fi), Some(d)) => write!(f, ":{fi}:{d}"),
            (Some(fi), None) => write!(f, ":{fi}"),
            (None, Some(d)) => write!(f, ":0:{d}"),
            (None, None) => Ok(()),
        }
    }
}

/// Which side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Side {
    A,
    B,
}

/// How the two timelines of a comparison share one x axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CompareAxis {
    /// x = iterations: unit 0 is what precedes the first iteration, unit k + 1 is iteration k,
    /// the last unit what follows the last one (both sides have iteration ranges).
    Iteration,
    /// x = the fraction of each run's own span, 0 to 1.
    NormalizedTime,
}

/// A comparison of two devices (of two reports, or two devices or ranks of one), A − B.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct Comparison {
    pub a: ComparedRun,
    pub b: ComparedRun,
    /// A's allocated peak minus B's (requested bytes).
    pub peak_delta_bytes: i64,
    pub reserved_delta_bytes: i64,
    /// Each category's bytes at each side's peak and their difference, in `Category` order;
    /// the deltas add up to `peak_delta_bytes`.
    pub by_category: Vec<CategoryDelta>,
    /// Live bytes at each side's peak by stack (matched on the user frames, never on
    /// addresses), largest |delta| first; the deltas of all stacks add up to
    /// `peak_delta_bytes`, those not listed are summed in `by_stack_rest_delta_bytes`.
    pub by_stack: Vec<StackDelta>,
    pub by_stack_rest_delta_bytes: i64,
    /// Both allocated lines on one x axis.
    pub timeline: AlignedTimelines,
    /// Where most of the difference comes from, in plain words.
    pub headline: String,
}

/// One side's headline numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ComparedRun {
    /// What the side is called on the page (`gpt_train.pickle · cuda:0`).
    pub label: String,
    /// The report id (HTTP), `None` for files on disk (`memlens diff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
    pub file: String,
    pub file_index: usize,
    pub device: i64,
    /// The rank, when the report is a run of several ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    pub peak_allocated_bytes: i64,
    pub peak_reserved_bytes: i64,
    pub fragmentation_at_peak: Option<FragmentationPoint>,
    pub oom_count: usize,
    pub oom_causes: Vec<OomCause>,
    /// Iterations found (0: none; the timeline then uses normalised time).
    pub iterations: usize,
    /// The allocated peak within each iteration, in order (the steady state, iteration by
    /// iteration).
    pub iteration_peaks: Vec<i64>,
    /// Each category's steady state (most bytes within one iteration, median over them).
    pub steady_by_category: Vec<CategorySteady>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CategorySteady {
    pub category: Category,
    pub steady_bytes: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CategoryDelta {
    pub category: Category,
    /// Bytes of this category live at A's peak.
    pub bytes_a: i64,
    pub bytes_b: i64,
    /// `bytes_a − bytes_b`.
    pub delta_bytes: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct StackDelta {
    /// The user frames the two sides were matched on, innermost first (empty: no stack).
    pub stack: Vec<String>,
    /// Bytes live at A's peak from this stack minus those at B's.
    pub delta_bytes: i64,
    pub bytes_a: i64,
    pub bytes_b: i64,
    pub count_a: usize,
    pub count_b: usize,
    /// Set when only one side has allocations from this stack at its peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_in: Option<Side>,
}

impl StackDelta {
    /// The stack in one line: its innermost frame and, when another, the first frame outside
    /// `torch/` (the code that asked) — `torch/nn/modules/linear.py:134:forward ← … model.py:55:forward`;
    /// `None` for an empty stack.
    pub fn stack_line(&self) -> Option<String> {
        let first = self.stack.first()?;
        Some(match self.stack.iter().find(|f| !f.starts_with("torch/")) {
            Some(user) if user != first => format!("{first} ← … {user}"),
            _ => first.clone(),
        })
    }
}

/// Both allocated (and reserved) lines, bucketed on one shared x axis: bucket `i` covers
/// `[i·x_max/width, (i+1)·x_max/width)`; a side with nothing in a bucket holds its last value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct AlignedTimelines {
    pub axis: CompareAxis,
    pub x_max: f64,
    pub width: usize,
    /// Per bucket, the most allocated bytes of each side (`None` past that side's end).
    pub allocated_a: Vec<Option<i64>>,
    pub allocated_b: Vec<Option<i64>>,
    pub reserved_a: Vec<Option<i64>>,
    pub reserved_b: Vec<Option<i64>>,
}

/// A report of several ranks of one job: one entry per rank, from the stored summaries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct RunOverview {
    /// In rank order.
    pub ranks: Vec<RankPeak>,
    /// Where the ranks' numbers came from.
    pub rank_source: RankSource,
    /// The rank with the highest allocated peak.
    pub worst_rank: u32,
    pub median_peak_bytes: i64,
    pub min_peak_bytes: i64,
    pub max_peak_bytes: i64,
    /// `max − min` of the ranks' allocated peaks.
    pub spread_bytes: i64,
    /// How far the worst rank is above the median, as a fraction of the median.
    pub worst_above_median: f64,
    /// The worst rank is more than 10 % above the median (and by at least 64 MiB).
    pub imbalanced: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct RankPeak {
    pub rank: u32,
    pub file: String,
    /// Index of the file in the report (`files[file_index]`).
    pub file_index: usize,
    /// The device the rank ran on (its busiest, when the file has several).
    pub device: i64,
    pub peak_allocated_bytes: i64,
    pub peak_reserved_bytes: i64,
    pub oom_count: usize,
}

/// Where the rank numbers of a run came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RankSource {
    /// `rank3.pickle`, `rank_3_snapshot.pickle`, `snapshot-rank-3.pickle.gz`, …
    FileName,
    /// `rank` in the snapshot's `user_metadata` (set by the training script).
    UserMetadata,
    /// Neither told every file apart: the order the files were given in.
    UploadOrder,
}

impl RankSource {
    /// For people: where the numbers came from.
    pub fn describe(self) -> &'static str {
        match self {
            RankSource::FileName => "the file names",
            RankSource::UserMetadata => "the snapshots' user_metadata",
            RankSource::UploadOrder => "the upload order",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_references_read_back_as_written() {
        let r = SideRef::parse("abc:2:1").expect("parse");
        assert_eq!((r.report.as_str(), r.file, r.device), ("abc", Some(2), Some(1)));
        assert_eq!(r.to_string(), "abc:2:1");
        assert_eq!(SideRef::parse("abc").expect("parse").to_string(), "abc");
        assert_eq!(SideRef::parse("abc:1").expect("parse").file, Some(1));
        for bad in ["", ":1", "abc:x", "abc:1:y", "abc:1:2:3"] {
            assert!(SideRef::parse(bad).is_none(), "{bad}");
        }
    }
}
