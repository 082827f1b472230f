//! The CUDA back end: phases 1-3 of a generated piece on one or several GPUs, with answers
//! identical to the CPU back end's (`search/phases.rs`), in a bounded amount of device memory.
//!
//! Division of labour. The CPU generates the piece (exact integers through `rug`) and verifies
//! the candidates with MPFR (`search_unit`); this module only replaces
//! `phases::search_generated_cpu`:
//! - upload the walked polynomials' `rho` (`walk_b`, `walk_slope`, `walk_r2`) as words mod
//!   `2^F`, a few hundred bytes;
//! - phase 1 (`tmd_phase1`): one thread per packet of domains computes its exact start state
//!   (`Generated::shift`, with exact multi-limb binomials `C(i0, m)`), walks its domains with
//!   tabulated differences (only `b` and the slope: `r2` is needed at failing domains alone;
//!   where words have more than two limbs, `tmd_phase1_top` walks only their top two limbs,
//!   within a bound on the dropped carries, and `tmd_phase1_exact` tests the rare domains that
//!   bound leaves undecided from exact words: half the registers, twice the occupancy),
//!   in stripes where a warp's packets are whole (its lanes walk neighbouring domains, from
//!   exact step-32 differences, so that their partial quotients and branches agree;
//!   `TMD_CUDA_STRIPE`),
//!   runs the existence test on each (optionally the regular test on two domains at once,
//!   interleaved: `TMD_CUDA_LANES=2`, slower so far) and appends the failing domains' indices
//!   to a compacted list through an atomic counter: no polynomial goes through memory;
//!   `tmd_phase1_words` then evaluates the failing domains' `b`, slope and `r2` exactly at their
//!   indices;
//! - phase 2 (`tmd_phase2`): one thread per (failed domain, subdomain), compacted again;
//! - phase 3 (`tmd_phase3`): one thread per chunk of 64 arguments of a failed subdomain, exact
//!   start by the binomial formula; candidates appended and copied back, then sorted here.
//!
//! Memory (`memory.rs`). Each device gets a budget (`--gpu-memory`, default half its free
//! memory), cut into at most 4 slots; a piece runs in one slot, whose three lists (phase-1
//! indices, phases 2-3 work lists, candidates) grow on demand up to fixed shares of it and are
//! kept for the next piece. The work is cut to fit the lists, never the other way round:
//! phase 1 runs over ranges of packets (a range whose failures overflow the index list is run
//! again, with a larger list while the share allows, else cut into smaller ranges), its failures
//! go through phases 2-3 in batches sized to the work share, and phase 3 runs over ranges of
//! subdomains whose candidates fit. A list counts past its capacity without writing, so no
//! answer depends on a guess; the statistics are sums of the device counters over the launches
//! that fitted and equal the CPU's by construction (same tests on the same words, each domain
//! and subdomain tested exactly once). An allocation refused for lack of memory halves the
//! slot and runs the piece again; below 4 MiB per slot the piece fails with
//! [`CudaError::OutOfMemory`], and the daemon then retries it on the CPU.
//!
//! Arithmetic (`kernels/cuda/tmd.cu`): words are `L` 64-bit limbs added with the hardware's
//! add-with-carry chain; the existence tests are the CPU's line by line, with quotients below 3
//! by subtraction (as the CPU), larger ones from a single-precision estimate corrected by exact
//! integer arithmetic (the 64-bit hardware division beyond 2^20), and the regular test's cap on
//! the last quotient checked by a multiplication instead of a division. Every variant returns
//! the exact quotient and remainder, so the answers are the CPU's; [`selftest`] checks each
//! piece of this against the CPU on the device before it is trusted.
//!
//! Kernels are compiled at run time by NVRTC (`compile.rs`), one module per (limbs `L`,
//! degree) so that the walked differences stay in registers, to a cubin for the device's own
//! architecture (`sm_XY`: loading it is a copy, where PTX made the driver compile every module
//! again on a fresh machine), and cached on disk keyed by the SHA-256 of the source, the options
//! and the NVRTC version. Different modules compile at once (the self-test asks for all of its
//! own together, `Device::prepare`). A missing `libcuda` or `libnvrtc` is an error
//! ([`CudaError::NoDriver`], [`CudaError::NoNvrtc`]), never a panic.
//!
//! Concurrency: each `search_piece` call takes a slot (and its stream) on the next device
//! (round robin), waiting while all are busy, so the units that `search_units` runs in parallel
//! overlap their CPU generation and verification with other units' kernels, and several
//! devices share the work.

mod compile;
mod device;
mod health;
mod memory;
mod piece;
mod selftest;
mod walk;

pub use compile::{
    cache_key, compile, compile_options, compile_uncached, defines_kernel, nvrtc_available,
    nvrtc_version, recompile, warm_up, Compiled,
};
use device::{ensure, Device, Module, Slot, EXACT_CAP};
pub use device::{walk_slack, DeviceMemory};
pub use health::is_sticky;
use health::Health;
use memory::{
    batch_domains, grow_to, slot_fits, slots_for, split_packets, work_words_per_domain, Shares,
};
pub use memory::{human_bytes, BadBudget, MemoryBudget, MIN_SLOT_BYTES};
pub use selftest::{selftest, Check, Reference, Report};

use crate::search::backend::{Backend, DeviceUse, PieceOutcome, SearchError};
use crate::search::dense::Dense;
use crate::search::existence::Test;
use crate::search::generation::Generated;
use compile::env_u64;
use cudarc::driver::{
    sys::CUresult, CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use piece::{check_supported, run_piece_in};
use rug::Integer;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// The kernels' source, embedded so that the binary needs nothing beside it.
pub const SOURCE: &str = include_str!("../../cuda/tmd.cu");

/// The largest polynomial degree the kernels are instantiated for (`GenConfig::max_degree`).
pub const MAX_DEGREE: usize = 12;
/// Domains per piece the exact binomials support (`C(i0, 12)` must fit in 512 bits).
pub const MAX_DOMAINS: u64 = 1 << 40;
/// Threads per block of every launch (the kernels' `__launch_bounds__` assume it).
const BLOCK: u32 = 256;
/// Phase 3 walks chunks of `2^PHASE3_CHUNK_BITS` arguments per thread.
const PHASE3_CHUNK_BITS: u32 = 6;

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("the CUDA driver library (libcuda.so) cannot be loaded: no NVIDIA driver here")]
    NoDriver,
    #[error(
        "the CUDA runtime compiler (libnvrtc.so) cannot be loaded: install CUDA 13 or the \
         nvidia-cuda-nvrtc wheel and put its lib folder in LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    #[error("no CUDA device {ordinal}: this machine has {count}")]
    NoDevice { ordinal: usize, count: usize },
    #[error("no CUDA device listed")]
    NoDevices,
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    #[error("NVRTC could not compile the kernels ({options}): {log}")]
    Compile { options: String, log: String },
    #[error("the piece does not fit the kernels: {0}")]
    Unsupported(String),
    #[error(
        "a GPU memory budget of {} on device {device} is below the {} one piece needs \
         ({} free of {}): give a larger --gpu-memory or use the CPU back end",
        human_bytes(*budget), human_bytes(MIN_SLOT_BYTES), human_bytes(*free), human_bytes(*total)
    )]
    BudgetTooSmall {
        device: usize,
        budget: u64,
        free: u64,
        total: u64,
    },
    #[error(
        "out of memory on CUDA device {device} even with {} per piece ({} free of {} now): \
         other programs hold the card's memory",
        human_bytes(MIN_SLOT_BYTES), human_bytes(*free), human_bytes(*total)
    )]
    OutOfMemory {
        device: usize,
        free: u64,
        total: u64,
    },
    #[error("CUDA device {device} is lost ({why}): only a new process can use it again")]
    Lost { device: usize, why: String },
}

impl From<CudaError> for SearchError {
    fn from(e: CudaError) -> SearchError {
        SearchError::Backend(e.to_string())
    }
}

/// The number of CUDA devices this process sees.
pub fn device_count() -> Result<usize, CudaError> {
    if !driver_available() {
        return Err(CudaError::NoDriver);
    }
    Ok(CudaContext::device_count()? as usize)
}

/// The real architecture (`sm_XY`) of device `ordinal`, which its modules are compiled for,
/// read without opening a context (which takes a few tenths of a second).
pub fn device_arch(ordinal: usize) -> Result<String, CudaError> {
    use cudarc::driver::{result, sys::CUdevice_attribute as A};
    if !driver_available() {
        return Err(CudaError::NoDriver);
    }
    result::init()?;
    let count = result::device::get_count()? as usize;
    if ordinal >= count {
        return Err(CudaError::NoDevice { ordinal, count });
    }
    let dev = result::device::get(ordinal as i32)?;
    // SAFETY: `dev` comes from cuDeviceGet above.
    let (major, minor) = unsafe {
        (
            result::device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            result::device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        )
    };
    Ok(format!("sm_{major}{minor}"))
}

/// Whether `libcuda` can be loaded.
pub fn driver_available() -> bool {
    // SAFETY: only tries to open the shared library under its usual names (dlopen).
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Whether a driver error is the device's memory running out: the one error that smaller
/// lists cure.
fn is_out_of_memory(e: &CudaError) -> bool {
    matches!(
        e,
        CudaError::Driver(DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY))
    )
}

/// A word mod `2^(64 limbs)` as limbs, least significant first (as `fixed::from_integer`).
pub fn word_limbs(v: &Integer, limbs: usize) -> Vec<u64> {
    let mut w = vec![0u64; limbs];
    write_word(v, &mut w, &mut Integer::new());
    w
}

/// `v mod 2^(64 n)` into `out` (`n = out.len()` limbs, least significant first), through
/// `scratch`: [`word_limbs`] without an allocation when `scratch` is reused.
pub fn write_word(v: &Integer, out: &mut [u64], scratch: &mut Integer) {
    use rug::Assign;
    scratch.assign(v.keep_bits_ref(64 * out.len() as u32));
    scratch.write_digits(out, rug::integer::Order::Lsf);
}

/// Words packed one after the other (word `l`, limb `k` at `l * limbs + k`): the layout of the
/// kernels' `rho` inputs, read by every thread alike.
pub fn pack_words(words: &[Integer], limbs: usize) -> Vec<u64> {
    words.iter().flat_map(|w| word_limbs(w, limbs)).collect()
}

/// Limb `k` of entry `j` of an interleaved list of `cap` entries: where the kernels put it.
pub fn interleaved_index(k: usize, j: usize, cap: usize) -> usize {
    k * cap + j
}

/// Word `j` of field `field` of an interleaved list (`fields * limbs` rows of `cap` limbs).
pub fn read_interleaved(
    list: &[u64],
    field: usize,
    j: usize,
    limbs: usize,
    cap: usize,
) -> Vec<u64> {
    (0..limbs)
        .map(|k| list[interleaved_index(field * limbs + k, j, cap)])
        .collect()
}

/// Domains per GPU thread in phase 1: about 2^17 threads, enough to fill a large GPU once over
/// with the four units a device runs at once (256 domains per thread on a binary64 unit: with
/// the striped walk the exp binade at 44 bits took 15.2 s against 15.8 s with 128 and 17.8 s
/// with 512 on an H100; before striping 128 was the faster), but at least 16 domains
/// each so that the start state (about `degree^2 L^2` multiplications) stays cheap next to the
/// walk. Screened pieces (`quadratic`) take twice as many, about 2^16 threads: their start
/// state has a third table and their domains are few (exp near 512: packets of 128 ran 74 ms
/// per unit of `2^40` against 79 ms with 64 on an H100; docs/benchmarks-history.md, 2026-11-25).
pub fn gpu_packet(domains: u64, quadratic: bool) -> u64 {
    let shift = if quadratic { 16 } else { 17 };
    (domains >> shift).clamp(16, 1024)
}

/// `gpu_packet` for `g`, unless the tuning knob `TMD_CUDA_PACKET` sets it (no answer depends on
/// it).
fn packet_for(g: &Generated) -> u64 {
    env_u64("TMD_CUDA_PACKET")
        .filter(|&p| p > 0)
        .unwrap_or_else(|| gpu_packet(g.domains, g.quadratic))
}

/// Phase 3's thread mapping: `(chunk_bits, chunk_shift)`, with `2^chunk_shift` chunks of
/// `2^chunk_bits` arguments per subdomain of `2^sub_bits` arguments.
pub fn phase3_chunks(sub_bits: u32) -> (u32, u32) {
    let chunk_bits = PHASE3_CHUNK_BITS.min(sub_bits);
    (chunk_bits, sub_bits - chunk_bits)
}

fn launch_config(threads: u64) -> Result<LaunchConfig, CudaError> {
    let blocks = threads.div_ceil(BLOCK as u64);
    let blocks = u32::try_from(blocks.max(1))
        .map_err(|_| CudaError::Unsupported(format!("{threads} threads in one launch")))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// The CUDA back end over one or several devices.
pub struct Cuda {
    devices: Vec<Device>,
    next: AtomicUsize,
}

impl Cuda {
    /// Opens the listed devices (ordinals as `nvidia-smi` numbers them, unless
    /// `CUDA_VISIBLE_DEVICES` says otherwise), each with `budget` for its lists. Checks that the
    /// driver and NVRTC load.
    pub fn new(ordinals: &[usize], budget: MemoryBudget) -> Result<Cuda, CudaError> {
        if ordinals.is_empty() {
            return Err(CudaError::NoDevices);
        }
        if !driver_available() {
            return Err(CudaError::NoDriver);
        }
        if !nvrtc_available() {
            return Err(CudaError::NoNvrtc);
        }
        let devices = ordinals
            .iter()
            .map(|&o| Device::open(o, budget))
            .collect::<Result<Vec<_>, _>>()?;
        for d in &devices {
            tracing::info!(
                device = d.ordinal,
                name = %d.name,
                budget = %human_bytes(d.budget),
                free = %human_bytes(d.free_at_open),
                total = %human_bytes(d.total),
                slots = d.pool.count,
                "GPU memory budget"
            );
        }
        Ok(Cuda {
            devices,
            next: AtomicUsize::new(0),
        })
    }

    /// Every device of the machine.
    pub fn all(budget: MemoryBudget) -> Result<Cuda, CudaError> {
        Cuda::new(&(0..device_count()?).collect::<Vec<_>>(), budget)
    }

    /// The devices of several back ends as one (each opened once, then self-tested on its
    /// own); `None` when there are none.
    pub fn merge(parts: Vec<Cuda>) -> Option<Cuda> {
        let devices: Vec<Device> = parts.into_iter().flat_map(|c| c.devices).collect();
        (!devices.is_empty()).then(|| Cuda {
            devices,
            next: AtomicUsize::new(0),
        })
    }

    /// The self-test of device `ordinal` of this back end, in its context, its modules and
    /// its memory budget: what it compiles and the slots it makes are the engine's then.
    /// `reference` is the CPU's side ([`Reference`]), computed here if no one has yet.
    pub fn selftest(
        &self,
        ordinal: usize,
        reference: &std::sync::OnceLock<Reference>,
    ) -> Result<Report, CudaError> {
        let dev =
            self.devices
                .iter()
                .find(|d| d.ordinal == ordinal)
                .ok_or(CudaError::NoDevice {
                    ordinal,
                    count: self.devices.len(),
                })?;
        selftest::run(self, dev, reference)
    }

    /// The next device for a piece: round robin, but one with a free slot before one whose
    /// slots are all busy, so that a slower or busier device does not hold pieces back while
    /// another waits.
    fn pick(&self) -> &Device {
        let n = self.devices.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (0..n)
            .map(|k| &self.devices[(start + k) % n])
            .find(|d| d.pool.has_free() && d.health.lost().is_none())
            .unwrap_or(&self.devices[start])
    }

    /// The ordinals in use.
    pub fn ordinals(&self) -> Vec<usize> {
        self.devices.iter().map(|d| d.ordinal).collect()
    }

    /// Each device's budget and the peak of its lists so far.
    pub fn memory(&self) -> Vec<DeviceMemory> {
        self.devices
            .iter()
            .map(|d| DeviceMemory {
                device: d.ordinal,
                name: d.name.clone(),
                free_at_open: d.free_at_open,
                total: d.total,
                budget: d.budget,
                slots: d.pool.count,
                slot_bytes: d.pool.slot_bytes.load(Ordering::SeqCst),
                peak: d.gauge.peak.load(Ordering::SeqCst),
            })
            .collect()
    }

    /// Halves the memory per piece on every device; `false` when every device is at the
    /// minimum already.
    pub fn shrink(&self) -> bool {
        let mut any = false;
        for d in &self.devices {
            let now = d.pool.slot_bytes.load(Ordering::SeqCst);
            any |= d.pool.shrink(now);
        }
        any
    }

    /// `run` on the next device, counted as its busy time: refused at once where that device's
    /// context is lost, its sticky errors noted, and what the kernels cannot take
    /// ([`CudaError::Unsupported`]) done by `on_host` instead (the same answer, slower).
    fn on_device<T>(
        &self,
        run: impl FnOnce(&Device) -> Result<T, CudaError>,
        on_host: impl FnOnce() -> T,
        host_note: &'static str,
    ) -> Result<T, SearchError> {
        let dev = self.pick();
        // A lost context fails every call: the work is not even tried there.
        if let Some(why) = dev.health.lost() {
            return Err(CudaError::Lost {
                device: dev.ordinal,
                why,
            }
            .into());
        }
        let busy = dev.health.enter();
        let outcome = run(dev);
        drop(busy);
        match outcome {
            Err(CudaError::Unsupported(why)) => {
                tracing::warn!(%why, "{host_note}");
                Ok(on_host())
            }
            Err(e) => {
                dev.health.note(&e);
                Err(e.into())
            }
            Ok(o) => Ok(o),
        }
    }

    /// Runs phases 1-3 of `g` on one device, in one of its slots; an out-of-memory halves the
    /// slot and runs the piece again.
    fn run_piece(
        &self,
        dev: &Device,
        g: &Generated,
        test: Test,
    ) -> Result<PieceOutcome, CudaError> {
        check_supported(g)?;
        let mut taken = dev.pool.take(&dev.ctx, &dev.gauge)?;
        let slot = taken.slot.as_mut().expect("a taken slot");
        loop {
            match run_piece_in(dev, slot, g, test) {
                Err(e) if is_out_of_memory(&e) => {
                    let bytes = slot.shares.bytes();
                    let (free, total) = dev.ctx.mem_get_info().unwrap_or((0, 0));
                    if !dev.pool.shrink(bytes) {
                        return Err(CudaError::OutOfMemory {
                            device: dev.ordinal,
                            free: free as u64,
                            total: total as u64,
                        });
                    }
                    let smaller = dev.pool.slot_bytes.load(Ordering::SeqCst);
                    tracing::warn!(
                        device = dev.ordinal,
                        from = %human_bytes(bytes),
                        to = %human_bytes(smaller),
                        free = %human_bytes(free as u64),
                        "out of GPU memory: smaller lists, and the piece runs again"
                    );
                    slot.resize(smaller);
                }
                other => return other,
            }
        }
    }
}

impl Backend for Cuda {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError> {
        // A piece outside the kernels' sizes (degree above 12, more than 2^40 domains, a
        // subdomain larger than a slot's candidate list): the CPU gives the same answer,
        // slower.
        self.on_device(
            |dev| self.run_piece(dev, g, test),
            || crate::search::phases::search_generated_cpu(g, test, packet_domains),
            "piece searched on the CPU",
        )
    }

    fn walk_dense(&self, pieces: &[(&Dense, u64)]) -> Result<(Vec<Vec<u64>>, f64), SearchError> {
        if pieces.is_empty() {
            return Ok((Vec::new(), 0.0));
        }
        // Pieces beyond the kernel's table: the host keeps the same offsets, slower.
        self.on_device(
            |dev| {
                let t = Instant::now();
                walk::run(dev, pieces).map(|kept| (kept, t.elapsed().as_secs_f64()))
            },
            || crate::search::dense::walk_on_host(pieces),
            "dense pieces walked on the host",
        )
    }

    fn overlaps_pieces(&self) -> bool {
        true
    }

    fn recover(&self, _err: &SearchError) -> bool {
        // Smaller lists cannot bring a lost context back.
        self.lost().is_none() && self.shrink()
    }

    fn lost(&self) -> Option<String> {
        self.devices.iter().find_map(|d| {
            d.health
                .lost()
                .map(|why| format!("CUDA device {} ({}): {why}", d.ordinal, d.name))
        })
    }

    fn device_use(&self) -> Vec<DeviceUse> {
        self.devices
            .iter()
            .map(|d| {
                let (pieces, busy_s) = d.health.usage();
                DeviceUse {
                    device: d.ordinal,
                    pieces,
                    busy_s,
                }
            })
            .collect()
    }

    fn name(&self) -> String {
        let list: Vec<String> = self
            .devices
            .iter()
            .map(|d| {
                format!(
                    "{} {} ({}, {} of GPU memory)",
                    d.ordinal,
                    d.name,
                    d.arch,
                    human_bytes(d.budget)
                )
            })
            .collect();
        format!("cuda [{}]", list.join(", "))
    }
}

#[cfg(test)]
mod host;
#[cfg(test)]
mod tests;
