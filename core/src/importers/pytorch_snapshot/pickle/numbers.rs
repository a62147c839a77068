//! Pickle's little-endian two's-complement integers (LONG1, LONG4) as i64.

/// [`decode_long`] of at most 8 bytes, which always fits an i64. Assembled byte by byte: a
/// `copy_from_slice` of a variable length is a call to `memcpy` whose stored bytes are then
/// reloaded (a store-forwarding stall), a fifth of the VM's time on trace entries' addresses
/// and times.
#[inline]
pub(super) fn decode_short_long(bytes: &[u8]) -> i64 {
    debug_assert!(bytes.len() <= 8);
    let Some(&last) = bytes.last() else { return 0 };
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate() {
        v |= (b as u64) << (8 * i);
    }
    // Sign-extend from the top byte's high bit.
    let unused = 64 - 8 * bytes.len() as u32;
    if unused == 0 {
        v as i64
    } else if last & 0x80 != 0 {
        (v | (u64::MAX << (64 - unused))) as i64
    } else {
        v as i64
    }
}

/// Little-endian two's complement, as LONG1/LONG4 store it; `None` outside i64.
pub(super) fn decode_long(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() {
        return Some(0);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xFF } else { 0 };
    let mut trimmed = bytes;
    while trimmed.len() > 8 && trimmed[trimmed.len() - 1] == fill {
        trimmed = &trimmed[..trimmed.len() - 1];
    }
    if trimmed.len() > 8 {
        return None;
    }
    let mut buf = [fill; 8];
    buf[..trimmed.len()].copy_from_slice(trimmed);
    let v = i64::from_le_bytes(buf);
    // A 9-byte encoding trimmed to 8 may have lost its sign byte: check it survived.
    if (v < 0) != negative {
        return None;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_decoding_edges() {
        assert_eq!(decode_long(&[0xff]), Some(-1));
        // The short form agrees with the general one on every length and sign.
        for bytes in [
            &[][..],
            &[0x7f],
            &[0x80],
            &[0xff],
            &[0x00, 0x80],
            &[0x00, 0x9a, 0x2d, 0x1f, 0x4c, 0x7f],
            &[0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07],
            &[0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x80],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
        ] {
            assert_eq!(Some(decode_short_long(bytes)), decode_long(bytes), "{bytes:?}");
        }
        assert_eq!(decode_long(&[0x00, 0x80, 0x00]), Some(0x8000));
        assert_eq!(
            decode_long(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]),
            None
        );
        assert_eq!(decode_long(&[0, 0, 0, 0, 0, 0, 0, 0x80, 0xff]), Some(i64::MIN));
    }
}
