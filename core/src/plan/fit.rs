//! The largest batch, and the longest sequence, whose predicted peak fits a GPU: memory grows
//! with both, so each is bisected over the same prediction the plan reports.

/// Reserved bytes predicted for a batch size and a sequence length.
pub trait Predict {
    fn reserved(&self, batch: u64, seq: u64) -> i64;
}

impl<F: Fn(u64, u64) -> i64> Predict for F {
    fn reserved(&self, batch: u64, seq: u64) -> i64 {
        self(batch, seq)
    }
}

/// Largest `n` in 0..=limit with `fits(n)`, for a `fits` true up to some point and false after.
fn largest(limit: u64, fits: impl Fn(u64) -> bool) -> u64 {
    if !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while hi <= limit && fits(hi) {
        lo = hi;
        hi *= 2;
    }
    let mut hi = hi.min(limit + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The largest batch at `seq` tokens that fits `capacity` with `outside` bytes used beside the allocator.
pub fn max_batch_size(p: &impl Predict, seq: u64, capacity: i64, outside: i64) -> u64 {
    largest(1 << 20, |b| p.reserved(b, seq) + outside <= capacity)
}

/// The longest sequence at `batch` that fits, up to `limit` tokens (the model's context, when known).
pub fn max_seq_len(p: &impl Predict, batch: u64, capacity: i64, outside: i64, limit: u64) -> u64 {
    largest(limit, |s| p.reserved(batch, s) + outside <= capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisects_to_the_last_fitting_value() {
        let p = |b: u64, s: u64| (1000 + 10 * b * s) as i64;
        assert_eq!(max_batch_size(&p, 4, 2000, 0), 25);
        assert_eq!(max_batch_size(&p, 4, 900, 0), 0);
        assert_eq!(max_seq_len(&p, 2, 2000, 100, 1 << 20), 45);
        assert_eq!(max_seq_len(&p, 1, 1_000_000, 0, 2048), 2048);
    }
}
