//! Report ids and delete tokens: 128 random bits or more, URL-safe (lowercase hex).

use sha2::{Digest, Sha256};

/// `bytes` random bytes as lowercase hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if getrandom::fill(&mut buf).is_err() {
        // No system randomness means ids would be guessable: refuse to continue.
        panic!("the operating system's random number generator is unavailable");
    }
    hex(&buf)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A report id: 128 random bits.
pub fn new_report_id() -> String {
    random_hex(16)
}

/// A delete token: 256 random bits.
pub fn new_delete_token() -> String {
    random_hex(32)
}

/// What the index stores instead of the token.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Whether `id` has the shape of a report id (so it can be used in a path safely).
pub fn is_report_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Compares without an early exit, so timing does not leak how much of a token matched.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_128_bit_hex_and_distinct() {
        let a = new_report_id();
        let b = new_report_id();
        assert!(is_report_id(&a) && is_report_id(&b));
        assert_ne!(a, b);
        assert!(!is_report_id("../etc/passwd"));
        assert_eq!(new_delete_token().len(), 64);
        assert!(constant_time_eq(&token_hash("x"), &token_hash("x")));
        assert!(!constant_time_eq(&token_hash("x"), &token_hash("y")));
    }
}
