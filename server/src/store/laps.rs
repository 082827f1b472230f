//! Where a request's time goes, phase by phase: a stopwatch the claim path laps as it goes
//! (waits for a turn, for a connection, each statement), read into `/metrics`.

use std::sync::Mutex;
use std::time::Instant;

/// A stopwatch of named phases. Shared by reference, so a retried transaction can lap it
/// from inside the closure that runs it again.
#[derive(Debug)]
pub struct Laps {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    last: Instant,
    /// Seconds per phase, in the order phases were first lapped; a phase lapped again (a
    /// retried claim, a second lane) adds to its own.
    phases: Vec<(&'static str, f64)>,
}

impl Default for Laps {
    fn default() -> Self {
        Self::start()
    }
}

impl Laps {
    /// A stopwatch running from now.
    pub fn start() -> Self {
        Laps {
            inner: Mutex::new(Inner {
                last: Instant::now(),
                phases: Vec::new(),
            }),
        }
    }

    /// Ends the phase `name`: the time since the last lap (or the start) is its own.
    pub fn lap(&self, name: &'static str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let seconds = now.duration_since(inner.last).as_secs_f64();
        inner.last = now;
        match inner.phases.iter_mut().find(|(n, _)| *n == name) {
            Some((_, s)) => *s += seconds,
            None => inner.phases.push((name, seconds)),
        }
    }

    /// Seconds per phase, each phase once.
    pub fn phases(&self) -> Vec<(&'static str, f64)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.phases.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_lapped_twice_adds_up_and_keeps_its_place() {
        let laps = Laps::start();
        std::thread::sleep(std::time::Duration::from_millis(2));
        laps.lap("a");
        laps.lap("b");
        std::thread::sleep(std::time::Duration::from_millis(3));
        laps.lap("a");
        let phases = laps.phases();
        assert_eq!(
            phases.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(phases[0].1 >= 0.005, "{phases:?}");
        assert!(phases[1].1 < phases[0].1, "{phases:?}");
    }
}
