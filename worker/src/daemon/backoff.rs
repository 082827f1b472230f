//! How long the daemon waits before trying the coordinator again: short enough that a farm
//! is back at work within seconds of an outage's end, spread so that workers do not return
//! all at once, and steered by the server when it says how long to wait.

use rand::Rng;
use std::time::Duration;

/// The longest wait between tries when the server gives no hint: after an outage a worker is
/// back within this (plus the hint-free jitter) of the server's return.
pub const CAP: Duration = Duration::from_secs(15);

/// The most a server's hint (`Retry-After`, or "no work, retry after") is followed: a hint
/// from a proxy or a misconfigured server must not park a worker for hours.
pub const MAX_HINT: Duration = Duration::from_secs(120);

/// Exponential backoff from 1 s to [`CAP`] with full jitter in [½, 1] of each step; a hint
/// from the server replaces it.
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff { attempt: 0 }
    }

    /// The wait before the next try. With a hint from the server, about that long (it knows
    /// when it expects to be back); otherwise 1, 2, 4, 8, then 15 s, each jittered.
    pub fn next(&mut self, hint: Option<Duration>) -> Duration {
        let step = Duration::from_secs(1u64 << self.attempt.min(4)).min(CAP);
        self.attempt = self.attempt.saturating_add(1);
        match hint {
            Some(h) => spread(h),
            None => step.mul_f64(rand::thread_rng().gen_range(0.5..=1.0)),
        }
    }

    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// A server's hint, capped at [`MAX_HINT`], stretched by up to a quarter at random: workers
/// told the same thing at the same moment come back at different moments.
pub fn spread(hint: Duration) -> Duration {
    hint.min(MAX_HINT)
        .max(Duration::from_millis(100))
        .mul_f64(rand::thread_rng().gen_range(1.0..=1.25))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_with_jitter() {
        let mut b = Backoff::new();
        let first = b.next(None);
        assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
        let second = b.next(None);
        assert!(second >= Duration::from_secs(1) && second <= Duration::from_secs(2));
        let third = b.next(None);
        assert!(third >= Duration::from_secs(2) && third <= Duration::from_secs(4));
        b.next(None);
        // From the fifth try on: the cap, never more.
        let waits: Vec<Duration> = (0..200).map(|_| b.next(None)).collect();
        assert!(
            waits.iter().all(|w| *w >= CAP / 2 && *w <= CAP),
            "{waits:?}"
        );
        // Jitter: the waits are not all the same.
        assert!(waits.iter().any(|w| *w != waits[0]));
        b.reset();
        assert!(b.next(None) <= Duration::from_secs(1));
    }

    #[test]
    fn the_servers_hint_steers_the_wait_both_ways() {
        let mut b = Backoff::new();
        for _ in 0..10 {
            b.next(None);
        }
        // Shorter than the backoff reached: the server knows it is back soon.
        let w = b.next(Some(Duration::from_secs(2)));
        assert!(
            w >= Duration::from_secs(2) && w <= Duration::from_millis(2500),
            "{w:?}"
        );
        // Longer: honoured, spread by at most a quarter.
        let w = b.next(Some(Duration::from_secs(30)));
        assert!(
            w >= Duration::from_secs(30) && w <= Duration::from_millis(37_500),
            "{w:?}"
        );
        // Absurd: capped.
        let w = b.next(Some(Duration::from_secs(86_400)));
        assert!(w >= MAX_HINT && w <= MAX_HINT.mul_f64(1.25), "{w:?}");
    }
}
