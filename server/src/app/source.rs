//! Where a request's runs come from, resolved once: a path is a file for the pipeline, a share
//! link (`http…/r/ID`) a report on a memlens server (its summary fetched, waited on while it is
//! analysed), a job link (`http…/j/ID`) that job's last good run.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use memlens_api::routes::{self, Link, Page};
use memlens_api::{AnalyzeOutput, ErrorBody, JobView, ReportState};

use super::error::CommandError;

/// Why a run could not be read (a command's exit 2).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    File(#[from] CommandError),
    #[error("{link}: {problem}")]
    Link { link: String, problem: String },
}

/// One run as given: a file on disk or a report on a server.
pub enum Source {
    File(PathBuf),
    Report { link: String, server: String, id: String },
}

impl Source {
    /// A link is `http(s)://HOST[/PREFIX]/r/ID` (a query or fragment after it is ignored);
    /// anything else is a path.
    pub fn parse(given: &str) -> Result<Source, SourceError> {
        if !(given.starts_with("http://") || given.starts_with("https://")) {
            return Ok(Source::File(PathBuf::from(given)));
        }
        let bad = || SourceError::Link {
            link: given.to_owned(),
            problem: "not a report link (expected http…/r/ID)".into(),
        };
        match Link::parse(given) {
            Some(Link {
                server,
                page: Page::Report { id },
            }) => Ok(Source::Report {
                link: given.to_owned(),
                server,
                id,
            }),
            _ => Err(bad()),
        }
    }
}

/// A job's last analysed run that broke none of its limits, other than `new` itself.
pub fn last_good_run(job_link: &str, new: &Source) -> Result<Source, SourceError> {
    let fail = |problem: String| SourceError::Link {
        link: job_link.to_owned(),
        problem,
    };
    let (server, id) = match Link::parse(job_link) {
        Some(Link {
            server,
            page: Page::Job { id },
        }) if server.starts_with("http://") || server.starts_with("https://") => (server, id),
        _ => return Err(fail("not a job link (expected http…/j/ID)".into())),
    };
    let job: JobView = get_json(job_link, &format!("{server}{}", routes::fill(routes::JOB, &[&id])))?
        .ok_or_else(|| fail("the job is not ready".into()))?;
    let new_id = match new {
        Source::Report { id, .. } => Some(id.as_str()),
        Source::File(_) => None,
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
    Ok(Source::Report {
        link: format!("{server}{}", run.url),
        server,
        id: run.id.clone(),
    })
}

/// A report's summary, once its analysis is done (a 202 is waited on until `wait` runs out).
pub fn report_summary(link: &str, server: &str, id: &str, wait: Duration) -> Result<AnalyzeOutput, SourceError> {
    let url = format!("{server}{}", routes::report(routes::REPORT, id));
    let start = Instant::now();
    loop {
        match get_json::<AnalyzeOutput>(link, &url)? {
            Some(summary) => return Ok(summary),
            None if start.elapsed() < wait => std::thread::sleep(Duration::from_secs(1)),
            None => {
                return Err(SourceError::Link {
                    link: link.to_owned(),
                    problem: format!("still being analysed after {} s", wait.as_secs()),
                })
            }
        }
    }
}

/// `GET url` read as JSON; `None` on 202 (not ready yet). Errors name `link`.
pub fn get_json<T: serde::de::DeserializeOwned>(link: &str, url: &str) -> Result<Option<T>, SourceError> {
    let fail = |problem: String| SourceError::Link {
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

/// The summary of the report a share link names (`http…/r/ID`), once analysed (a report being
/// analysed is waited on for `wait`); the error names the link.
pub fn report_at(link: &str, wait: Duration) -> Result<AnalyzeOutput, SourceError> {
    match Source::parse(link)? {
        Source::Report { link, server, id } => report_summary(&link, &server, &id, wait),
        Source::File(_) => Err(SourceError::Link {
            link: link.to_owned(),
            problem: "not a report link (expected http…/r/ID)".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_paths_are_told_apart() {
        match Source::parse("https://memlens.example/team/r/abc123?x=1").unwrap() {
            Source::Report { server, id, .. } => {
                assert_eq!(server, "https://memlens.example/team");
                assert_eq!(id, "abc123");
            }
            Source::File(_) => panic!("a link"),
        }
        assert!(matches!(Source::parse("runs/r/new.pickle").unwrap(), Source::File(_)));
        assert!(Source::parse("http://memlens.example/compare/a/b").is_err());
        assert!(Source::parse("http://memlens.example/r/").is_err());
    }
}
