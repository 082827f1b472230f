//! The engine as the daemon uses it: the back end chosen and self-tested at start, one unit
//! computed with fallbacks when a GPU fails, and its result in the wire's terms.

use super::settings::Settings;
use crate::local::BackendArg;
use anyhow::{bail, Result};
use std::sync::Arc;
use std::sync::OnceLock;
use tmd_kernels::cuda::{self, Cuda, MemoryBudget, Reference};
use tmd_kernels::oracle::verify::Kind;
use tmd_kernels::plan::UnitSpec as EngineUnit;
use tmd_kernels::search::{search_unit, Backend, Cpu, SearchConfig, SearchError};
use tmd_wire::{HrCase, HrKind, LeasedUnit, SkippedRun, UnitResult, UnitStats};
use tracing::{error, info, warn};

/// The engine's unit of a leased unit.
pub fn engine_unit(u: &LeasedUnit) -> EngineUnit {
    EngineUnit {
        negative: u.spec.negative,
        exponent: u.spec.exponent,
        first: u.spec.first,
        count: u.spec.count,
    }
}

/// The engine as the daemon shares it between its units.
pub type SharedBackend = Arc<dyn Backend + Send + Sync>;

/// The back end for this daemon. GPU arithmetic is not taken on trust: each device runs the
/// self-test first and a device that fails any check is refused. Each device is opened once,
/// with the engine's memory budget (`--gpu-memory`), and tested in that context: the modules
/// the self-test compiles and the slots it makes are the engine's. Several devices are opened
/// and tested at once, while the CPU computes the self-test's reference answers.
pub fn open_backend(settings: &Settings) -> Result<SharedBackend> {
    let want_gpu = settings.backend == BackendArg::Cuda;
    if settings.backend == BackendArg::Cpu {
        return Ok(Arc::new(Cpu));
    }
    let devices = if settings.devices.is_empty() {
        match cuda::device_count() {
            Ok(n) if n > 0 => (0..n).collect(),
            Ok(_) if want_gpu => bail!("the CUDA back end: no CUDA device on this machine"),
            Err(e) if want_gpu => bail!("the CUDA back end: {e}"),
            Ok(_) => {
                warn!("no GPU on this machine; computing on the CPU");
                return Ok(Arc::new(Cpu));
            }
            Err(e) => {
                warn!(error = %e, "no usable GPU; computing on the CPU");
                return Ok(Arc::new(Cpu));
            }
        }
    } else {
        settings.devices.clone()
    };
    let budget = settings.gpu_memory;
    // The self-test's CPU side is computed while the devices open (it is most of the test's
    // time), once for all of them.
    let reference = OnceLock::new();
    let tested: Vec<Option<Cuda>> = std::thread::scope(|s| {
        s.spawn(|| reference.get_or_init(Reference::compute));
        let reference = &reference;
        let jobs: Vec<_> = devices
            .iter()
            .map(|&d| s.spawn(move || open_and_test(d, budget, reference)))
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap_or(None)).collect()
    });
    match Cuda::merge(tested.into_iter().flatten().collect()) {
        Some(c) => {
            info!(backend = %c.name(), "computing on the GPU");
            Ok(Arc::new(c))
        }
        None if want_gpu => bail!("no CUDA device passed the self-test"),
        None => {
            warn!("no GPU passed the self-test; computing on the CPU");
            Ok(Arc::new(Cpu))
        }
    }
}

/// Compiles, on a thread of its own, the GPU modules that the first `units` of the process's
/// first lease need, while the back end opens and self-tests: on a fresh machine
/// the first unit then finds its module ready instead of compiling it after the self-test,
/// about 5 s. Later calls do nothing (`ahead.rs` compiles later leases' modules). Nothing
/// runs on a device and nothing is trusted from it: the units still wait for the self-test, and
/// a failure here is only logged (the unit meets it again and reports it). Only the first and
/// the last of `units` are planned: neighbours share their modules, and a unit whose module is
/// missing compiles it when it runs (a device waits for a compilation already under way).
pub fn warm_up(settings: &Settings, cfg: &SearchConfig, units: &[EngineUnit]) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if settings.backend == BackendArg::Cpu
        || units.is_empty()
        || DONE.swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        return;
    }
    let listed = settings.devices.clone();
    let picked: Vec<EngineUnit> = units
        .first()
        .into_iter()
        .chain(units.last())
        .copied()
        .collect();
    let cfg = *cfg;
    let spawned = std::thread::Builder::new()
        .name("gpu-warm-up".into())
        .spawn(move || {
            // Here, not on the caller's thread: the driver's first call can take a while.
            if !cuda::driver_available() {
                return;
            }
            let t = std::time::Instant::now();
            let arches = device_arches(listed);
            let mut modules: Vec<(usize, usize)> = picked
                .iter()
                .flat_map(|&u| tmd_kernels::search::piece_modules(&cfg, u))
                .collect();
            modules.sort_unstable();
            modules.dedup();
            match cuda::warm_up(&arches, &modules) {
                Ok(()) => info!(?modules, ?arches, seconds = t.elapsed().as_secs_f64(), "the first lease's GPU modules are compiled"),
                Err(e) => warn!(error = %e, "compiling the first lease's GPU modules ahead failed; each unit compiles its own"),
            }
        });
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the GPU modules' warm-up");
    }
}

/// The architectures (`sm_90`, ...) of the devices `listed`, or of every device when none is
/// listed, each once. Call only where the driver is available.
pub fn device_arches(listed: Vec<usize>) -> Vec<String> {
    let devices = if listed.is_empty() {
        (0..cuda::device_count().unwrap_or(0)).collect()
    } else {
        listed
    };
    let mut arches: Vec<String> = devices
        .iter()
        .filter_map(|&d| cuda::device_arch(d).ok())
        .collect();
    arches.sort();
    arches.dedup();
    arches
}

/// Device `d` opened with `budget` when it passes the self-test; `None` (logged) when it
/// cannot be opened or fails any check.
fn open_and_test(d: usize, budget: MemoryBudget, reference: &OnceLock<Reference>) -> Option<Cuda> {
    let c = match Cuda::new(&[d], budget) {
        Ok(c) => c,
        Err(e) => {
            error!(device = d, error = %e, "cannot open this GPU: refusing it");
            return None;
        }
    };
    match c.selftest(d, reference) {
        Ok(r) if r.passed() => {
            info!(device = d, name = %r.name, checks = r.checks.len(), "GPU self-test passed");
            Some(c)
        }
        Ok(r) => {
            let failed: Vec<&str> = r
                .checks
                .iter()
                .filter(|c| !c.passed())
                .map(|c| c.name.as_str())
                .collect();
            error!(device = d, name = %r.name, failed = ?failed, "GPU self-test FAILED: refusing this device");
            None
        }
        Err(e) => {
            error!(device = d, error = %e, "GPU self-test could not run: refusing this device");
            None
        }
    }
}

/// Why a unit could not be computed here.
#[derive(Debug, Clone, PartialEq)]
pub enum UnitFailure {
    /// The unit itself (MPFR, skipped arguments, or the GPU then the CPU failing on it): it
    /// goes back to the server as failed.
    Unit(String),
    /// A device's context is lost (a sticky CUDA error): nothing more can run on it in this
    /// process. The unit is not to blame: it goes back unfinished, and the daemon stops.
    DeviceLost(String),
}

/// Computes one unit (its skipped runs, if any, go into the result: the server checks them).
/// A failure of the back end (not MPFR's, which would fail again) is tried again with smaller
/// GPU lists, then on the CPU, before the unit is given up: the error then says what each try
/// met. A lost device is not retried at all: its context fails every call, and computing every
/// later unit on the CPU would hide a broken GPU behind a daemon many times slower than its
/// leases are sized for.
pub fn compute_unit(
    cfg: &SearchConfig,
    spec: EngineUnit,
    backend: &dyn Backend,
    unit_id: i64,
) -> std::result::Result<tmd_kernels::search::UnitResult, UnitFailure> {
    let mut tries = Vec::new();
    let mut err = match search_unit(cfg, spec, backend) {
        Ok(r) => return Ok(r),
        Err(e) => e,
    };
    let lost = || backend.lost().map(UnitFailure::DeviceLost);
    if let SearchError::Backend(_) = err {
        if let Some(l) = lost() {
            return Err(l);
        }
        if backend.recover(&err) {
            warn!(unit.id = unit_id, error = %err, "the GPU failed on this unit; trying again with smaller lists");
            tries.push(format!("on {}: {err}", backend.name()));
            match search_unit(cfg, spec, backend) {
                Ok(r) => return Ok(r),
                Err(e) => err = e,
            }
            if let Some(l) = lost() {
                return Err(l);
            }
        }
    }
    // The CPU back end raises no back-end errors: one still here came from the GPU.
    if let SearchError::Backend(_) = err {
        warn!(unit.id = unit_id, error = %err, "the GPU failed on this unit; computing it on the CPU");
        tries.push(format!("on {}: {err}", backend.name()));
        match search_unit(cfg, spec, &Cpu) {
            Ok(r) => return Ok(r),
            Err(e) => err = e,
        }
        tries.push(format!("on the CPU: {err}"));
    } else {
        tries.push(err.to_string());
    }
    Err(UnitFailure::Unit(tries.join("; ")))
}

/// The release's reason for the units given up: what failed, on one line and within the
/// server's limit ([`one_line`]).
pub fn failure_reason(failures: &[String]) -> String {
    one_line(&format!("engine failure: {}", failures.join(" | ")))
}

/// A reason as the server takes it: on one line (it refuses control characters, and an NVRTC
/// log or a driver message may hold newlines) and within its 2000 bytes.
pub fn one_line(text: &str) -> String {
    one_line_within(text, 2000)
}

/// `text` on one line, without control characters, within `max` bytes (at least 16): cut at
/// a character's boundary and marked ` …` where it was longer.
pub fn one_line_within(text: &str, max: usize) -> String {
    let words: Vec<&str> = text
        .split(char::is_control)
        .filter(|s| !s.is_empty())
        .collect();
    let mut line = words.join(" ");
    if line.len() > max {
        let mut cut = max - 10;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str(" …");
    }
    line
}

/// A unit's result as the server takes it.
pub fn to_wire(
    r: &tmd_kernels::search::UnitResult,
    fencing_token: i64,
    elapsed: f64,
) -> UnitResult {
    let s = &r.stats;
    UnitResult {
        fencing_token,
        stats: UnitStats {
            units: s.units,
            domains: s.domains,
            phase1_failures: s.phase1_failures,
            subdomains: s.subdomains,
            phase2_failures: s.phase2_failures,
            phase3_arguments: s.phase3_arguments,
            candidates: s.candidates,
            false_positives: s.false_positives,
        },
        hr_cases: r
            .hr_cases
            .iter()
            .map(|c| HrCase {
                x: c.x.clone(),
                bits: c.bits,
                neg_log2_d: c.neg_log2_d,
                kind: match c.kind {
                    Kind::Fp => HrKind::Fp,
                    Kind::Mid => HrKind::Mid,
                },
                rounded: c.rounded.clone(),
            })
            .collect(),
        exact_cases: r.exact_cases.iter().map(|e| e.x.clone()).collect(),
        skipped: r
            .skipped
            .iter()
            .map(|s| SkippedRun {
                first: s.first.clone(),
                last: s.last.clone(),
                count: s.count,
                reason: s.reason.as_str().to_string(),
                rule: s.rule(),
            })
            .collect(),
        elapsed,
        digest: r.digest(),
        engine: Some(tmd_kernels::ENGINE_VERSION),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tmd_kernels::search::existence::Test;
    use tmd_kernels::search::generation::Generated;
    use tmd_kernels::search::PieceOutcome;
    use tmd_kernels::{Function, Precision};

    /// A back end whose device fails the first `fail` pieces; `recover` says whether shrinking
    /// is still possible.
    struct Flaky {
        fail: AtomicU32,
        can_recover: bool,
        recovered: AtomicU32,
        /// The failures are sticky: the device reports itself lost after the first.
        sticky: bool,
        calls: AtomicU32,
    }

    impl Flaky {
        fn new(fail: u32, can_recover: bool) -> Flaky {
            Flaky {
                fail: AtomicU32::new(fail),
                can_recover,
                recovered: AtomicU32::new(0),
                sticky: false,
                calls: AtomicU32::new(0),
            }
        }
    }

    impl Backend for Flaky {
        fn search_piece(
            &self,
            g: &Generated,
            test: Test,
            packet_domains: u64,
        ) -> std::result::Result<PieceOutcome, SearchError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.fail.load(Ordering::SeqCst) > 0 {
                self.fail.fetch_sub(1, Ordering::SeqCst);
                return Err(SearchError::Backend(
                    "CUDA driver: CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                ));
            }
            Cpu.search_piece(g, test, packet_domains)
        }

        fn name(&self) -> String {
            "flaky".into()
        }

        fn recover(&self, _err: &SearchError) -> bool {
            self.recovered.fetch_add(1, Ordering::SeqCst);
            self.can_recover
        }

        fn lost(&self) -> Option<String> {
            (self.sticky && self.calls.load(Ordering::SeqCst) > 0)
                .then(|| "CUDA device 0: CUDA_ERROR_ILLEGAL_ADDRESS".into())
        }
    }

    fn unit() -> (SearchConfig, EngineUnit) {
        let cfg = SearchConfig::new(Function::Exp, Precision::new(20).unwrap(), 12);
        let spec = EngineUnit {
            negative: false,
            exponent: 0,
            first: 1 << 19,
            count: 1 << 14,
        };
        (cfg, spec)
    }

    #[test]
    fn a_device_failure_is_retried_smaller_then_on_the_cpu() {
        let (cfg, spec) = unit();
        let want = search_unit(&cfg, spec, &Cpu).unwrap();
        // Recovers on the second try, on the device.
        let b = Flaky::new(1, true);
        let got = compute_unit(&cfg, spec, &b, 7).unwrap();
        assert_eq!(
            (got.stats, got.hr_cases),
            (want.stats, want.hr_cases.clone())
        );
        assert_eq!(b.recovered.load(Ordering::SeqCst), 1);
        // The device keeps failing: the CPU computes the unit.
        let b = Flaky::new(u32::MAX, true);
        let got = compute_unit(&cfg, spec, &b, 7).unwrap();
        assert_eq!(got.hr_cases, want.hr_cases);
        // Nothing to shrink: straight to the CPU.
        let b = Flaky::new(u32::MAX, false);
        assert_eq!(
            compute_unit(&cfg, spec, &b, 7).unwrap().hr_cases,
            want.hr_cases
        );
    }

    #[test]
    fn a_lost_device_is_neither_retried_nor_replaced_by_the_cpu() {
        let (cfg, spec) = unit();
        let mut b = Flaky::new(u32::MAX, true);
        b.sticky = true;
        match compute_unit(&cfg, spec, &b, 7) {
            Err(UnitFailure::DeviceLost(why)) => assert!(why.contains("ILLEGAL_ADDRESS"), "{why}"),
            other => panic!("expected a lost device, got {other:?}"),
        }
        assert_eq!(b.calls.load(Ordering::SeqCst), 1, "one try, no retry");
        assert_eq!(b.recovered.load(Ordering::SeqCst), 0, "nothing to shrink");
    }

    /// A periodic unit whose copies would exceed any list fails at once, on the device, with
    /// its cause: no smaller lists, no CPU (it would fail the same way there).
    #[test]
    fn too_many_cases_fail_once_without_a_retry() {
        let fmt = tmd_kernels::numbers::format::Format::named("binary64").unwrap();
        // 2^45: periods of 256 arguments, about half of them cases at 2 bits, 2^32 periods.
        let cfg = SearchConfig::in_format(Function::Sinpi, fmt, 2);
        let spec = EngineUnit {
            negative: false,
            exponent: 45,
            first: 1 << 52,
            count: 1 << 40,
        };
        let b = Flaky::new(u32::MAX, true);
        match compute_unit(&cfg, spec, &b, 7) {
            Err(UnitFailure::Unit(why)) => {
                assert!(why.starts_with("too many cases"), "{why}");
                assert!(!why.contains("on the CPU"), "{why}");
            }
            other => panic!("expected the unit to fail, got {other:?}"),
        }
        assert_eq!(b.recovered.load(Ordering::SeqCst), 0, "nothing to shrink");
    }

    #[test]
    fn a_failure_reason_fits_the_server() {
        let many: Vec<String> = (0..100)
            .map(|i| format!("unit {i}: {}", "é".repeat(40)))
            .collect();
        let r = failure_reason(&many);
        assert!(r.len() <= 2000, "{}", r.len());
        assert!(r.starts_with("engine failure: unit 0: é"));
        assert_eq!(
            failure_reason(&["unit 3: boom".into()]),
            "engine failure: unit 3: boom"
        );
        let log = failure_reason(&["unit 4: NVRTC: line 1\nline 2\r\n\tline 3\u{0}".into()]);
        assert_eq!(log, "engine failure: unit 4: NVRTC: line 1 line 2 line 3");
        assert!(!log.chars().any(char::is_control));
    }
}
