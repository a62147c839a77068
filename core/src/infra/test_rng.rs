//! A small deterministic number generator for randomised tests (a linear
//! congruential one: no crate for a few tests' numbers).

pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    /// The next number below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}
