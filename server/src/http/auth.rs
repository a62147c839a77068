//! Who may upload: upload tokens (from `--upload-token`/`MEMLENS_UPLOAD_TOKENS`, and a tokens
//! file re-read whenever it changes, so tokens rotate without a restart), sent as
//! `Authorization: Bearer …` and compared in constant time; and a per-client rate limit on
//! uploads (`governor`, keyed by the peer address) and a cap on one client's uploads in
//! progress at once, both answered with 429 and `Retry-After`.
//! Reading a report stays by its capability link.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::http::HeaderMap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use subtle::ConstantTimeEq;

/// The upload tokens in force.
pub struct UploadAuth {
    fixed: Vec<String>,
    file: Option<PathBuf>,
    /// The file's tokens and the modification time they were read at.
    from_file: Mutex<(Option<SystemTime>, Vec<String>)>,
}

/// The token of an `Authorization: Bearer …` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

/// Why an upload was refused before its body was read.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or not one in force.
    Unauthorized,
    /// Too many uploads from this client; retry after this many seconds.
    RateLimited(u64),
    /// This client already has this many uploads in progress.
    TooManyAtOnce(usize),
}

/// The upload tokens file given at start cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("upload tokens file {}: {error}", path.display())]
pub struct TokensFileError {
    pub path: PathBuf,
    pub error: std::io::Error,
}

fn parse_tokens(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

impl UploadAuth {
    /// Tokens given on the command line (empty strings ignored) and an optional tokens file (one
    /// per line, `#` comments). Neither: uploads are open.
    pub fn new(fixed: Vec<String>, file: Option<PathBuf>) -> Result<UploadAuth, TokensFileError> {
        let auth = UploadAuth {
            fixed: fixed
                .into_iter()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
                .collect(),
            file,
            from_file: Mutex::new((None, Vec::new())),
        };
        if let Some(f) = &auth.file {
            std::fs::read_to_string(f).map_err(|error| TokensFileError { path: f.clone(), error })?;
        }
        auth.refresh();
        Ok(auth)
    }

    /// Whether uploads need a token.
    pub fn required(&self) -> bool {
        !self.fixed.is_empty() || self.file.is_some()
    }

    /// Re-reads the tokens file when it changed (a file that cannot be read keeps what was
    /// read last, and is logged).
    fn refresh(&self) {
        let Some(path) = &self.file else { return };
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let Ok(mut cached) = self.from_file.lock() else { return };
        if modified.is_some() && cached.0 == modified {
            return;
        }
        match std::fs::read_to_string(path) {
            Ok(text) => *cached = (modified, parse_tokens(&text)),
            Err(e) => tracing::error!("upload tokens file {}: {e}", path.display()),
        }
    }

    /// Whether `headers` carry a token in force (always, when none is required).
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        if !self.required() {
            return true;
        }
        let Some(given) = bearer(headers) else {
            return false;
        };
        self.refresh();
        let file_tokens = self.from_file.lock().map(|c| c.1.clone()).unwrap_or_default();
        // Every token is compared, so the time taken does not say which one came close.
        let mut ok = subtle::Choice::from(0u8);
        for t in self.fixed.iter().chain(&file_tokens) {
            ok |= t.as_bytes().ct_eq(given.as_bytes());
        }
        bool::from(ok)
    }
}

/// Uploads allowed per client and minute (with bursts of as many), and at once.
pub struct UploadLimit {
    limiter: Option<DefaultKeyedRateLimiter<IpAddr>>,
    at_once: usize,
    /// Uploads in progress, per client address (entries at zero are removed).
    in_progress: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One admitted upload in progress; its client's count goes down when it is dropped.
#[derive(Debug)]
pub struct UploadSlot {
    client: IpAddr,
    in_progress: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for UploadSlot {
    fn drop(&mut self) {
        if let Ok(mut m) = self.in_progress.lock() {
            if let Some(n) = m.get_mut(&self.client) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.client);
                }
            }
        }
    }
}

impl UploadLimit {
    /// `per_minute` uploads per client address, `at_once` of them in progress; 0 turns either
    /// limit off.
    pub fn new(per_minute: u32, at_once: usize) -> UploadLimit {
        UploadLimit {
            limiter: NonZeroU32::new(per_minute).map(|n| RateLimiter::keyed(Quota::per_minute(n))),
            at_once,
            in_progress: Arc::default(),
        }
    }

    /// A slot for one more upload of `client`, unless it already has `at_once` in progress.
    fn slot(&self, client: IpAddr) -> Result<UploadSlot, Refusal> {
        let mut m = self.in_progress.lock().map_err(|_| Refusal::TooManyAtOnce(0))?;
        let n = m.entry(client).or_insert(0);
        if self.at_once > 0 && *n >= self.at_once {
            return Err(Refusal::TooManyAtOnce(*n));
        }
        *n += 1;
        Ok(UploadSlot {
            client,
            in_progress: self.in_progress.clone(),
        })
    }

    /// `Ok` when `client` may upload now, else how many seconds to wait.
    pub fn check(&self, client: IpAddr) -> Result<(), u64> {
        let Some(l) = &self.limiter else { return Ok(()) };
        l.check_key(&client).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })?;
        if l.len() > 100_000 {
            l.retain_recent();
        }
        Ok(())
    }
}

/// Checks an upload's token, then its client's uploads in progress, then its rate; the slot
/// is held for as long as the upload is being received.
pub fn admit(
    auth: &UploadAuth,
    limit: &UploadLimit,
    headers: &HeaderMap,
    client: IpAddr,
) -> Result<UploadSlot, Refusal> {
    if !auth.allows(headers) {
        return Err(Refusal::Unauthorized);
    }
    let slot = limit.slot(client)?;
    limit.check(client).map_err(Refusal::RateLimited)?;
    Ok(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {t}").parse().expect("header"),
        );
        h
    }

    #[test]
    fn tokens_rotate_through_the_file_without_a_restart() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("tokens");
        std::fs::write(&file, "# upload tokens\nfirst\n").expect("write");
        let auth = UploadAuth::new(vec!["fixed".into()], Some(file.clone())).expect("auth");
        assert!(auth.allows(&bearer("fixed")) && auth.allows(&bearer("first")));
        assert!(!auth.allows(&bearer("second")) && !auth.allows(&HeaderMap::new()));
        // The file's modification time must move for the change to be seen.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, "second\n").expect("write");
        let later = SystemTime::now() + std::time::Duration::from_secs(2);
        let f = std::fs::File::options().write(true).open(&file).expect("open");
        f.set_modified(later).expect("mtime");
        assert!(auth.allows(&bearer("second")));
        assert!(!auth.allows(&bearer("first")));
    }

    #[test]
    fn without_tokens_uploads_are_open_and_the_rate_limit_answers_with_a_wait() {
        let auth = UploadAuth::new(Vec::new(), None).expect("auth");
        assert!(auth.allows(&HeaderMap::new()));
        let limit = UploadLimit::new(2, 0);
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        assert!(admit(&auth, &limit, &HeaderMap::new(), ip).is_ok());
        assert!(admit(&auth, &limit, &HeaderMap::new(), ip).is_ok());
        match admit(&auth, &limit, &HeaderMap::new(), ip) {
            Err(Refusal::RateLimited(s)) => assert!((1..=60).contains(&s), "{s}"),
            other => panic!("{other:?}"),
        }
        // Another client has its own budget.
        assert!(admit(&auth, &limit, &HeaderMap::new(), "10.0.0.2".parse().expect("ip")).is_ok());
    }

    #[test]
    fn a_client_has_at_most_its_cap_of_uploads_in_progress_and_gets_a_slot_back_when_one_ends() {
        let auth = UploadAuth::new(Vec::new(), None).expect("auth");
        let limit = UploadLimit::new(0, 2);
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let first = admit(&auth, &limit, &HeaderMap::new(), ip).expect("first");
        let _second = admit(&auth, &limit, &HeaderMap::new(), ip).expect("second");
        assert_eq!(
            admit(&auth, &limit, &HeaderMap::new(), ip).map(|_| ()),
            Err(Refusal::TooManyAtOnce(2))
        );
        // Others are not held up by this client.
        assert!(admit(&auth, &limit, &HeaderMap::new(), "10.0.0.2".parse().expect("ip")).is_ok());
        drop(first);
        assert!(admit(&auth, &limit, &HeaderMap::new(), ip).is_ok());
    }
}
