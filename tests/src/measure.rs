//! What the benchmarks share: timing, percentiles, and a small deterministic random source
//! for generated trees and random edits (the tests use it too).

use std::time::{Duration, Instant};

/// The `percent`-th percentile of `samples` (sorted in place).
///
/// # Panics
///
/// If `samples` is empty.
pub fn percentile(samples: &mut [Duration], percent: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() * percent / 100).min(samples.len() - 1)]
}

/// The median of `samples`.
///
/// # Panics
///
/// If `samples` is empty.
pub fn median(mut samples: Vec<Duration>) -> Duration {
    percentile(&mut samples, 50)
}

/// The median time of `runs` runs of `run`, after one run to warm up.
pub fn time<T>(runs: usize, mut run: impl FnMut() -> T) -> Duration {
    run();
    median(
        (0..runs)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(run());
                started.elapsed()
            })
            .collect(),
    )
}

/// A small deterministic random source (xorshift): the same sequence for the same seed.
pub struct Random(pub u64);

impl Random {
    /// A number below `bound`.
    pub fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound as u64) as usize
    }

    /// One of `choices`.
    pub fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }
}
