//! When to try again: exponential backoff with jitter, as a pure function of
//! the attempt number and a random draw. Writes no table.

use std::time::Duration;

/// Backoff policy: `base * 2^(attempt-1)`, capped at `max`, then spread by
/// ±`jitter` (a fraction, 0.0–1.0) so that jobs failing together do not retry
/// together.
///
/// ```
/// # use std::time::Duration;
/// let quick = litejob::Backoff::default()
///     .with_base(Duration::from_millis(50))
///     .with_max(Duration::from_secs(1))
///     .with_jitter(0.1);
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Backoff {
    /// Delay after the first failure, before jitter.
    pub base: Duration,
    /// Upper bound before jitter.
    pub max: Duration,
    /// Fraction of the delay added or removed at random.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(3600),
            jitter: 0.25,
        }
    }
}

impl Backoff {
    /// Sets the delay after the first failure.
    pub fn with_base(mut self, d: Duration) -> Self {
        self.base = d;
        self
    }

    /// Sets the upper bound of the delay before jitter.
    pub fn with_max(mut self, d: Duration) -> Self {
        self.max = d;
        self
    }

    /// Sets the fraction of the delay added or removed at random (0.0–1.0).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay after failed attempt number `attempt` (1-based); `unit` is a
    /// uniform random draw in `[0, 1)`.
    pub fn delay(&self, attempt: u32, unit: f64) -> Duration {
        let exp = attempt.saturating_sub(1).min(40);
        let raw = self.base.as_secs_f64() * 2f64.powi(exp as i32);
        let capped = raw.min(self.max.as_secs_f64());
        let spread = (unit.clamp(0.0, 1.0) * 2.0 - 1.0) * self.jitter.clamp(0.0, 1.0);
        Duration::from_secs_f64((capped * (1.0 + spread)).max(0.0))
    }
}

/// A small, fast, non-cryptographic random source (SplitMix64) for the
/// runtime's jitter, so the library needs no random-number crate.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator with a fixed seed (reproducible).
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from the clock, the process id and a counter.
    pub fn from_entropy() -> Rng {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let c = COUNTER.fetch_add(1, Ordering::Relaxed);
        Rng(t ^ ((std::process::id() as u64) << 32) ^ c.wrapping_mul(0x9E37_79B9_7F4A_7C15))
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

#[cfg(test)]
mod tests {
    //! Backoff as a pure function: every attempt number and a fine grid of
    //! random draws, checked exhaustively rather than sampled.

    use super::*;

    /// Draws across `[0, 1)`, both ends and values just inside them.
    fn units() -> impl Iterator<Item = f64> {
        (0..1000).map(|i| f64::from(i) / 1000.0).chain([
            1e-12,
            0.5,
            1.0 - 1e-12,
            1.0 - f64::EPSILON,
        ])
    }

    #[test]
    fn delay_stays_within_jitter_of_the_capped_exponential() {
        let b = Backoff::default();
        for attempt in 1u32..100 {
            let ideal = (2f64.powi(attempt.min(41) as i32 - 1)).min(3600.0);
            for unit in units() {
                let d = b.delay(attempt, unit).as_secs_f64();
                assert!(
                    d >= ideal * 0.75 - 1e-9 && d <= ideal * 1.25 + 1e-9,
                    "attempt {attempt}, unit {unit}: {d} vs {ideal}"
                );
            }
        }
    }

    #[test]
    fn delay_grows_with_the_attempt_up_to_the_cap_without_jitter() {
        let b = Backoff {
            jitter: 0.0,
            ..Backoff::default()
        };
        let mut last = Duration::ZERO;
        for a in 1u32..=200 {
            let d = b.delay(a, 0.5);
            assert!(d >= last, "attempt {a}: {d:?} after {last:?}");
            assert!(d <= b.max, "attempt {a}: {d:?} over the cap");
            last = d;
        }
        assert_eq!(last, b.max);
        // 1 s doubled reaches the hour's cap at the 13th attempt.
        assert_eq!(b.delay(12, 0.5), Duration::from_secs(2048));
        assert_eq!(b.delay(13, 0.5), b.max);
    }

    #[test]
    fn the_first_attempt_waits_the_base_and_attempt_zero_counts_as_the_first() {
        let b = Backoff {
            base: Duration::from_millis(250),
            max: Duration::from_secs(60),
            jitter: 0.0,
        };
        assert_eq!(b.delay(1, 0.3), Duration::from_millis(250));
        assert_eq!(b.delay(0, 0.3), b.delay(1, 0.3));
        assert_eq!(b.delay(2, 0.3), Duration::from_millis(500));
    }

    #[test]
    fn jitter_spreads_evenly_around_the_delay_and_never_past_its_bounds() {
        let b = Backoff {
            base: Duration::from_secs(8),
            max: Duration::from_secs(60),
            jitter: 0.5,
        };
        // The draw's ends map to the jitter's ends, its middle to no jitter.
        assert_eq!(b.delay(1, 0.0), Duration::from_secs(4));
        assert_eq!(b.delay(1, 0.5), Duration::from_secs(8));
        for unit in units().chain([-3.0, 1.0, 7.0, f64::INFINITY]) {
            let d = b.delay(1, unit);
            assert!(
                (Duration::from_secs(4)..=Duration::from_secs(12)).contains(&d),
                "unit {unit}: {d:?}"
            );
        }
        // A jitter outside 0..=1 is clamped: never a negative delay.
        for jitter in [-1.0, 0.0, 1.0, 2.5] {
            let b = Backoff { jitter, ..b };
            for unit in [0.0, 0.5, 1.0 - f64::EPSILON] {
                let d = b.delay(1, unit).as_secs_f64();
                assert!((0.0..=16.0 + 1e-9).contains(&d), "jitter {jitter}: {d}");
            }
        }
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let year = Duration::from_secs(365 * 86_400);
        for b in [
            Backoff::default(),
            Backoff {
                base: Duration::from_secs(3600),
                max: year,
                jitter: 1.0,
            },
        ] {
            for attempt in [40, 41, 64, 1000, u32::MAX / 2, u32::MAX - 1, u32::MAX] {
                for unit in [0.0, 0.5, 1.0 - f64::EPSILON] {
                    let d = b.delay(attempt, unit);
                    assert!(d <= b.max.mul_f64(1.0 + b.jitter), "{attempt}: {d:?}");
                    assert!(d >= b.max.mul_f64(1.0 - b.jitter), "{attempt}: {d:?}");
                }
            }
        }
    }

    #[test]
    fn unit_draws_are_in_range() {
        let mut r = super::Rng::seeded(7);
        for _ in 0..10_000 {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
