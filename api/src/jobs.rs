//! Jobs: the runs uploaded under one name (`?job=NAME`), each held to the job's limits against
//! the run before it (`GET /api/jobs/{id}`, the `/j/{id}` page).

use serde::{Deserialize, Serialize};

use crate::{CategoryBytes, ReportState, Thresholds, Violation};

/// `GET /api/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct JobView {
    pub id: String,
    pub name: String,
    /// The job's page (`/j/ID`).
    pub url: String,
    /// What each run is held to against the one before (the defaults until the owner edits
    /// them: the allocated peak may grow 5 %).
    pub thresholds: Thresholds,
    /// In upload order.
    pub runs: Vec<JobRun>,
}

/// One run of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct JobRun {
    /// The report's id.
    pub id: String,
    /// The report's page (`/r/ID`).
    pub url: String,
    pub created_at: i64,
    pub title: Option<String>,
    pub state: ReportState,
    /// The run's worst rank (or busiest device), once analysed.
    pub peak_allocated_bytes: Option<i64>,
    pub peak_reserved_bytes: Option<i64>,
    /// Each category's bytes at the allocated peak.
    pub by_category: Vec<CategoryBytes>,
    /// Set when the run broke a limit against the last analysed run before it.
    pub regression: Option<JobRegression>,
}

/// A run past the job's limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct JobRegression {
    /// The run it was checked against (a report id).
    pub against: String,
    /// The check's verdict in one line.
    pub verdict: String,
    pub violations: Vec<Violation>,
}
