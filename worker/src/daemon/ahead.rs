//! Compile-ahead: the GPU modules that each lease's units, and the binades beside its last
//! unit, will need, compiled by NVRTC on a thread of its own before a unit waits for them.
//!
//! A module (limbs, degree) is compiled the first time a unit needs it, about 10 s of NVRTC on
//! one core while the unit (and every unit of its binade on every daemon of the machine)
//! waits. Mid-campaign, that was the stall that read as a slower farm in the ETA: a module of 6
//! limbs and degree 8, first needed 123 s into exp on [1, 128), held both daemons of one GPU
//! for 10 s. The coordinator hands units out in argument order, so the binade after a lease's
//! last one is what this daemon (or its neighbour on the machine) computes next: its modules,
//! compiled while the lease runs, are in the disk cache when it starts. Nothing here is
//! trusted from or run on a device, and a failure only costs the compilation a unit would have
//! done anyway (the unit meets the error again and reports it). `TMD_COMPILE_AHEAD=0` turns it
//! off (to measure what it saves).

use super::engine::device_arches;
use super::settings::Settings;
use crate::local::BackendArg;
use std::collections::HashSet;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;
use tmd_kernels::cuda;
use tmd_kernels::numbers::format::format_exponent_range;
use tmd_kernels::plan::UnitSpec as EngineUnit;
use tmd_kernels::search::{piece_modules, SearchConfig};
use tracing::{debug, info, warn};

/// A module: (limbs, degree).
pub type Module = (usize, usize);

/// One lease's request: its search and its units that [`planned_units`] reads (the ends and
/// middle of each binade run).
struct Request {
    cfg: SearchConfig,
    units: Vec<EngineUnit>,
}

/// Queues the modules of a lease's units (and of the binades beside its last unit) for the
/// compile-ahead thread, started on the first call; returns at once. Nothing on the CPU back
/// end.
pub fn compile_ahead(settings: &Settings, cfg: &SearchConfig, units: &[EngineUnit]) {
    let off = std::env::var("TMD_COMPILE_AHEAD").is_ok_and(|v| v == "0");
    if off || settings.backend == BackendArg::Cpu || units.is_empty() {
        return;
    }
    static QUEUE: OnceLock<Option<Mutex<Sender<Request>>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = channel();
        let devices = settings.devices.clone();
        match std::thread::Builder::new()
            .name("gpu-compile-ahead".into())
            .spawn(move || serve(devices, rx))
        {
            Ok(_) => Some(Mutex::new(tx)),
            Err(e) => {
                warn!(error = %e, "cannot start the GPU modules' compile-ahead; each unit compiles its own");
                None
            }
        }
    });
    let Some(queue) = queue else { return };
    // Only the binade runs' ends and middles are kept; the planning (MPFR at the samples'
    // ends) is the thread's, off the daemon's event loop.
    let request = Request {
        cfg: *cfg,
        units: units
            .chunk_by(|a, b| (a.negative, a.exponent) == (b.negative, b.exponent))
            .flat_map(|run| [run[0], run[run.len() / 2], run[run.len() - 1]])
            .collect(),
    };
    // A closed queue (the thread ended: no driver) drops the request.
    let _ = queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send(request);
}

/// The compile-ahead thread: the devices' architectures once, then each request's modules
/// that this process has not yet compiled or found cached, one at a time (one core: the
/// engine keeps the others).
fn serve(listed: Vec<usize>, requests: Receiver<Request>) {
    // Here, not on the caller's thread: the driver's first call can take a while.
    if !cuda::driver_available() {
        return;
    }
    let arches = device_arches(listed);
    if arches.is_empty() {
        return;
    }
    let mut done: HashSet<Module> = HashSet::new();
    // Units planned before (a binade's samples are the same for each lease in it), by search.
    let mut seen: Vec<(SearchConfig, HashSet<EngineUnit>)> = Vec::new();
    while let Ok(first) = requests.recv() {
        // Requests that queued meanwhile are planned together.
        let batch: Vec<Request> = std::iter::once(first).chain(requests.try_iter()).collect();
        let t = Instant::now();
        let mut wanted: Vec<Module> = batch
            .iter()
            .flat_map(|r| {
                let at = match seen.iter().position(|(c, _)| *c == r.cfg) {
                    Some(at) => at,
                    None => {
                        seen.push((r.cfg, HashSet::new()));
                        seen.len() - 1
                    }
                };
                let new: Vec<EngineUnit> = planned_units(&r.cfg, &r.units)
                    .into_iter()
                    .filter(|&u| seen[at].1.insert(u))
                    .collect();
                modules_of(&r.cfg, &new)
            })
            .filter(|m| !done.contains(m))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let planned = t.elapsed().as_secs_f64();
        let compiled = compile_modules(&arches, &wanted);
        done.extend(wanted.iter().copied());
        if compiled.is_empty() {
            debug!(?wanted, planned, "compile-ahead: nothing new to compile");
        } else {
            info!(
                modules = ?compiled,
                planned,
                seconds = t.elapsed().as_secs_f64(),
                "compiled GPU modules ahead of the units that need them"
            );
        }
    }
}

/// Compiles `modules` for each of `arches` through the process's module cache (a module in
/// the disk cache is read, not compiled); returns those NVRTC compiled here. A failure is
/// logged and skipped: the unit that needs the module compiles it and reports its error.
pub fn compile_modules(arches: &[String], modules: &[Module]) -> Vec<Module> {
    let mut compiled = Vec::new();
    for &(limbs, degree) in modules {
        for arch in arches {
            match cuda::compile(limbs, degree, arch) {
                Ok(c) if !c.cached => compiled.push((limbs, degree)),
                Ok(_) => {}
                Err(e) => {
                    warn!(limbs, degree, %arch, error = %e, "compiling a GPU module ahead failed")
                }
            }
        }
    }
    compiled.dedup();
    compiled
}

/// The modules that `units` need. A unit whose planning panics (a speculative neighbour the
/// function cannot take) adds none: compile-ahead is an optimisation, never a failure.
pub fn modules_of(cfg: &SearchConfig, units: &[EngineUnit]) -> Vec<Module> {
    let mut modules: Vec<Module> = units
        .iter()
        .flat_map(|&u| {
            std::panic::catch_unwind(|| piece_modules(cfg, u)).unwrap_or_else(|_| {
                debug!(?u, "compile-ahead: cannot plan this unit; skipped");
                Vec::new()
            })
        })
        .collect();
    modules.sort_unstable();
    modules.dedup();
    modules
}

/// The units whose modules stand for a lease's: the first, middle and last unit of each run of
/// one binade (neighbours in a binade share their modules), then units spread over the last
/// unit's binade and the binades beside it (above and below, as the campaign goes up or down
/// in magnitude): a binade's units do not all need the same modules ([`SAMPLES`]), and
/// planning a unit takes milliseconds (13 ms in exp's [32, 64) at 44 bits, 70 in [64, 128)).
pub fn planned_units(cfg: &SearchConfig, units: &[EngineUnit]) -> Vec<EngineUnit> {
    let mut out: Vec<EngineUnit> = Vec::new();
    let add = |u: EngineUnit, out: &mut Vec<EngineUnit>| {
        if !out.contains(&u) {
            out.push(u);
        }
    };
    for run in units.chunk_by(|a, b| (a.negative, a.exponent) == (b.negative, b.exponent)) {
        for u in [run[0], run[run.len() / 2], run[run.len() - 1]] {
            add(u, &mut out);
        }
    }
    if let Some(&last) = units.last() {
        for e in [
            Some(last.exponent),
            last.exponent.checked_add(1),
            last.exponent.checked_sub(1),
        ]
        .into_iter()
        .flatten()
        {
            for u in binade_samples(cfg, last.negative, e, last.count) {
                add(u, &mut out);
            }
        }
    }
    out
}

/// Units spread in binade `exponent` of this sign: [`SAMPLES`] of them, of `count` arguments
/// each (cut to the binade), on the campaign's grid of units; none outside the format's
/// exponents, and only those where the function is defined at both ends.
fn binade_samples(
    cfg: &SearchConfig,
    negative: bool,
    exponent: i32,
    count: u64,
) -> Vec<EngineUnit> {
    let fmt = cfg.format();
    let p = fmt.precision;
    let (emin, emax) = format_exponent_range(fmt);
    if !(emin..=emax).contains(&exponent) {
        return Vec::new();
    }
    let low = 1u64 << (p.bits() - 1);
    let count = count.clamp(1, low);
    let n = low.div_ceil(count);
    let mut picks: Vec<u64> = (0..SAMPLES).map(|i| i * (n - 1) / (SAMPLES - 1)).collect();
    picks.dedup();
    picks
        .into_iter()
        .map(|k| {
            let first = low + k * count;
            EngineUnit {
                negative,
                exponent,
                first,
                count: count.min(2 * low - first),
            }
        })
        .filter(|u| {
            let ends = [u.argument(0), u.argument(u.count - 1)];
            ends.iter().all(|a| cfg.function.defined_at(&a.to_float(p)))
        })
        .collect()
}

/// Units planned in each binade planned whole, its ends included: exp's [32, 64) at 44 bits
/// needs (6, 8) in 46 units of 256, one every 5 or 6 from the 5th, which 5 or 16 evenly
/// spread units all miss; 32 find it. Each binade is planned once a process (`serve`).
const SAMPLES: u64 = 32;

#[cfg(test)]
#[path = "ahead_tests.rs"]
mod tests;
