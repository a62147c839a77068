//! Report ids and delete tokens: 128 random bits or more, URL-safe (lowercase hex). Hex comes
//! from the `hex` crate, the token comparison from `subtle` (constant time).

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
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether `token` hashes to `stored_hash`, compared without an early exit so timing does not
/// leak how much of it matched.
pub fn token_matches(token: &str, stored_hash: &str) -> bool {
    token_hash(token).as_bytes().ct_eq(stored_hash.as_bytes()).into()
}

/// Whether `id` has the shape of a report id (so it can be used in a key safely).
pub fn is_report_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
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
        assert!(token_matches("x", &token_hash("x")));
        assert!(!token_matches("y", &token_hash("x")));
        assert!(!token_matches("x", ""));
    }
}
