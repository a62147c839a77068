//! Variable-length integers (LEB128, zigzag for signed values): how a stored segment object
//! packs its blocks ([`super::packed_blocks`]) and entries ([`super::packed_entries`]).
//! Hand-written: a few lines, and the unchecked readers run where the bytes were checked once.

pub(super) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag: small magnitudes of either sign take few bytes.
pub(super) fn put_signed(out: &mut Vec<u8>, v: i64) {
    put(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub(super) fn get(bytes: &[u8], at: &mut usize) -> u64 {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let b = bytes[*at];
        *at += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

pub(super) fn get_signed(bytes: &[u8], at: &mut usize) -> i64 {
    unzigzag(get(bytes, at))
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// [`get`] on bytes not known to be well formed: `None` past their end or beyond 64 bits.
pub(super) fn checked_get(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let (mut v, mut shift) = (0u64, 0u32);
    loop {
        let b = *bytes.get(*at)?;
        *at += 1;
        if shift > 63 || (shift == 63 && b > 1) {
            return None;
        }
        v |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
    }
}

pub(super) fn checked_get_signed(bytes: &[u8], at: &mut usize) -> Option<i64> {
    checked_get(bytes, at).map(unzigzag)
}
