//! What a report says about itself ([`ReportMeta`]) and how its owner edits it ([`MetaPatch`]).

use serde::{Deserialize, Serialize};

/// What a report says about itself: set at upload (`?title=&notes=&tags=&job=&host=`) or later
/// by the holder of its owner token (`PATCH /api/reports/{id}`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
pub struct ReportMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The training job (a launcher's run id, a Slurm job, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

impl ReportMeta {
    /// Longest title, job or host kept, in characters.
    pub const MAX_LINE: usize = 200;
    /// Longest notes kept, in characters.
    pub const MAX_NOTES: usize = 4000;
    /// Most tags kept.
    pub const MAX_TAGS: usize = 20;

    /// The same metadata within the limits: lines trimmed and cut, empty ones dropped, tags
    /// deduplicated.
    pub fn bounded(self) -> ReportMeta {
        let line = |s: Option<String>, max: usize| {
            s.map(|s| s.trim().chars().take(max).collect::<String>())
                .filter(|s| !s.is_empty())
        };
        let mut tags: Vec<String> = Vec::new();
        for t in self.tags {
            let t: String = t.trim().chars().take(40).collect();
            if !t.is_empty() && !tags.contains(&t) && tags.len() < Self::MAX_TAGS {
                tags.push(t);
            }
        }
        ReportMeta {
            title: line(self.title, Self::MAX_LINE),
            notes: line(self.notes, Self::MAX_NOTES),
            tags,
            job: line(self.job, Self::MAX_LINE),
            host: line(self.host, Self::MAX_LINE),
        }
    }
}

/// `PATCH /api/reports/{id}`: the fields given replace the report's; `tags` replaces them all.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema, schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MetaPatch {
    pub title: Option<String>,
    pub notes: Option<String>,
    pub tags: Option<Vec<String>>,
    pub job: Option<String>,
    pub host: Option<String>,
    /// Expire the report this many days from now (within the server's retention); 0 keeps it.
    pub expires_in_days: Option<u64>,
}
