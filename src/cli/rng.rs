//! The command's random numbers: the demo's event amounts, shuffles and
//! simulated mail failures, and the benchmark's file names: the library's
//! own generator (SplitMix64), seeded (a demo replays with `--seed`) or
//! from the clock. Writes no table.

pub use litejob::__command::Rng;

/// A uniform draw in `0..n` (n > 0).
pub fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_a_seed_replays() {
        let (mut a, mut b) = (Rng::seeded(7), Rng::seeded(7));
        for n in [1, 2, 3, 10, 1000] {
            for _ in 0..1000 {
                let x = below(&mut a, n);
                assert!(x < n);
                assert_eq!(x, below(&mut b, n));
            }
        }
    }
}
