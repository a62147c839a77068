//! Test support: a small deterministic number generator for randomised tests (a linear
//! congruential one: no crate for a few tests' numbers), and a count of the threads of a name.

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

/// Threads of this process named `name` (Linux: `/proc/self/task/*/comm`), for tests of
/// the threads inputs are read on.
pub(crate) fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| t.ok())
                .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
                .count()
        })
        .unwrap_or(0)
}
