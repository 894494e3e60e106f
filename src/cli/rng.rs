//! The command's random numbers: the demo's event amounts, shuffles and
//! simulated mail failures, and the benchmark's file names. SplitMix64,
//! seeded (a demo replays with `--seed`) or from the clock. Writes no table.

/// A small, fast, non-cryptographic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator with a fixed seed: the same draws every time.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from the clock, the process id and a counter.
    pub fn from_entropy() -> Rng {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let c = COUNTER.fetch_add(1, Ordering::Relaxed);
        Rng(t ^ (u64::from(std::process::id()) << 32) ^ c.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

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
