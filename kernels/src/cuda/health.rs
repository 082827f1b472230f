//! A device's health and use as the back end sees it: whether a sticky error has lost its
//! context (after which nothing on it can be trusted or even run), and how long it has had a
//! piece on it, for the daemon's per-device account.

use super::CudaError;
use cudarc::driver::{sys::CUresult, DriverError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Whether a driver error leaves the context unusable. The CUDA documentation calls these
/// sticky: every later call in the process fails the same way, and only a new process (a new
/// context) can use the device again. Running the piece again, smaller lists included, cannot
/// help.
pub fn is_sticky(e: &CudaError) -> bool {
    use CUresult::*;
    matches!(
        e,
        CudaError::Driver(DriverError(
            CUDA_ERROR_ECC_UNCORRECTABLE
                | CUDA_ERROR_NVLINK_UNCORRECTABLE
                | CUDA_ERROR_ILLEGAL_ADDRESS
                | CUDA_ERROR_LAUNCH_TIMEOUT
                | CUDA_ERROR_CONTEXT_IS_DESTROYED
                | CUDA_ERROR_ASSERT
                | CUDA_ERROR_HARDWARE_STACK_ERROR
                | CUDA_ERROR_ILLEGAL_INSTRUCTION
                | CUDA_ERROR_MISALIGNED_ADDRESS
                | CUDA_ERROR_INVALID_ADDRESS_SPACE
                | CUDA_ERROR_INVALID_PC
                | CUDA_ERROR_LAUNCH_FAILED
        ))
    )
}

/// A driver error by its code's name: `DriverError`'s own text asks the driver for a
/// description, which needs `libcuda` loaded (not so in the tests of machines without one).
fn describe(e: &CudaError) -> String {
    match e {
        CudaError::Driver(DriverError(code)) => format!("CUDA driver: {code:?}"),
        other => other.to_string(),
    }
}

/// A device's health: the first sticky error it met, and its busy time.
#[derive(Debug, Default)]
pub struct Health {
    lost: Mutex<Option<String>>,
    /// Pieces on the device now, and since when it has had at least one.
    active: Mutex<(u32, Option<Instant>)>,
    busy_ns: AtomicU64,
    pieces: AtomicU64,
}

impl Health {
    /// The sticky error that lost the device, if one did.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records `e` when it is sticky; says whether it was.
    pub fn note(&self, e: &CudaError) -> bool {
        if !is_sticky(e) {
            return false;
        }
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        if lost.is_none() {
            let what = describe(e);
            tracing::error!(error = %what, "the GPU's context is lost: no more work on this device in this process");
            *lost = Some(what);
        }
        true
    }

    /// Counts a piece on the device until the guard drops.
    pub fn enter(&self) -> Busy<'_> {
        let mut a = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if a.0 == 0 {
            a.1 = Some(Instant::now());
        }
        a.0 += 1;
        Busy(self)
    }

    /// Pieces finished and seconds with at least one piece on the device, so far.
    pub fn usage(&self) -> (u64, f64) {
        let a = self.active.lock().unwrap_or_else(|e| e.into_inner());
        let running = match a.1 {
            Some(since) if a.0 > 0 => since.elapsed().as_nanos() as u64,
            _ => 0,
        };
        let busy = self.busy_ns.load(Ordering::Relaxed) + running;
        (self.pieces.load(Ordering::Relaxed), busy as f64 * 1e-9)
    }
}

/// A piece on a device (see [`Health::enter`]).
pub struct Busy<'a>(&'a Health);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let h = self.0;
        let mut a = h.active.lock().unwrap_or_else(|e| e.into_inner());
        a.0 -= 1;
        if a.0 == 0 {
            if let Some(since) = a.1.take() {
                h.busy_ns
                    .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        h.pieces.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_errors_lose_the_device_and_others_do_not() {
        let h = Health::default();
        let oom = CudaError::Driver(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        assert!(!h.note(&oom));
        assert!(!h.note(&CudaError::Unsupported("degree 13".into())));
        assert_eq!(h.lost(), None);
        let fault = CudaError::Driver(DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS));
        assert!(h.note(&fault));
        let first = h.lost().expect("lost");
        assert!(first.contains("ILLEGAL_ADDRESS"), "{first}");
        // The first sticky error is the one kept.
        h.note(&CudaError::Driver(DriverError(
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
        )));
        assert_eq!(h.lost(), Some(first));
    }

    #[test]
    fn busy_time_counts_overlapping_pieces_once() {
        let h = Health::default();
        let start = std::time::Instant::now();
        {
            let _a = h.enter();
            std::thread::sleep(std::time::Duration::from_millis(20));
            let _b = h.enter();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let wall = start.elapsed().as_secs_f64();
        let (pieces, busy) = h.usage();
        assert_eq!(pieces, 2);
        // The union of the two spans is the first one, within the block's wall; counting the
        // overlap twice would add the second's 20 ms or more on top. Bounded by the measured
        // wall, not a fixed figure: on a loaded machine the sleeps overshoot.
        assert!(busy >= 0.039 && busy <= wall, "busy {busy}, wall {wall}");
        std::thread::sleep(std::time::Duration::from_millis(10));
        assert_eq!(h.usage().1, busy, "idle time is not busy time");
    }
}
