//! Random choices for SPOP, SRANDMEMBER and HRANDFIELD.
//!
//! Every encoding can reach its `i`th element in O(1) (tables and intsets directly, packed
//! sequences after one O(N) pass collecting offsets), so sampling reduces to picking indexes.

use std::collections::HashSet;

use crate::policy::random_u64;

/// When `count * SHUFFLE_FACTOR > n`, distinct picks shuffle all indexes instead of drawing
/// and rejecting repeats (Valkey's `SRANDMEMBER_SUB_STRATEGY_MUL`): rejection would then
/// retry too often, and shuffling costs O(n) = O(count).
const SHUFFLE_FACTOR: usize = 3;

/// A uniform integer in `0..n`; `n` must not be 0.
pub fn below(n: usize) -> usize {
    // Lemire's multiply-shift: no modulo bias worth mentioning, no division.
    ((u128::from(random_u64()) * n as u128) >> 64) as usize
}

/// `count` distinct indexes in `0..n` (`count <= n`), in random order, with O(count)
/// expected work.
pub fn distinct(n: usize, count: usize) -> Vec<usize> {
    debug_assert!(count <= n);
    if count.saturating_mul(SHUFFLE_FACTOR) > n {
        // Partial Fisher-Yates: the first `count` slots end up a uniform random sample.
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..count {
            let j = i + below(n - i);
            all.swap(i, j);
        }
        all.truncate(count);
        return all;
    }
    let mut seen = HashSet::with_capacity(count);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let i = below(n);
        if seen.insert(i) {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_picks_are_distinct_and_in_range() {
        for (n, count) in [(10, 10), (10, 3), (1000, 5), (1000, 400), (1, 1), (5, 0)] {
            let picks = distinct(n, count);
            assert_eq!(picks.len(), count);
            let mut sorted = picks.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), count);
            assert!(picks.iter().all(|&i| i < n));
        }
    }

    #[test]
    fn picks_are_roughly_uniform() {
        let mut hits = [0u32; 10];
        for _ in 0..20_000 {
            hits[below(10)] += 1;
            for i in distinct(10, 2) {
                hits[i] += 1;
            }
        }
        // Each index expects 6000 hits; allow a wide margin so the test never flakes.
        assert!(hits.iter().all(|&h| (5000..7000).contains(&h)), "{hits:?}");
    }
}
