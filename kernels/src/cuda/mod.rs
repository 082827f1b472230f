//! The CUDA back end: phases 1-3 of a generated piece on one or several GPUs, with answers
//! identical to the CPU back end's (`search.rs`), in a bounded amount of device memory.
//!
//! Division of labour. The CPU generates the piece (exact integers through `rug`) and verifies
//! the candidates with MPFR (`search_unit`); this module only replaces `search_generated_cpu`:
//! - upload the walked polynomials' `rho` (`walk_b`, `walk_slope`, `walk_r2`) as words mod
//!   `2^F`, a few hundred bytes;
//! - phase 1 (`tmd_phase1`): one thread per packet of domains computes its exact start state
//!   (`Generated::shift`, with exact multi-limb binomials `C(i0, m)`), walks its domains with
//!   tabulated differences (only `b` and the slope: `r2` is needed at failing domains alone;
//!   where words have more than two limbs, `tmd_phase1_top` walks only their top two limbs,
//!   within a bound on the dropped carries, and `tmd_phase1_exact` tests the rare domains that
//!   bound leaves undecided from exact words: half the registers, twice the occupancy),
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
//! degree) so that the walked differences stay in registers, for the device's own architecture
//! (`compute_XY`, PTX the driver finishes), and cached on disk keyed by the SHA-256 of the
//! source, the options and the NVRTC version. A missing `libcuda` or `libnvrtc` is an error
//! ([`CudaError::NoDriver`], [`CudaError::NoNvrtc`]), never a panic.
//!
//! Concurrency: each `search_piece` call takes a slot (and its stream) on the next device
//! (round robin), waiting while all are busy, so the units that `search_units` runs in parallel
//! overlap their CPU generation and verification with other units' kernels, and several
//! devices share the work.

mod compile;
mod health;
mod memory;
mod selftest;

pub use compile::{
    cache_key, compile, compile_options, compile_uncached, nvrtc_available, nvrtc_version,
};
pub use health::is_sticky;
use health::Health;
use memory::{
    batch_domains, grow_to, slot_fits, slots_for, split_packets, work_words_per_domain, Shares,
};
pub use memory::{human_bytes, BadBudget, MemoryBudget, MIN_SLOT_BYTES};
pub use selftest::{selftest, Check, Reference, Report};

use crate::existence::Test;
use crate::generation::Generated;
use crate::search::{Backend, DeviceUse, PieceOutcome, SearchError};
use compile::env_u64;
use cudarc::driver::{
    sys::CUresult, CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc::Ptx;
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
    let r = Integer::from(v.keep_bits_ref(64 * limbs as u32));
    let mut w = vec![0u64; limbs];
    r.write_digits(&mut w, rug::integer::Order::Lsf);
    w
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

/// Domains per GPU thread in phase 1: enough threads to fill a large GPU twice over (about 2^18:
/// 128 domains per thread on a binary64 unit measured 4% faster on an H100 than 256), but at
/// least 16 domains each so that the start state (about `degree^2 L^2` multiplications) stays
/// cheap next to the walk.
pub fn gpu_packet(domains: u64) -> u64 {
    (domains >> 18).clamp(16, 1024)
}

/// `gpu_packet`, unless the tuning knob `TMD_CUDA_PACKET` sets it (no answer depends on it).
fn packet_for(domains: u64) -> u64 {
    env_u64("TMD_CUDA_PACKET")
        .filter(|&p| p > 0)
        .unwrap_or_else(|| gpu_packet(domains))
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

/// The functions of one compiled module.
struct Module {
    phase1: CudaFunction,
    phase1_top: CudaFunction,
    phase1_exact: CudaFunction,
    phase1_words: CudaFunction,
    phase2: CudaFunction,
    phase3: CudaFunction,
    mul: CudaFunction,
    div: CudaFunction,
    words: CudaFunction,
    binomial: CudaFunction,
    tests: CudaFunction,
}

/// Bytes of list memory a device's slots hold now, and the most they held: what `search`
/// and `bench` report as the peak device memory of the lists.
#[derive(Debug, Default)]
struct Gauge {
    held: AtomicU64,
    peak: AtomicU64,
}

impl Gauge {
    fn add(&self, bytes: u64) {
        let now = self.held.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.peak.fetch_max(now, Ordering::SeqCst);
    }

    fn sub(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::SeqCst);
    }
}

/// One piece in flight on a device: its stream, its share of the budget and its lists, kept
/// from piece to piece (allocations are rare, and never larger than the shares).
struct Slot {
    stream: Arc<CudaStream>,
    shares: Shares,
    index: Option<CudaSlice<u64>>,
    work: Option<CudaSlice<u64>>,
    candidates: Option<CudaSlice<u64>>,
    counters: CudaSlice<u64>,
    /// The domains the two-limb walk could not decide (`tmd_phase1_top`), `EXACT_CAP` entries.
    exact: CudaSlice<u64>,
    /// A floor under the two-limb walk's slack: the self-test raises it so that many domains
    /// take the exact path and its overflow; 0 otherwise.
    slack_floor: u64,
    gauge: Arc<Gauge>,
}

/// Entries of a slot's list of domains that the two-limb walk leaves to exact words: about
/// `slack / 2^64` of the domains go there (one per binary64 unit of 2^25 domains); a range with
/// more runs again with the exact walk.
const EXACT_CAP: u64 = 4096;

/// The most the two-limb walk may drop over a packet: above it the exact walk runs.
const MAX_SLACK: u64 = 1 << 60;

/// A bound on what the two-limb walk of a table of `n` differences drops from the top 128 bits
/// of its lowest difference over `steps` steps: each step adds the upper difference's own
/// shortfall and at most one lost carry (`D_l += D_(l+1) + 1`, the highest difference exact).
/// `None` when it exceeds `MAX_SLACK`.
pub fn walk_slack(n: usize, steps: u64) -> Option<u64> {
    let mut d = vec![0u128; n];
    for _ in 0..steps {
        for l in 0..n.saturating_sub(1) {
            d[l] = d[l].saturating_add(d[l + 1]).saturating_add(1);
        }
        if d.first().is_some_and(|&x| x > MAX_SLACK as u128) {
            return None;
        }
    }
    Some(d.first().copied().unwrap_or(0) as u64)
}

impl Slot {
    fn new(ctx: &Arc<CudaContext>, bytes: u64, gauge: Arc<Gauge>) -> Result<Slot, CudaError> {
        let stream = ctx.new_stream()?;
        let counters = stream.alloc_zeros::<u64>(8)?;
        let exact = stream.alloc_zeros::<u64>(EXACT_CAP as usize)?;
        Ok(Slot {
            stream,
            shares: Shares::of(bytes),
            index: None,
            work: None,
            candidates: None,
            counters,
            exact,
            slack_floor: 0,
            gauge,
        })
    }

    /// Drops the lists and takes the shares of `bytes` (after an out-of-memory, or when the
    /// device's slots were made smaller).
    fn resize(&mut self, bytes: u64) {
        for list in [&mut self.index, &mut self.work, &mut self.candidates] {
            if let Some(l) = list.take() {
                self.gauge.sub(l.len() as u64 * memory::WORD_BYTES);
            }
        }
        self.shares = Shares::of(bytes);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.resize(0);
    }
}

/// Makes `list` hold at least `needed` entries (at most `share`), keeping it when it does.
fn ensure(
    stream: &Arc<CudaStream>,
    gauge: &Gauge,
    list: &mut Option<CudaSlice<u64>>,
    needed: u64,
    share: u64,
) -> Result<(), CudaError> {
    let have = list.as_ref().map_or(0, |l| l.len() as u64);
    if have >= needed {
        return Ok(());
    }
    let len = grow_to(have, needed, share);
    // The old list goes first: never both at once.
    if let Some(old) = list.take() {
        gauge.sub(old.len() as u64 * memory::WORD_BYTES);
    }
    let new = stream.alloc_zeros::<u64>(len as usize)?;
    gauge.add(len * memory::WORD_BYTES);
    *list = Some(new);
    Ok(())
}

/// A device's slots: at most `count`, made on first use, handed to one piece at a time.
struct Pool {
    idle: Mutex<(Vec<Slot>, u64)>,
    ready: Condvar,
    count: u64,
    /// Bytes per slot now: halved on every out-of-memory or `Cuda::shrink`.
    slot_bytes: AtomicU64,
}

/// A slot taken from a pool; goes back on drop.
struct Taken<'a> {
    pool: &'a Pool,
    slot: Option<Slot>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.slot.take() {
            let mut idle = self.pool.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.0.push(s);
            self.pool.ready.notify_one();
        }
    }
}

impl Pool {
    fn take<'a>(
        &'a self,
        ctx: &Arc<CudaContext>,
        gauge: &Arc<Gauge>,
    ) -> Result<Taken<'a>, CudaError> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let bytes = self.slot_bytes.load(Ordering::SeqCst);
            if let Some(mut s) = idle.0.pop() {
                if s.shares.bytes() > bytes {
                    s.resize(bytes);
                }
                return Ok(Taken {
                    pool: self,
                    slot: Some(s),
                });
            }
            if idle.1 < self.count {
                idle.1 += 1;
                drop(idle);
                return match Slot::new(ctx, bytes, gauge.clone()) {
                    Ok(s) => Ok(Taken {
                        pool: self,
                        slot: Some(s),
                    }),
                    Err(e) => {
                        self.idle.lock().unwrap_or_else(|e| e.into_inner()).1 -= 1;
                        Err(e)
                    }
                };
            }
            idle = self.ready.wait(idle).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Halves the slots below `from` bytes; `false` when that would go below the minimum.
    /// Whether a piece would get a slot now without waiting.
    fn has_free(&self) -> bool {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        !idle.0.is_empty() || idle.1 < self.count
    }

    fn shrink(&self, from: u64) -> bool {
        let half = from / 2;
        if half < MIN_SLOT_BYTES {
            return false;
        }
        self.slot_bytes.fetch_min(half, Ordering::SeqCst);
        true
    }
}

/// What a device's memory budget is and what its lists used.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceMemory {
    pub device: usize,
    pub name: String,
    /// The device's free and total memory when the back end opened it.
    pub free_at_open: u64,
    pub total: u64,
    pub budget: u64,
    pub slots: u64,
    /// Bytes per slot now (smaller than `budget / slots` after an out-of-memory).
    pub slot_bytes: u64,
    /// The most bytes the lists of all slots held at once.
    pub peak: u64,
}

/// One GPU: its context, its architecture, its modules (compiled on first use) and its slots.
struct Device {
    ordinal: usize,
    name: String,
    arch: String,
    ctx: Arc<CudaContext>,
    modules: Mutex<HashMap<(usize, usize), Arc<Module>>>,
    free_at_open: u64,
    total: u64,
    budget: u64,
    pool: Pool,
    gauge: Arc<Gauge>,
    health: Health,
}

impl Device {
    fn open(ordinal: usize, budget: MemoryBudget) -> Result<Device, CudaError> {
        let count = CudaContext::device_count()? as usize;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal)?;
        let (major, minor) = ctx.compute_capability()?;
        let (free, total) = ctx.mem_get_info()?;
        let (free, total) = (free as u64, total as u64);
        let mut bytes = budget.resolve(free);
        // Never plan on more than is free: the lists would fail to grow at the worst moment.
        let most = free / 10 * 9;
        if bytes > most {
            tracing::warn!(
                device = ordinal,
                asked = %human_bytes(bytes),
                free = %human_bytes(free),
                "the GPU memory budget is more than the device has free; using 90% of the free memory"
            );
            bytes = most;
        }
        let (slots, slot_bytes) = slots_for(bytes).ok_or(CudaError::BudgetTooSmall {
            device: ordinal,
            budget: bytes,
            free,
            total,
        })?;
        Ok(Device {
            ordinal,
            name: ctx.name()?,
            arch: format!("compute_{major}{minor}"),
            ctx,
            modules: Mutex::new(HashMap::new()),
            free_at_open: free,
            total,
            budget: bytes,
            pool: Pool {
                idle: Mutex::new((Vec::new(), 0)),
                ready: Condvar::new(),
                count: slots,
                slot_bytes: AtomicU64::new(slot_bytes),
            },
            gauge: Arc::new(Gauge::default()),
            health: Health::default(),
        })
    }

    fn module(&self, limbs: usize, degree: usize) -> Result<Arc<Module>, CudaError> {
        // Held while compiling: two threads never compile the same module twice.
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = modules.get(&(limbs, degree)) {
            return Ok(m.clone());
        }
        let t = Instant::now();
        let ptx = compile(limbs, degree, &self.arch)?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let module = self.ctx.load_module(Ptx::from_src(ptx))?;
        tracing::info!(
            device = self.ordinal,
            limbs,
            degree,
            compile_ms,
            load_ms = t.elapsed().as_secs_f64() * 1e3,
            "kernel module ready"
        );
        let m = Arc::new(Module {
            phase1: module.load_function("tmd_phase1")?,
            phase1_top: module.load_function("tmd_phase1_top")?,
            phase1_exact: module.load_function("tmd_phase1_exact")?,
            phase1_words: module.load_function("tmd_phase1_words")?,
            phase2: module.load_function("tmd_phase2")?,
            phase3: module.load_function("tmd_phase3")?,
            mul: module.load_function("tmd_selftest_mul")?,
            div: module.load_function("tmd_selftest_div")?,
            words: module.load_function("tmd_selftest_words")?,
            binomial: module.load_function("tmd_selftest_binomial")?,
            tests: module.load_function("tmd_selftest_tests")?,
        });
        modules.insert((limbs, degree), m.clone());
        Ok(m)
    }
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

fn check_supported(g: &Generated) -> Result<(), CudaError> {
    if g.degree > MAX_DEGREE || g.degree == 0 {
        return Err(CudaError::Unsupported(format!("degree {}", g.degree)));
    }
    if g.domains > MAX_DOMAINS {
        return Err(CudaError::Unsupported(format!("{} domains", g.domains)));
    }
    if g.domain_bits >= 32 || g.sub_bits > g.domain_bits {
        return Err(CudaError::Unsupported(format!(
            "domains of 2^{}, subdomains of 2^{}",
            g.domain_bits, g.sub_bits
        )));
    }
    Ok(())
}

/// Phases 1-3 of `g` within the lists of `slot` (see the module's notes on memory).
fn run_piece_in(
    dev: &Device,
    slot: &mut Slot,
    g: &Generated,
    test: Test,
) -> Result<PieceOutcome, CudaError> {
    let l = g.limbs;
    let kappa_bits = g.domain_bits - g.sub_bits;
    let packet = packet_for(g.domains);
    if !slot_fits(&slot.shares, l as u64, kappa_bits, g.domain_bits, packet) {
        return Err(CudaError::Unsupported(format!(
            "{} per piece is too small for {l} limbs and {} subdomains of 2^{} arguments",
            human_bytes(slot.shares.bytes()),
            1u64 << kappa_bits,
            g.sub_bits
        )));
    }
    let m = dev.module(l, g.degree)?;
    let stream = slot.stream.clone();
    // The two-limb walk where words are wider and the dropped carries stay small over a packet
    // (TMD_CUDA_TOP=0 turns it off: a tuning knob, no answer depends on it).
    let slack = if l > 2 && env_u64("TMD_CUDA_TOP") != Some(0) {
        let steps = packet.saturating_sub(1);
        match (
            walk_slack(g.walk_b.len(), steps),
            walk_slack(g.walk_slope.len(), steps),
        ) {
            (Some(b), Some(s)) => Some((b.max(slot.slack_floor), s.max(slot.slack_floor))),
            _ => None,
        }
    } else {
        None
    };
    let t = Instant::now();
    let piece = PieceData {
        g,
        m: &m,
        test_id: match test {
            Test::Regular => 0,
            Test::Lefevre => 1,
        },
        rho_b: stream.clone_htod(&pack_words(&g.walk_b, l))?,
        rho_s: stream.clone_htod(&pack_words(&g.walk_slope, l))?,
        rho_r: stream.clone_htod(&pack_words(&g.walk_r2, l))?,
        consts: {
            let mut c = word_limbs(&g.bounds.eps1, l);
            c.extend(word_limbs(&g.bounds.eps2, l));
            stream.clone_htod(&c)?
        },
        packet,
        kappa_bits,
        slack,
    };
    let mut out = PieceOutcome::default();
    out.stats.domains = g.domains;
    out.stats.pieces = 1;
    out.timings.phase1_s = t.elapsed().as_secs_f64();

    let packets = g.domains.div_ceil(packet);
    let mut ranges = VecDeque::from([(0u64, packets)]);
    while let Some((p0, p1)) = ranges.pop_front() {
        let t = Instant::now();
        // A few per thousand domains fail with the published sizes; start at 1/64.
        let want = ((p1 - p0) * packet / 64).max(1024).min(slot.shares.index);
        let share = slot.shares.index;
        ensure(&stream, &slot.gauge, &mut slot.index, want, share)?;
        let failed = piece.phase1(slot, p0, p1)?;
        out.timings.phase1_s += t.elapsed().as_secs_f64();
        let cap = slot.index.as_ref().map_or(0, |x| x.len() as u64);
        if failed > cap {
            if failed <= share {
                ensure(&stream, &slot.gauge, &mut slot.index, failed, share)?;
                ranges.push_front((p0, p1));
            } else if p1 - p0 >= 2 {
                for r in split_packets(p0, p1, failed, cap).into_iter().rev() {
                    ranges.push_front(r);
                }
            } else {
                // slot_fits guarantees a packet's failures fit the index share.
                return Err(CudaError::Unsupported(format!(
                    "{failed} failing domains in one packet of {packet}"
                )));
            }
            continue;
        }
        out.stats.phase1_failures += failed;
        let batch = batch_domains(slot.shares.work, l as u64, kappa_bits);
        let mut j0 = 0;
        while j0 < failed {
            let n = batch.min(failed - j0);
            piece.batch(slot, j0, n, &mut out)?;
            j0 += n;
        }
    }
    out.candidates.sort_unstable();
    out.stats.candidates = out.candidates.len() as u64;
    Ok(out)
}

/// A piece's constant inputs on the device, and the launches of its phases.
struct PieceData<'a> {
    g: &'a Generated,
    m: &'a Module,
    test_id: i32,
    rho_b: CudaSlice<u64>,
    rho_s: CudaSlice<u64>,
    rho_r: CudaSlice<u64>,
    consts: CudaSlice<u64>,
    packet: u64,
    kappa_bits: u32,
    /// The two-limb walk's slack for `b` and the slope, where it is used.
    slack: Option<(u64, u64)>,
}

impl PieceData<'_> {
    /// Phase 1 on packets `[p0, p1)` into the slot's index list: the number of failing
    /// domains, which may exceed the list (then only its capacity was written).
    fn phase1(&self, slot: &mut Slot, p0: u64, p1: u64) -> Result<u64, CudaError> {
        if let Some((slack_b, slack_s)) = self.slack {
            if let Some(failed) = self.phase1_top(slot, p0, p1, slack_b, slack_s)? {
                return Ok(failed);
            }
        }
        let g = self.g;
        let stream = &slot.stream;
        let index = slot.index.as_mut().expect("ensured by the caller");
        let cap = index.len() as u64;
        stream.memset_zeros(&mut slot.counters)?;
        let mut b = stream.launch_builder(&self.m.phase1);
        b.arg(&self.rho_b)
            .arg(&self.rho_s)
            .arg(&g.domains)
            .arg(&g.piece.count)
            .arg(&g.domain_bits)
            .arg(&self.packet)
            .arg(&p0)
            .arg(&p1)
            .arg(&g.e1)
            .arg(&self.test_id)
            .arg(index)
            .arg(&cap)
            .arg(&mut slot.counters);
        // SAFETY: the arguments match tmd_phase1's parameters in order and type (two packed
        // rho lists of NB, NS words of L limbs as this module was compiled for, u64
        // domains/count, u32 domain_bits, u64 packet/first/end packet/e1, int test, an index
        // list of `cap` entries, 8 counters); one thread per packet of [p0, p1), and the kernel
        // writes only below `cap`.
        unsafe { b.launch(launch_config(p1 - p0)?) }?;
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        Ok(c[0])
    }

    /// Phase 1 on packets `[p0, p1)` with the two-limb walk, then the undecided domains from
    /// exact words: the same failing domains as `tmd_phase1` finds. `None` when more domains
    /// were undecided than the slot's list holds (the caller runs the exact walk instead).
    fn phase1_top(
        &self,
        slot: &mut Slot,
        p0: u64,
        p1: u64,
        slack_b: u64,
        slack_s: u64,
    ) -> Result<Option<u64>, CudaError> {
        let g = self.g;
        let stream = &slot.stream;
        let index = slot.index.as_mut().expect("ensured by the caller");
        let cap = index.len() as u64;
        stream.memset_zeros(&mut slot.counters)?;
        {
            let mut b = stream.launch_builder(&self.m.phase1_top);
            b.arg(&self.rho_b)
                .arg(&self.rho_s)
                .arg(&g.domains)
                .arg(&g.piece.count)
                .arg(&g.domain_bits)
                .arg(&self.packet)
                .arg(&p0)
                .arg(&p1)
                .arg(&g.e1)
                .arg(&self.test_id)
                .arg(&mut *index)
                .arg(&cap)
                .arg(&mut slot.counters)
                .arg(&slack_b)
                .arg(&slack_s)
                .arg(&mut slot.exact)
                .arg(&EXACT_CAP);
            // SAFETY: as tmd_phase1, then u64 slacks and the `exact` list of EXACT_CAP
            // entries, which the kernel writes only below EXACT_CAP.
            unsafe { b.launch(launch_config(p1 - p0)?) }?;
        }
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        let undecided = c[5];
        if undecided > EXACT_CAP {
            tracing::debug!(undecided, "two-limb walk: the exact walk runs this range");
            return Ok(None);
        }
        if undecided == 0 {
            return Ok(Some(c[0]));
        }
        {
            let mut b = stream.launch_builder(&self.m.phase1_exact);
            b.arg(&self.rho_b)
                .arg(&self.rho_s)
                .arg(&slot.exact)
                .arg(&undecided)
                .arg(&g.piece.count)
                .arg(&g.domain_bits)
                .arg(&g.e1)
                .arg(&self.test_id)
                .arg(&mut *index)
                .arg(&cap)
                .arg(&mut slot.counters);
            // SAFETY: tmd_phase1_exact(rho_b, rho_s, exact, n, count, domain_bits, e1, test,
            // index, cap, counters): `exact` holds `undecided` <= EXACT_CAP entries written
            // above; one thread per entry; failures are written only below `cap`.
            unsafe { b.launch(launch_config(undecided)?) }?;
        }
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        Ok(Some(c[0]))
    }

    /// Phases 2 and 3 on the failing domains `j0 .. j0 + n` of the slot's index list: adds
    /// the counts to `out` and the candidates to `out.candidates`.
    fn batch(
        &self,
        slot: &mut Slot,
        j0: u64,
        n: u64,
        out: &mut PieceOutcome,
    ) -> Result<(), CudaError> {
        let g = self.g;
        let l = g.limbs as u64;
        let kb = self.kappa_bits;
        let t = Instant::now();
        let Slot {
            stream,
            shares,
            index,
            work,
            candidates,
            counters,
            gauge,
            ..
        } = slot;
        let cap2 = n << kb;
        let needed = n * work_words_per_domain(l, kb);
        ensure(stream, gauge, work, needed, shares.work)?;
        let index = index
            .as_ref()
            .expect("phase 1 ran")
            .slice(j0 as usize..(j0 + n) as usize);
        let work = work.as_mut().expect("ensured");
        let (mut words1, mut rest) = work.split_at_mut((3 * l * n) as usize);
        let (mut start2, mut rest) = rest.split_at_mut(cap2 as usize);
        let (mut len2, mut rest) = rest.split_at_mut(cap2 as usize);
        let (mut words2, _) = rest.split_at_mut((3 * l * cap2) as usize);

        // The failing domains' words, evaluated exactly at their indices (3 fields of L rows
        // of `n` entries).
        {
            let mut b = stream.launch_builder(&self.m.phase1_words);
            b.arg(&self.rho_b)
                .arg(&self.rho_s)
                .arg(&self.rho_r)
                .arg(&index)
                .arg(&mut words1)
                .arg(&n)
                .arg(&n);
            // SAFETY: tmd_phase1_words(rho_b, rho_s, rho_r, index, words, cap, n): the rho
            // lists hold NB, NS, NR words of L limbs, `index` n entries, `words1` 3 L rows of
            // n; one thread per entry writes only its own column.
            unsafe { b.launch(launch_config(n)?) }?;
        }
        out.timings.phase1_s += t.elapsed().as_secs_f64();

        let t = Instant::now();
        stream.memset_zeros(&mut *counters)?;
        {
            let mut b = stream.launch_builder(&self.m.phase2);
            b.arg(&index)
                .arg(&mut words1)
                .arg(&n)
                .arg(&n)
                .arg(&self.consts)
                .arg(&g.k0)
                .arg(&g.k1)
                .arg(&g.k0_sub)
                .arg(&g.k1_sub)
                .arg(&g.e2)
                .arg(&g.domain_bits)
                .arg(&g.sub_bits)
                .arg(&g.piece.count)
                .arg(&self.test_id)
                .arg(&mut start2)
                .arg(&mut len2)
                .arg(&mut words2)
                .arg(&cap2)
                .arg(&mut *counters);
            // SAFETY: the arguments match tmd_phase2's parameters in order and type; the input
            // lists hold `n` entries (stride n), the outputs `cap2 = n << kappa_bits` entries
            // (stride cap2), one per thread at most, so no write goes past them.
            unsafe { b.launch(launch_config(cap2)?) }?;
        }
        let c = stream.clone_dtoh(&*counters)?;
        stream.synchronize()?;
        out.timings.phase2_s += t.elapsed().as_secs_f64();
        out.stats.subdomains += c[1];
        out.stats.phase2_failures += c[2];
        out.stats.phase3_arguments += c[3];
        let (failed2, arguments) = (c[2], c[3]);
        if failed2 == 0 {
            return Ok(());
        }

        // Phase 3 over ranges of the failed subdomains whose candidates fit the list.
        let t = Instant::now();
        let (chunk_bits, chunk_shift) = phase3_chunks(g.sub_bits);
        let floor = 4096u64.max(1 << g.sub_bits);
        let mut ranges = VecDeque::from([(0u64, failed2)]);
        while let Some((s0, s1)) = ranges.pop_front() {
            let expected = (arguments / failed2 * (s1 - s0)) >> 10;
            let want = expected.clamp(floor, shares.candidates.max(floor));
            ensure(stream, gauge, candidates, want, shares.candidates)?;
            let cand = candidates.as_mut().expect("ensured");
            let cap3 = cand.len() as u64;
            let nsubs = s1 - s0;
            stream.memset_zeros(&mut *counters)?;
            let (st, ln, wd) = (
                start2.slice(s0 as usize..),
                len2.slice(s0 as usize..),
                words2.slice(s0 as usize..),
            );
            {
                let mut b = stream.launch_builder(&self.m.phase3);
                b.arg(&st)
                    .arg(&ln)
                    .arg(&wd)
                    .arg(&cap2)
                    .arg(&nsubs)
                    .arg(&chunk_shift)
                    .arg(&chunk_bits)
                    .arg(&g.t3)
                    .arg(&mut *cand)
                    .arg(&cap3)
                    .arg(&mut *counters);
                // SAFETY: the arguments match tmd_phase3's parameters in order and type; the
                // input views start at subdomain s0 of lists of stride `cap2` and the kernel
                // reads entries s0 .. s1 < failed2 <= cap2 of each row, so every read stays in
                // the lists; it writes candidates only below `cap3`.
                unsafe { b.launch(launch_config(nsubs << chunk_shift)?) }?;
            }
            let c = stream.clone_dtoh(&*counters)?;
            stream.synchronize()?;
            let found = c[4];
            if found > cap3 {
                if found <= shares.candidates {
                    ensure(stream, gauge, candidates, found, shares.candidates)?;
                    ranges.push_front((s0, s1));
                } else if nsubs >= 2 {
                    let mid = s0 + nsubs / 2;
                    ranges.push_front((mid, s1));
                    ranges.push_front((s0, mid));
                } else {
                    // slot_fits guarantees one subdomain's arguments fit the candidate share.
                    return Err(CudaError::Unsupported(format!(
                        "{found} candidates in one subdomain"
                    )));
                }
                continue;
            }
            let v = stream.clone_dtoh(&cand.slice(0..found as usize))?;
            stream.synchronize()?;
            out.candidates.extend(v);
        }
        out.timings.phase3_s += t.elapsed().as_secs_f64();
        Ok(())
    }
}

impl Backend for Cuda {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError> {
        let dev = self.pick();
        // A lost context fails every call: the piece is not even tried there.
        if let Some(why) = dev.health.lost() {
            return Err(CudaError::Lost {
                device: dev.ordinal,
                why,
            }
            .into());
        }
        let busy = dev.health.enter();
        let outcome = self.run_piece(dev, g, test);
        drop(busy);
        match outcome {
            // A piece outside the kernels' sizes (degree above 12, more than 2^40 domains, a
            // subdomain larger than a slot's candidate list): the CPU gives the same answer,
            // slower.
            Err(CudaError::Unsupported(why)) => {
                tracing::warn!(%why, "piece searched on the CPU");
                Ok(crate::search::search_generated_cpu(g, test, packet_domains))
            }
            Err(e) => {
                dev.health.note(&e);
                Err(e.into())
            }
            Ok(o) => Ok(o),
        }
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
                    d.arch.replace("compute_", "sm_"),
                    human_bytes(d.budget)
                )
            })
            .collect();
        format!("cuda [{}]", list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixed;

    #[test]
    fn words_are_packed_as_the_cpu_reduces_them() {
        let vals = [
            Integer::from(-1),
            Integer::from(12345),
            (Integer::from(1) << 300) - 7,
            -(Integer::from(3) << 200u32),
        ];
        let packed = pack_words(&vals, 5);
        assert_eq!(packed.len(), 20);
        for (l, v) in vals.iter().enumerate() {
            assert_eq!(
                &packed[l * 5..(l + 1) * 5],
                &fixed::from_integer::<5>(v)[..]
            );
        }
        assert_eq!(word_limbs(&Integer::from(-1), 2), vec![u64::MAX, u64::MAX]);
    }

    #[test]
    fn interleaved_lists_round_trip() {
        // What tmd_phase1 writes: 3 fields of L limbs, limb-major, `cap` entries per row.
        let (limbs, cap) = (3usize, 7usize);
        let mut list = vec![0u64; 3 * limbs * cap];
        for j in 0..cap {
            for f in 0..3 {
                for k in 0..limbs {
                    list[interleaved_index(f * limbs + k, j, cap)] = (j * 100 + f * 10 + k) as u64;
                }
            }
        }
        // Neighbouring entries of one limb are adjacent: coalesced accesses.
        assert_eq!(
            interleaved_index(4, 3, cap) + 1,
            interleaved_index(4, 4, cap)
        );
        for j in 0..cap {
            for f in 0..3 {
                let w = read_interleaved(&list, f, j, limbs, cap);
                let want: Vec<u64> = (0..limbs).map(|k| (j * 100 + f * 10 + k) as u64).collect();
                assert_eq!(w, want);
            }
        }
    }

    #[test]
    fn phase3_chunks_cover_each_subdomain_once() {
        for sub_bits in 2..=20u32 {
            let (cb, cs) = phase3_chunks(sub_bits);
            assert_eq!(cb + cs, sub_bits);
            // Every argument of a full subdomain is walked by exactly one (chunk, step).
            let mut seen = vec![0u8; 1 << sub_bits];
            for c in 0..1u64 << cs {
                for y in (c << cb)..((c + 1) << cb) {
                    seen[y as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "sub_bits {sub_bits}");
        }
    }

    #[test]
    fn packets_and_capacities() {
        for domains in [1u64, 7, 1 << 10, 1 << 20, 1 << 25, (1 << 35) + 3] {
            let p = gpu_packet(domains);
            assert!((16..=1024).contains(&p));
            let threads = domains.div_ceil(p);
            assert!(threads * p >= domains && (threads - 1) * p < domains);
            assert!(launch_config(threads).is_ok());
        }
        assert_eq!(gpu_packet(1 << 25), 128);
    }

    /// The slack bounds what the two-limb walk drops: walking words of 3 limbs exactly and by
    /// their top two limbs, the shortfall of the lowest difference never exceeds it.
    #[test]
    fn the_two_limb_walk_stays_within_its_slack() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(15);
        for n in [2usize, 4, 7, 9] {
            let steps = 200u64;
            let slack = walk_slack(n, steps).expect("small");
            let mut full: Vec<[u64; 3]> = (0..n).map(|_| rng.gen()).collect();
            let mut top: Vec<[u64; 2]> = full.iter().map(|w| [w[1], w[2]]).collect();
            for _ in 0..steps {
                for l in 0..n - 1 {
                    let (x, y) = (full[l + 1], top[l + 1]);
                    fixed::add(&mut full[l], &x);
                    fixed::add(&mut top[l], &y);
                }
                let t = ((full[0][2] as u128) << 64) | full[0][1] as u128;
                let w = ((top[0][1] as u128) << 64) | top[0][0] as u128;
                assert!(t.wrapping_sub(w) <= slack as u128, "n={n}");
            }
        }
        assert_eq!(walk_slack(1, 1000), Some(0));
        assert_eq!(walk_slack(2, 256), Some(256));
        assert!(walk_slack(13, 4096).is_none());
    }
}
