//! Report ids and delete tokens: 128 random bits or more, URL-safe (lowercase hex). Hex comes
//! from the `hex` crate, the token comparison from `subtle` (constant time).

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// `bytes` random bytes as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if getrandom::fill(&mut buf).is_err() {
        // No system randomness means ids would be guessable: refuse to continue.
        panic!("the operating system's random number generator is unavailable");
    }
    hex::encode(&buf)
}

/// A report's id: the last part of its link and the name its uploads and data are kept under.
/// Always one safe key segment (`[A-Za-z0-9._-]`, not `.`/`..`), so it can name a folder or an
/// object prefix and never a path out of the store.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReportId(String);

/// A name that cannot be a report id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a report id")]
pub struct NotAReportId(pub String);

impl ReportId {
    /// A fresh id: 128 random bits as lowercase hex.
    #[allow(clippy::new_without_default)]
    pub fn new() -> ReportId {
        ReportId(random_hex(16))
    }

    /// The id a link names: only the shape [`ReportId::new`] makes (32 lowercase hex digits),
    /// so a link cannot reach a report the tests or benches named.
    pub fn from_link(s: &str) -> Option<ReportId> {
        is_report_id(s).then(|| ReportId(s.to_owned()))
    }

    /// An id as the store's index keeps it, or as a test or bench names it: any one key
    /// segment.
    pub fn parse(s: &str) -> Result<ReportId, NotAReportId> {
        let ok = !s.is_empty()
            && s.len() <= 128
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(ReportId(s.to_owned()))
        } else {
            Err(NotAReportId(s.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReportId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A job's id: the last part of its link (`/j/ID`), 128 random bits as lowercase hex, made when
/// the job's first run is uploaded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobId(String);

impl JobId {
    #[allow(clippy::new_without_default)]
    pub fn new() -> JobId {
        JobId(random_hex(16))
    }

    /// The id a link names, or as the index keeps it: only the shape [`JobId::new`] makes.
    pub fn from_link(s: &str) -> Option<JobId> {
        is_report_id(s).then(|| JobId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A delete token: 256 random bits.
pub fn new_delete_token() -> String {
    random_hex(32)
}

/// What the index stores instead of the token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether `token` hashes to `stored_hash`, compared without an early exit so timing does not
/// leak how much of it matched.
pub fn token_matches(token: &str, stored_hash: &str) -> bool {
    token_hash(token).as_bytes().ct_eq(stored_hash.as_bytes()).into()
}

/// Whether `id` has the shape of a minted report id.
fn is_report_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_128_bit_hex_and_distinct() {
        let a = ReportId::new();
        let b = ReportId::new();
        assert!(ReportId::from_link(a.as_str()).is_some() && ReportId::from_link(b.as_str()).is_some());
        assert_ne!(a, b);
        assert!(ReportId::from_link("../etc/passwd").is_none());
        assert!(ReportId::from_link("bench").is_none(), "a link names only minted ids");
        for bad in ["", ".", "..", "../x", "a/b", "a b", "a\\b"] {
            assert!(ReportId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            ReportId::parse("bench").map(|id| id.to_string()),
            Ok("bench".to_owned())
        );
        assert_eq!(new_delete_token().len(), 64);
        assert!(token_matches("x", &token_hash("x")));
        assert!(!token_matches("y", &token_hash("x")));
        assert!(!token_matches("x", ""));
    }
}
