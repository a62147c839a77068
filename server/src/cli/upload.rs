//! `memlens upload FILE… --server URL [--token T]`: sends snapshots (and NVML logs) to a memlens
//! server as one report and prints its share link. Files are streamed, never read whole into
//! memory; transport failures, 5xx and 429 answers are retried with backoff (429 after its
//! `Retry-After`); a refusal (401 without a valid token, 413, 400) is one clear line.

use memlens_api::routes;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use memlens_api::Created;

#[derive(Args)]
pub struct UploadArgs {
    /// Files of one report (several ranks of one job become one run).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The memlens server, e.g. `http://memlens.internal:8080`.
    #[arg(long, env = "MEMLENS_SERVER")]
    pub server: String,
    /// Upload token, sent as `Authorization: Bearer`.
    #[arg(long, env = "MEMLENS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// What the report says about itself.
    #[arg(long)]
    pub title: Option<String>,
    #[arg(long)]
    pub notes: Option<String>,
    /// Comma-separated tags.
    #[arg(long)]
    pub tags: Option<String>,
    /// The job this run is one of (`nightly-llama`): its runs are listed on one page, each
    /// checked against the one before.
    #[arg(long)]
    pub job: Option<String>,
    /// Expire the report after this many days.
    #[arg(long)]
    pub expires_in_days: Option<u64>,
    /// Tries before giving up on an unreachable or overloaded server.
    #[arg(long, default_value_t = 4)]
    pub attempts: u32,
}

const BOUNDARY: &str = "memlens-upload-5b1f3c9e";

/// The multipart body over the files, as one reader that opens each file when it gets there.
fn multipart(files: &[PathBuf]) -> Result<Box<dyn Read + Send>, UploadError> {
    let mut body: Box<dyn Read + Send> = Box::new(std::io::empty());
    for path in files {
        let file = std::fs::File::open(path).map_err(|error| UploadError::File {
            path: path.clone(),
            error,
        })?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("upload")
            .replace('"', "_");
        let head = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        );
        body = Box::new(
            body.chain(std::io::Cursor::new(head.into_bytes()))
                .chain(file)
                .chain(&b"\r\n"[..]),
        );
    }
    Ok(Box::new(body.chain(std::io::Cursor::new(
        format!("--{BOUNDARY}--\r\n").into_bytes(),
    ))))
}

/// Why an upload failed.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("{}: {error}", path.display())]
    File { path: PathBuf, error: std::io::Error },
    #[error("the upload's query: {0}")]
    Query(#[from] serde_urlencoded::ser::Error),
    #[error("cannot reach {url}: {error}")]
    Unreachable { url: String, error: Box<ureq::Error> },
    #[error("reading the answer of {url}: {error}")]
    Reading { url: String, error: std::io::Error },
    #[error("unexpected answer from {url}: {error}")]
    Unexpected { url: String, error: serde_json::Error },
    #[error("{url} answered {code}: {why}")]
    Refused { url: String, code: u16, why: String },
}

/// What went wrong with one attempt: worth another try, or final.
enum Failure {
    Retry(UploadError, Option<Duration>),
    Final(UploadError),
}

fn attempt(args: &UploadArgs, url: &str) -> Result<Created, Failure> {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .build();
    let mut req = agent
        .post(url)
        .set("Content-Type", &format!("multipart/form-data; boundary={BOUNDARY}"));
    if let Some(t) = &args.token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let body = multipart(&args.files).map_err(Failure::Final)?;
    match req.send(body) {
        Ok(resp) => {
            let url = url.to_owned();
            let text = match resp.into_string() {
                Ok(text) => text,
                Err(error) => return Err(Failure::Retry(UploadError::Reading { url, error }, None)),
            };
            serde_json::from_str::<Created>(&text)
                .map_err(|error| Failure::Final(UploadError::Unexpected { url, error }))
        }
        Err(ureq::Error::Status(code, resp)) => {
            let retry_after = resp
                .header("Retry-After")
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs);
            let text = resp.into_string().unwrap_or_default();
            let why = serde_json::from_str::<memlens_api::ErrorBody>(&text)
                .map(|e| e.error)
                .unwrap_or(text);
            let refused = UploadError::Refused {
                url: url.to_owned(),
                code,
                why,
            };
            if code == 429 || code >= 500 {
                Err(Failure::Retry(refused, retry_after))
            } else {
                Err(Failure::Final(refused))
            }
        }
        Err(error) => Err(Failure::Retry(
            UploadError::Unreachable {
                url: url.to_owned(),
                error: Box::new(error),
            },
            None,
        )),
    }
}

/// Uploads and returns the server's answer, its links made absolute.
pub fn send(args: &UploadArgs) -> Result<Created, UploadError> {
    let server = args.server.trim_end_matches('/');
    let mut query: Vec<(&str, String)> = Vec::new();
    for (k, v) in [
        ("title", &args.title),
        ("notes", &args.notes),
        ("tags", &args.tags),
        ("job", &args.job),
    ] {
        if let Some(v) = v {
            query.push((k, v.clone()));
        }
    }
    if let Some(d) = args.expires_in_days {
        query.push(("expires_in_days", d.to_string()));
    }
    let qs = serde_urlencoded::to_string(&query)?;
    let url = if qs.is_empty() {
        format!("{server}{}", routes::REPORTS)
    } else {
        format!("{server}{}?{qs}", routes::REPORTS)
    };
    let mut wait = Duration::from_millis(500);
    let mut n = 1;
    loop {
        match attempt(args, &url) {
            Ok(c) => {
                return Ok(Created {
                    url: format!("{server}{}", c.url),
                    job_url: c.job_url.map(|j| format!("{server}{j}")),
                    ..c
                })
            }
            Err(Failure::Final(m)) => return Err(m),
            Err(Failure::Retry(m, after)) if n < args.attempts => {
                let pause = after.unwrap_or(wait).min(Duration::from_secs(60));
                eprintln!("memlens: {m}; retrying in {} s", pause.as_secs_f64());
                std::thread::sleep(pause);
                wait *= 2;
                n += 1;
            }
            Err(Failure::Retry(m, _)) => return Err(m),
        }
    }
}

pub fn upload(args: UploadArgs) -> ExitCode {
    match send(&args) {
        Ok(c) => {
            println!("{}", c.url);
            eprintln!(
                "owner token (edits or deletes the report; shown once): {}",
                c.delete_token
            );
            if let Some(job) = &c.job_url {
                eprintln!("job {}: {job}", args.job.as_deref().unwrap_or_default());
            }
            if let Some(t) = &c.job_owner_token {
                eprintln!("job owner token (edits the job's thresholds; shown once): {t}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memlens: {e}");
            ExitCode::from(2)
        }
    }
}
