//! Variable-length integers (LEB128, zigzag for signed values): how a stored segment object
//! packs its blocks ([`crate::analysis::segment_map::packed_blocks`]) and entries
//! ([`crate::analysis::segment_map::packed_entries`]), and how the query indexes hold their lists of rows
//! ([`crate::query::row_list`]).
//! Hand-written: a few lines, and the unchecked readers run where the bytes were checked once.

/// Most bytes [`put`] writes for one value.
pub(crate) const MAX_BYTES: usize = 10;

/// Pushed byte by byte: going through [`write`] and a buffer of its own made the segment
/// replay's packed blocks markedly slower to take.
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn put_signed(out: &mut Vec<u8>, v: i64) {
    put(out, zigzag(v));
}

/// [`put`] into `buf` at `*at`, which moves past it (panics when `buf` has no room): a writer
/// that fills a buffer of its own checks no vector's capacity at each byte.
#[inline]
pub(crate) fn write(buf: &mut [u8], at: &mut usize, mut v: u64) {
    while v >= 0x80 {
        buf[*at] = v as u8 | 0x80;
        *at += 1;
        v >>= 7;
    }
    buf[*at] = v as u8;
    *at += 1;
}

/// [`put_signed`] as [`write`] does.
#[inline]
pub(crate) fn write_signed(buf: &mut [u8], at: &mut usize, v: i64) {
    write(buf, at, zigzag(v));
}

/// Zigzag: small magnitudes of either sign take few bytes.
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn get(bytes: &[u8], at: &mut usize) -> u64 {
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

pub(crate) fn get_signed(bytes: &[u8], at: &mut usize) -> i64 {
    unzigzag(get(bytes, at))
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// [`get`] on bytes not known to be well formed: `None` past their end or beyond 64 bits.
pub(crate) fn checked_get(bytes: &[u8], at: &mut usize) -> Option<u64> {
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

pub(crate) fn checked_get_signed(bytes: &[u8], at: &mut usize) -> Option<i64> {
    checked_get(bytes, at).map(unzigzag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_written_holds_the_bytes_put_and_reads_back() {
        let values = [0i64, 1, -1, 63, -64, 64, 127, 128, 1 << 40, i64::MAX, i64::MIN];
        let (mut put_bytes, mut buf, mut at) = (Vec::new(), [0u8; MAX_BYTES * 22], 0);
        for &v in &values {
            put_signed(&mut put_bytes, v);
            write_signed(&mut buf, &mut at, v);
            put(&mut put_bytes, v as u64);
            write(&mut buf, &mut at, v as u64);
        }
        assert_eq!(&buf[..at], &put_bytes[..]);
        let mut read = 0;
        for &v in &values {
            assert_eq!(checked_get_signed(&buf[..at], &mut read), Some(v));
            assert_eq!(checked_get(&buf[..at], &mut read), Some(v as u64));
        }
        assert_eq!(read, at);
    }
}
