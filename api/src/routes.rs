//! The one route table: every path the server answers, as templates (`{id}` marks a segment),
//! and the functions that fill them or read them back. The server's router declares its
//! handlers on these templates (utoipa's `path = routes::…`), the CLI's client, the frontend and
//! the tests build their URLs with the fill functions, and the pages' links are parsed by
//! [`Page::parse`] and [`Link::parse`] — so no `/api/…`, `/r/` or `/j/` is written anywhere else.
//!
//! Invariant: [`API`] lists every documented API template once; a test holds it equal to the
//! router's OpenAPI document.

use std::fmt;

/// `POST`: a new report from uploaded files.
pub const REPORTS: &str = "/api/reports";
/// `GET` the summary, `PATCH` the meta, `DELETE` a report.
pub const REPORT: &str = "/api/reports/{id}";
/// `GET`: where a report's analysis stands.
pub const REPORT_STATUS: &str = "/api/reports/{id}/status";
/// `POST`: a live window added to a report.
pub const REPORT_WINDOWS: &str = "/api/reports/{id}/windows";
/// `GET`: the server's upload limits.
pub const LIMITS: &str = "/api/limits";
/// `GET`: the timeline at a level of detail.
pub const TIMELINE: &str = "/api/reports/{id}/timeline";
/// `GET`: bytes by category over time.
pub const CATEGORIES: &str = "/api/reports/{id}/categories";
/// `GET`: the flame graph of live memory.
pub const FLAME: &str = "/api/reports/{id}/flame";
/// `GET`: the segment map at an instant.
pub const SEGMENTS: &str = "/api/reports/{id}/segments";
/// `GET`: fragmentation over time.
pub const FRAGMENTATION: &str = "/api/reports/{id}/fragmentation";
/// `GET`: what the peak is made of.
pub const PEAK: &str = "/api/reports/{id}/peak";
/// `GET`: leak candidates.
pub const LEAKS: &str = "/api/reports/{id}/leaks";
/// `GET`: each out-of-memory explained.
pub const OOMS: &str = "/api/reports/{id}/ooms";
/// `GET`: the run's phases and marks.
pub const ANNOTATIONS: &str = "/api/reports/{id}/annotations";
/// `GET`: one stack's frames.
pub const STACK: &str = "/api/reports/{id}/stacks/{stack}";
/// `GET`: allocations searched.
pub const ALLOCATIONS: &str = "/api/reports/{id}/allocations";
/// `GET`: GPU-level samples (NVML, DCGM, nvidia-smi).
pub const GPU_SAMPLES: &str = "/api/reports/{id}/gpu_samples";
/// `GET`: the peak under changed settings.
pub const WHATIF: &str = "/api/reports/{id}/whatif";
/// `GET`: a chart as PNG.
pub const CHART_PNG: &str = "/api/reports/{id}/chart.png";
/// `GET`: a chart as SVG.
pub const CHART_SVG: &str = "/api/reports/{id}/chart.svg";
/// `GET`: a plan from a model's config.
pub const PLAN: &str = "/api/plan";
/// `GET`: the bundled models the plan knows by name.
pub const PLAN_MODELS: &str = "/api/plan/models";
/// `GET`: two runs compared.
pub const COMPARE: &str = "/api/compare";
/// `GET`: the regression gate.
pub const CHECK: &str = "/api/check";
/// `GET` a job's runs, `PATCH` its thresholds.
pub const JOB: &str = "/api/jobs/{id}";
/// `GET`: the OpenAPI document.
pub const OPENAPI: &str = "/api/openapi.json";
/// `GET`: liveness.
pub const HEALTHZ: &str = "/healthz";
/// `GET`: Prometheus metrics.
pub const METRICS: &str = "/metrics";
/// The share page of a report.
pub const REPORT_PAGE: &str = "/r/{id}";
/// The page of two runs compared.
pub const COMPARE_PAGE: &str = "/compare/{a}/{b}";
/// The page of a job's runs.
pub const JOB_PAGE: &str = "/j/{id}";
/// The plan page.
pub const PLAN_PAGE: &str = "/plan";

/// Every documented API template (the router's OpenAPI document holds exactly these).
pub const API: &[&str] = &[
    REPORTS,
    REPORT,
    REPORT_STATUS,
    REPORT_WINDOWS,
    LIMITS,
    TIMELINE,
    CATEGORIES,
    FLAME,
    SEGMENTS,
    FRAGMENTATION,
    PEAK,
    LEAKS,
    OOMS,
    ANNOTATIONS,
    STACK,
    ALLOCATIONS,
    GPU_SAMPLES,
    WHATIF,
    CHART_PNG,
    CHART_SVG,
    PLAN,
    PLAN_MODELS,
    COMPARE,
    CHECK,
    JOB,
];

/// `template` with its `{…}` segments replaced by `values` in order.
///
/// Panics when the counts differ: a template and its caller disagreeing is a bug, not input.
pub fn fill(template: &str, values: &[&str]) -> String {
    let mut out = String::with_capacity(template.len() + values.iter().map(|v| v.len()).sum::<usize>());
    let mut rest = template;
    let mut given = values.iter();
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .expect("a route template closes its braces");
        out.push_str(&rest[..open]);
        out.push_str(given.next().expect("a value for each segment of the route"));
        rest = &rest[close + 1..];
    }
    assert!(given.next().is_none(), "more values than segments in {template}");
    out.push_str(rest);
    out
}

/// A report-scoped template filled with the report's id (`report(TIMELINE, id)`).
pub fn report(template: &str, id: &str) -> String {
    fill(template, &[id])
}

/// A page of the UI, as its path names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Page {
    /// `/r/{id}`: a report.
    Report { id: String },
    /// `/compare/{a}/{b}`: two runs (or ranks, devices) side by side.
    Compare { a: String, b: String },
    /// `/j/{id}`: a job's runs.
    Job { id: String },
    /// `/plan`: will it fit?
    Plan,
}

impl Page {
    /// The page a path names (query and trailing slash ignored); `None` for the upload page and
    /// anything else.
    pub fn parse(path: &str) -> Option<Page> {
        let path = path.split(['?', '#']).next().unwrap_or_default().trim_end_matches('/');
        let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
        let page = match segments.as_slice() {
            ["r", id] => Page::Report { id: (*id).to_owned() },
            ["j", id] => Page::Job { id: (*id).to_owned() },
            ["compare", a, b] => Page::Compare {
                a: (*a).to_owned(),
                b: (*b).to_owned(),
            },
            ["plan"] => Page::Plan,
            _ => return None,
        };
        let empty = match &page {
            Page::Report { id } | Page::Job { id } => id.is_empty(),
            Page::Compare { a, b } => a.is_empty() || b.is_empty(),
            Page::Plan => false,
        };
        (!empty).then_some(page)
    }

    /// The page's path.
    pub fn path(&self) -> String {
        match self {
            Page::Report { id } => fill(REPORT_PAGE, &[id]),
            Page::Compare { a, b } => fill(COMPARE_PAGE, &[a, b]),
            Page::Job { id } => fill(JOB_PAGE, &[id]),
            Page::Plan => PLAN_PAGE.to_owned(),
        }
    }
}

impl fmt::Display for Page {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

/// A pasted link to a page: the server it lives on (scheme, host and any path prefix before the
/// page's own path; empty for a bare path) and the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub server: String,
    pub page: Page,
}

impl Link {
    /// Reads `https://host[/prefix]/r/ID`, `/j/ID`, `/compare/A/B` or `/plan` (query and fragment
    /// ignored). The page is the last of its kind in the path, so a server mounted under a
    /// prefix keeps the prefix in `server`.
    pub fn parse(link: &str) -> Option<Link> {
        let link = link.trim();
        let path_end = link.find(['?', '#']).unwrap_or(link.len());
        let without_query = link[..path_end].trim_end_matches('/');
        ["/r/", "/j/", "/compare/", "/plan"]
            .iter()
            .filter_map(|marker| without_query.rfind(marker))
            .max()
            .and_then(|at| {
                let page = Page::parse(&without_query[at..])?;
                Some(Link {
                    server: without_query[..at].to_owned(),
                    page,
                })
            })
    }

    /// The link again: the server followed by the page's path.
    pub fn url(&self) -> String {
        format!("{}{}", self.server, self.page.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_segments_in_order() {
        assert_eq!(report(TIMELINE, "abc"), "/api/reports/abc/timeline");
        assert_eq!(fill(STACK, &["abc", "7"]), "/api/reports/abc/stacks/7");
        assert_eq!(fill(COMPARE_PAGE, &["a", "b:1"]), "/compare/a/b:1");
        assert_eq!(fill(PLAN, &[]), "/api/plan");
    }

    #[test]
    #[should_panic(expected = "a value for each segment")]
    fn fill_refuses_too_few_values() {
        fill(STACK, &["abc"]);
    }

    #[test]
    fn pages_read_back_what_they_write() {
        for page in [
            Page::Report { id: "0a1b".into() },
            Page::Job { id: "j1".into() },
            Page::Compare {
                a: "x".into(),
                b: "y:2".into(),
            },
            Page::Plan,
        ] {
            assert_eq!(Page::parse(&page.path()), Some(page.clone()));
            assert_eq!(Page::parse(&format!("{page}/?file=1")), Some(page));
        }
        assert_eq!(Page::parse("/"), None);
        assert_eq!(Page::parse("/r/"), None);
        assert_eq!(Page::parse("/api/reports/x"), None);
    }

    #[test]
    fn links_keep_their_server_and_prefix() {
        let link = Link::parse("https://m.example/tools/memlens/r/abc?file=2#peak").unwrap();
        assert_eq!(link.server, "https://m.example/tools/memlens");
        assert_eq!(link.page, Page::Report { id: "abc".into() });
        assert_eq!(link.url(), "https://m.example/tools/memlens/r/abc");
        let job = Link::parse("http://h:8080/j/j9/").unwrap();
        assert_eq!(
            (job.server.as_str(), job.page),
            ("http://h:8080", Page::Job { id: "j9".into() })
        );
        assert_eq!(Link::parse("/r/abc").unwrap().server, "");
        assert!(Link::parse("http://h/elsewhere").is_none());
    }
}
