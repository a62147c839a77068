//! A regression gate (`memlens check NEW --baseline BASE`): how far a run's memory moved from a
//! baseline's, the limits it was held to, and which it broke.

use serde::{Deserialize, Serialize};

use crate::{bytes_label, Category, StackDelta};

/// How far a measure may grow from the baseline: a number of bytes, or a fraction of the
/// baseline's value (`0.05` is 5 %).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Bytes(i64),
    Ratio(f64),
}

impl Limit {
    /// Whether a growth of `delta_bytes` (a fraction `delta_ratio` of the baseline, `None` when
    /// the baseline was 0) goes past the limit. Growth exactly at the limit is within it; any
    /// growth from a baseline of 0 is past a fraction.
    pub fn is_exceeded_by(self, delta_bytes: i64, delta_ratio: Option<f64>) -> bool {
        match self {
            Limit::Bytes(b) => delta_bytes > b,
            Limit::Ratio(r) => match delta_ratio {
                Some(d) => d > r,
                None => delta_bytes > 0,
            },
        }
    }
}

impl Limit {
    /// The limit as `memlens check` and `/api/check` read it back exactly: `1073741824`, `5%`.
    pub fn to_arg(self) -> String {
        match self {
            Limit::Bytes(b) => b.to_string(),
            Limit::Ratio(r) => format!("{}%", trimmed(r * 100.0, 9)),
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Limit::Bytes(b) => write!(f, "{}", bytes_label(b)),
            Limit::Ratio(r) => write!(f, "{}%", trimmed(r * 100.0, 2)),
        }
    }
}

/// `x` with at most `decimals` decimals and no trailing zeros (`5.000000000000001` → `5`).
fn trimmed(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// One category's limit (`--max-category-increase activation=10%`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CategoryLimit {
    pub category: Category,
    pub limit: Limit,
}

/// The limits a check holds a run to; a measure without one is reported, not checked.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct Thresholds {
    /// On the allocated peak.
    pub max_peak_increase: Option<Limit>,
    /// On the reserved peak.
    pub max_reserved_increase: Option<Limit>,
    /// On a category's bytes at the allocated peak.
    #[serde(default)]
    pub max_category_increase: Vec<CategoryLimit>,
}

impl Thresholds {
    /// The allocated peak may grow by 5 %, nothing else is checked.
    pub fn default_gate() -> Thresholds {
        Thresholds {
            max_peak_increase: Some(Limit::Ratio(0.05)),
            ..Thresholds::default()
        }
    }
}

/// What a check measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CheckMeasure {
    /// The allocated peak.
    PeakAllocated,
    /// The reserved peak.
    PeakReserved,
    /// One category's bytes at the allocated peak (`category` says which).
    Category,
}

/// A limit a run went past.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct Violation {
    pub measure: CheckMeasure,
    /// The category, for [`CheckMeasure::Category`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    pub limit: Limit,
    pub baseline_bytes: i64,
    pub new_bytes: i64,
    pub delta_bytes: i64,
    /// `delta / baseline`; `None` when the baseline was 0.
    pub delta_ratio: Option<f64>,
    /// The violation in one line: `allocated peak +1.20 GiB (+8.1 %), limit 5%`.
    pub message: String,
}

/// One side of a check in a few numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CheckedRun {
    /// The file or link and the device compared (`gpt.pickle · cuda:0`).
    pub label: String,
    pub peak_allocated_bytes: i64,
    pub peak_reserved_bytes: i64,
}

/// One category at each side's allocated peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CategoryCheck {
    pub category: Category,
    pub baseline_bytes: i64,
    pub new_bytes: i64,
    pub delta_bytes: i64,
    pub delta_ratio: Option<f64>,
}

/// The answer of `memlens check` (`--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct CheckOutcome {
    /// No limit was broken.
    pub passed: bool,
    /// The outcome in one line, leading with what broke.
    pub verdict: String,
    pub new: CheckedRun,
    pub baseline: CheckedRun,
    /// New allocated peak minus the baseline's.
    pub peak_delta_bytes: i64,
    /// `peak_delta_bytes / baseline peak`; `None` when the baseline's peak was 0.
    pub peak_delta_ratio: Option<f64>,
    pub reserved_delta_bytes: i64,
    pub reserved_delta_ratio: Option<f64>,
    /// Each category at each side's allocated peak, in `Category` order; the deltas add up to
    /// `peak_delta_bytes`.
    pub by_category: Vec<CategoryCheck>,
    /// The stacks whose live bytes at the peak moved most, largest |delta| first (from the
    /// comparison: `bytes_a`/`count_a` are the new run's). Empty when `stacks_compared` is
    /// false.
    pub largest_stack_deltas: Vec<StackDelta>,
    /// Whether stacks were compared: both sides files on disk, or both reports of one server.
    pub stacks_compared: bool,
    pub thresholds: Thresholds,
    pub violations: Vec<Violation>,
}

/// `delta / base`, `None` when `base` is 0.
pub fn delta_ratio(delta: i64, base: i64) -> Option<f64> {
    (base != 0).then(|| delta as f64 / base as f64)
}

/// A signed byte count: `+1.20 GiB`, `−512.0 MiB`, `±0 B`.
pub fn signed_bytes_label(b: i64) -> String {
    match b.signum() {
        1 => format!("+{}", bytes_label(b)),
        -1 => format!("−{}", bytes_label(-b)),
        _ => "±0 B".to_owned(),
    }
}

/// A signed fraction as a percentage: `+8.1 %`, `−0.4 %`; `new` when there was no baseline.
pub fn signed_ratio_label(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 0.0 => format!("+{:.1} %", r * 100.0),
        Some(r) => format!("−{:.1} %", -r * 100.0),
        None => "new".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_broken_only_past_it() {
        assert!(!Limit::Ratio(0.05).is_exceeded_by(5, Some(0.05)));
        assert!(Limit::Ratio(0.05).is_exceeded_by(6, Some(0.0500001)));
        assert!(!Limit::Bytes(100).is_exceeded_by(100, Some(1.0)));
        assert!(Limit::Bytes(100).is_exceeded_by(101, Some(1.01)));
        // From nothing, any growth is past a fraction; shrinking never is.
        assert!(Limit::Ratio(10.0).is_exceeded_by(1, None));
        assert!(!Limit::Ratio(0.0).is_exceeded_by(-5, Some(-0.5)));
    }

    #[test]
    fn limits_print_as_given() {
        assert_eq!(Limit::Ratio(0.05).to_string(), "5%");
        assert_eq!(Limit::Ratio(0.125).to_string(), "12.5%");
        assert_eq!(Limit::Bytes(512 << 20).to_string(), "512.0 MiB");
        assert_eq!(Limit::Ratio(0.05).to_arg(), "5%");
        assert_eq!(Limit::Ratio(0.125).to_arg(), "12.5%");
        assert_eq!(Limit::Bytes(512 << 20).to_arg(), "536870912");
        assert_eq!(signed_bytes_label(-(1 << 30)), "−1.00 GiB");
        assert_eq!(signed_ratio_label(Some(0.081)), "+8.1 %");
    }

    #[test]
    fn thresholds_round_trip_as_json() {
        let t = Thresholds {
            max_peak_increase: Some(Limit::Ratio(0.05)),
            max_reserved_increase: Some(Limit::Bytes(1 << 30)),
            max_category_increase: vec![CategoryLimit {
                category: Category::Activation,
                limit: Limit::Ratio(0.1),
            }],
        };
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(
            json,
            r#"{"max_peak_increase":{"ratio":0.05},"max_reserved_increase":{"bytes":1073741824},"max_category_increase":[{"category":"activation","limit":{"ratio":0.1}}]}"#
        );
        assert_eq!(serde_json::from_str::<Thresholds>(&json).unwrap(), t);
    }
}
