//! The CUDA back end: phases 1-3 of a generated piece on one or several GPUs, with answers
//! identical to the CPU back end's (`search.rs`), and the GPU self-test.
//!
//! Division of labour. The CPU generates the piece (exact integers through `rug`) and verifies
//! the candidates with MPFR (`search_unit`); this module only replaces `search_generated_cpu`:
//! - upload the walked polynomials' `rho` (`walk_b`, `walk_slope`, `walk_r2`) as words mod
//!   `2^F`, a few hundred bytes;
//! - phase 1 (`tmd_phase1`): one thread per packet of domains computes its exact start state
//!   (`Generated::shift`, with exact multi-limb binomials `C(i0, m)`), walks its domains with
//!   tabulated differences (only `b` and the slope: `r2` is needed at failing domains alone),
//!   runs the existence test on each (optionally the regular test on two domains at once,
//!   interleaved: `TMD_CUDA_LANES=2`, slower so far) and appends the failing domains' indices to a compacted list
//!   through an atomic counter: no polynomial goes through memory; `tmd_phase1_words` then
//!   evaluates the failing domains' `b`, slope and `r2` exactly at their indices;
//! - phase 2 (`tmd_phase2`): one thread per (failed domain, subdomain), compacted again;
//! - phase 3 (`tmd_phase3`): one thread per chunk of 64 arguments of a failed subdomain, exact
//!   start by the binomial formula; candidates appended and copied back, then sorted here.
//!
//! Lists that may overflow (phase 1's and the candidates) count past their capacity without
//! writing; the host then runs that phase again with the exact capacity, so no answer depends
//! on a guess. The statistics come from the device counters and equal the CPU's by
//! construction (same tests on the same words); the GPU packet size differs from the CPU's but
//! no statistic depends on it.
//!
//! Arithmetic (`kernels/cuda/tmd.cu`): words are `L` 64-bit limbs added with the hardware's
//! add-with-carry chain; the existence tests are the CPU's line by line, with quotients below 3
//! by subtraction (as the CPU), larger ones from a single-precision estimate corrected by exact
//! integer arithmetic (the 64-bit hardware division beyond 2^20), and the regular test's cap on
//! the last quotient checked by a multiplication instead of a division. Every variant returns
//! the exact quotient and remainder, so the answers are the CPU's; [`selftest`] checks each
//! piece of this against the CPU on the device before it is trusted.
//!
//! Kernels are compiled at run time by NVRTC, one module per (limbs `L`, degree) so that the
//! walked differences stay in registers, for the device's own architecture (`compute_XY`,
//! PTX the driver finishes), and cached on disk keyed by the SHA-256 of the source, the
//! options and the NVRTC version (`$TMD_KERNEL_CACHE`, else `$XDG_CACHE_HOME/tmd/kernels`,
//! else `~/.cache/tmd/kernels`). A missing `libcuda` or `libnvrtc` is an error
//! ([`CudaError::NoDriver`], [`CudaError::NoNvrtc`]), never a panic.
//!
//! Concurrency: each `search_piece` call takes its own stream on the next device (round robin),
//! so the units that `search_units` runs in parallel overlap their CPU generation and
//! verification with other units' kernels, and several devices share the work.

use crate::existence;
use crate::existence::Test;
use crate::generation::Generated;
use crate::search::{Backend, PieceOutcome, SearchError};
use cudarc::driver::{CudaContext, CudaFunction, DriverError, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use rug::Integer;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The kernels' source, embedded so that the binary needs nothing beside it.
pub const SOURCE: &str = include_str!("../cuda/tmd.cu");

/// The largest polynomial degree the kernels are instantiated for (`GenConfig::max_degree`).
pub const MAX_DEGREE: usize = 12;
/// Domains per piece the exact binomials support (`C(i0, 12)` must fit in 512 bits).
pub const MAX_DOMAINS: u64 = 1 << 40;
/// Threads per block of every launch (the kernels' `__launch_bounds__` assume it).
const BLOCK: u32 = 256;
/// Phase-1 blocks per multiprocessor the register allocation must allow (tuned on an H200).
const PHASE1_MIN_BLOCKS: u64 = 2;
/// Domains tested at once per phase-1 thread by the regular test (1 or 2; `TMD_CUDA_LANES`).
/// Two lanes measured slower on an H100 (7.8 ms against 6.3 ms per binary64 unit): the lanes'
/// branches do not overlap, and the second state costs registers.
const PHASE1_LANES: u64 = 1;
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
}

impl From<CudaError> for SearchError {
    fn from(e: CudaError) -> SearchError {
        SearchError::Backend(e.to_string())
    }
}

/// Whether `libnvrtc` can be loaded.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to open the shared library under its usual names (dlopen).
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether `libcuda` can be loaded.
pub fn driver_available() -> bool {
    // SAFETY: only tries to open the shared library under its usual names (dlopen).
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The NVRTC version as (major, minor).
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    if !nvrtc_available() {
        return Err(CudaError::NoNvrtc);
    }
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: the library is present (checked above); both pointers are valid for writes.
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(CudaError::Compile {
            options: String::new(),
            log: format!("nvrtcVersion: {r:?}"),
        });
    }
    Ok((major, minor))
}

/// The NVRTC options of one module, in one place. Tuning knobs: `TMD_CUDA_MINBLOCKS` asks that
/// many blocks of phase 1 to fit on a multiprocessor (fewer registers per thread, more resident
/// warps, some walk state in local memory); `TMD_CUDA_LANES` (1 or 2) how many domains one
/// thread tests at once. No answer depends on them.
pub fn compile_options(limbs: usize, degree: usize, arch: &str) -> Vec<String> {
    let min_blocks = env_u64("TMD_CUDA_MINBLOCKS").unwrap_or(PHASE1_MIN_BLOCKS);
    let lanes = env_u64("TMD_CUDA_LANES").unwrap_or(PHASE1_LANES);
    vec![
        format!("--gpu-architecture={arch}"),
        format!("-DTMD_L={limbs}"),
        format!("-DTMD_DEG={degree}"),
        format!("-DTMD_MINBLOCKS={min_blocks}"),
        format!("-DTMD_LANES={lanes}"),
        "--std=c++17".to_string(),
    ]
}

/// A numeric tuning knob from the environment.
fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The disk-cache key of a module: source, options and compiler version.
pub fn cache_key(options: &[String], nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(SOURCE.as_bytes());
    for o in options {
        h.update([0u8]);
        h.update(o.as_bytes());
    }
    h.update(format!("\0nvrtc {}.{}", nvrtc.0, nvrtc.1).as_bytes());
    hex::encode(h.finalize())
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TMD_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("tmd/kernels"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/tmd/kernels"))
}

/// Compiles the module for `limbs` and `degree` to PTX for `arch` (`compute_90`, ...), from
/// the disk cache when it holds it. The cache is an optimisation: failures to read or write it
/// only cost a compilation.
pub fn compile(limbs: usize, degree: usize, arch: &str) -> Result<String, CudaError> {
    let options = compile_options(limbs, degree, arch);
    let version = nvrtc_version()?;
    let key = cache_key(&options, version);
    let path = cache_dir().map(|d| d.join(format!("{key}.ptx")));
    if let Some(p) = &path {
        if let Ok(ptx) = std::fs::read_to_string(p) {
            if ptx.contains(".entry tmd_phase1") {
                return Ok(ptx);
            }
        }
    }
    let ptx = compile_uncached(&options)?;
    if let Some(p) = &path {
        if let Some(dir) = p.parent() {
            let tmp = dir.join(format!("{key}.{}.tmp", std::process::id()));
            let written = std::fs::create_dir_all(dir)
                .and_then(|_| std::fs::write(&tmp, &ptx))
                .and_then(|_| std::fs::rename(&tmp, p));
            if let Err(e) = written {
                tracing::warn!(path = %p.display(), error = %e, "cannot cache a compiled kernel");
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
    Ok(ptx)
}

/// Compiles with NVRTC, bypassing the cache.
pub fn compile_uncached(options: &[String]) -> Result<String, CudaError> {
    if !nvrtc_available() {
        return Err(CudaError::NoNvrtc);
    }
    let opts = CompileOptions {
        options: options.to_vec(),
        name: Some("tmd.cu".to_string()),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(CompileError::CompileError { log, .. }) => Err(CudaError::Compile {
            options: options.join(" "),
            log: log.to_string_lossy().into_owned(),
        }),
        Err(e) => Err(CudaError::Compile {
            options: options.join(" "),
            log: e.to_string(),
        }),
    }
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

/// Domains per GPU thread in phase 1: enough threads to fill a large GPU (about 2^17), but at
/// least 16 domains each so that the start state (about `degree^2 L^2` multiplications) stays
/// cheap next to the walk.
pub fn gpu_packet(domains: u64) -> u64 {
    (domains >> 17).clamp(16, 1024)
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

/// The capacity of a compacted list after a run that counted `needed` entries into `cap`:
/// `None` when everything fitted.
pub fn grown_capacity(cap: u64, needed: u64) -> Option<u64> {
    (needed > cap).then_some(needed)
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
    phase1_words: CudaFunction,
    phase2: CudaFunction,
    phase3: CudaFunction,
    mul: CudaFunction,
    div: CudaFunction,
    words: CudaFunction,
    binomial: CudaFunction,
    tests: CudaFunction,
}

/// One GPU: its context, its architecture and its modules, compiled on first use.
struct Device {
    ordinal: usize,
    name: String,
    arch: String,
    ctx: Arc<CudaContext>,
    modules: Mutex<HashMap<(usize, usize), Arc<Module>>>,
}

impl Device {
    fn open(ordinal: usize) -> Result<Device, CudaError> {
        let count = CudaContext::device_count()? as usize;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal)?;
        let (major, minor) = ctx.compute_capability()?;
        Ok(Device {
            ordinal,
            name: ctx.name()?,
            arch: format!("compute_{major}{minor}"),
            ctx,
            modules: Mutex::new(HashMap::new()),
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
    /// `CUDA_VISIBLE_DEVICES` says otherwise). Checks that the driver and NVRTC load.
    pub fn new(ordinals: &[usize]) -> Result<Cuda, CudaError> {
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
            .map(|&o| Device::open(o))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cuda {
            devices,
            next: AtomicUsize::new(0),
        })
    }

    /// Every device of the machine.
    pub fn all() -> Result<Cuda, CudaError> {
        if !driver_available() {
            return Err(CudaError::NoDriver);
        }
        let count = CudaContext::device_count()? as usize;
        Cuda::new(&(0..count).collect::<Vec<_>>())
    }

    /// The ordinals in use.
    pub fn ordinals(&self) -> Vec<usize> {
        self.devices.iter().map(|d| d.ordinal).collect()
    }

    /// Runs phases 1-3 of `g` on one device.
    fn run_piece(
        &self,
        dev: &Device,
        g: &Generated,
        test: Test,
    ) -> Result<PieceOutcome, CudaError> {
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
        let l = g.limbs;
        let m = dev.module(l, g.degree)?;
        let stream = dev.ctx.new_stream()?;
        let mut out = PieceOutcome::default();
        out.stats.domains = g.domains;
        out.stats.pieces = 1;
        let test_id: i32 = match test {
            Test::Regular => 0,
            Test::Lefevre => 1,
        };

        // ---- phase 1
        let t = Instant::now();
        let rho_b = stream.clone_htod(&pack_words(&g.walk_b, l))?;
        let rho_s = stream.clone_htod(&pack_words(&g.walk_slope, l))?;
        let rho_r = stream.clone_htod(&pack_words(&g.walk_r2, l))?;
        let mut counters = stream.alloc_zeros::<u64>(8)?;
        let packet = packet_for(g.domains);
        let threads = g.domains.div_ceil(packet);
        // A few per thousand domains fail with the published sizes; start at 1/64.
        let mut cap1 = (g.domains / 64).max(1024);
        let (idx1, failed1) = loop {
            let mut idx = stream.alloc_zeros::<u64>(cap1 as usize)?;
            stream.memset_zeros(&mut counters)?;
            let mut b = stream.launch_builder(&m.phase1);
            b.arg(&rho_b)
                .arg(&rho_s)
                .arg(&g.domains)
                .arg(&g.piece.count)
                .arg(&g.domain_bits)
                .arg(&packet)
                .arg(&g.e1)
                .arg(&test_id)
                .arg(&mut idx)
                .arg(&cap1)
                .arg(&mut counters);
            // SAFETY: the arguments match tmd_phase1's parameters in order and type (two
            // packed rho lists of NB, NS words of L limbs as this module was compiled for,
            // u64 domains/count, u32 domain_bits, u64 packet/e1, int test, an index list of
            // `cap1` entries, 8 counters); the kernel writes only below `cap1`.
            unsafe { b.launch(launch_config(threads)?) }?;
            let c = stream.clone_dtoh(&counters)?;
            stream.synchronize()?;
            match grown_capacity(cap1, c[0]) {
                None => break (idx, c[0]),
                Some(cap) => cap1 = cap,
            }
        };
        out.stats.phase1_failures = failed1;
        if failed1 == 0 {
            out.timings.phase1_s = t.elapsed().as_secs_f64();
            return Ok(out);
        }
        // The failing domains' words, evaluated exactly at their indices (3 fields of L rows
        // of `failed1` entries).
        let wcap = failed1;
        let mut words1 = stream.alloc_zeros::<u64>(3 * l * wcap as usize)?;
        {
            let mut b = stream.launch_builder(&m.phase1_words);
            b.arg(&rho_b)
                .arg(&rho_s)
                .arg(&rho_r)
                .arg(&idx1)
                .arg(&mut words1)
                .arg(&wcap)
                .arg(&failed1);
            // SAFETY: tmd_phase1_words(rho_b, rho_s, rho_r, index, words, cap, n): the rho
            // lists hold NB, NS, NR words of L limbs, index `failed1` entries, words 3 L rows of
            // `wcap = failed1`; one thread per entry writes only its own column.
            unsafe { b.launch(launch_config(failed1)?) }?;
            stream.synchronize()?;
        }
        out.timings.phase1_s = t.elapsed().as_secs_f64();

        // ---- phase 2
        let t = Instant::now();
        let kappa_bits = g.domain_bits - g.sub_bits;
        let cap2 = failed1 << kappa_bits;
        let mut start2 = stream.alloc_zeros::<u64>(cap2 as usize)?;
        let mut len2 = stream.alloc_zeros::<u64>(cap2 as usize)?;
        let mut words2 = stream.alloc_zeros::<u64>(3 * l * cap2 as usize)?;
        let mut consts = word_limbs(&g.bounds.eps1, l);
        consts.extend(word_limbs(&g.bounds.eps2, l));
        let consts = stream.clone_htod(&consts)?;
        {
            let mut b = stream.launch_builder(&m.phase2);
            b.arg(&idx1)
                .arg(&words1)
                .arg(&wcap)
                .arg(&failed1)
                .arg(&consts)
                .arg(&g.k0)
                .arg(&g.k1)
                .arg(&g.k0_sub)
                .arg(&g.k1_sub)
                .arg(&g.e2)
                .arg(&g.domain_bits)
                .arg(&g.sub_bits)
                .arg(&g.piece.count)
                .arg(&test_id)
                .arg(&mut start2)
                .arg(&mut len2)
                .arg(&mut words2)
                .arg(&cap2)
                .arg(&mut counters);
            // SAFETY: the arguments match tmd_phase2's parameters in order and type; the input
            // lists hold `failed1 = wcap` entries, the outputs `cap2 = failed1 << kappa_bits`
            // entries, one per thread at most, so no write goes past them.
            unsafe { b.launch(launch_config(cap2)?) }?;
        }
        let c = stream.clone_dtoh(&counters)?;
        stream.synchronize()?;
        out.timings.phase2_s = t.elapsed().as_secs_f64();
        out.stats.subdomains = c[1];
        out.stats.phase2_failures = c[2];
        out.stats.phase3_arguments = c[3];
        let failed2 = c[2];
        if failed2 == 0 {
            return Ok(out);
        }

        // ---- phase 3
        let t = Instant::now();
        let (chunk_bits, chunk_shift) = phase3_chunks(g.sub_bits);
        let mut cap3 = (c[3] >> 10).max(4096);
        let candidates = loop {
            let mut cand = stream.alloc_zeros::<u64>(cap3 as usize)?;
            // Only the candidate counter restarts; phases 1-2's counts are already read.
            stream.memcpy_htod(&[0u64], &mut counters.slice_mut(4..5))?;
            let mut b = stream.launch_builder(&m.phase3);
            b.arg(&start2)
                .arg(&len2)
                .arg(&words2)
                .arg(&cap2)
                .arg(&failed2)
                .arg(&chunk_shift)
                .arg(&chunk_bits)
                .arg(&g.t3)
                .arg(&mut cand)
                .arg(&cap3)
                .arg(&mut counters);
            // SAFETY: the arguments match tmd_phase3's parameters in order and type; the input
            // lists hold `failed2 <= cap2` entries, and the kernel writes candidates only below
            // `cap3`.
            unsafe { b.launch(launch_config(failed2 << chunk_shift)?) }?;
            let c = stream.clone_dtoh(&counters)?;
            stream.synchronize()?;
            match grown_capacity(cap3, c[4]) {
                None => {
                    let mut v = stream.clone_dtoh(&cand.slice(0..c[4] as usize))?;
                    stream.synchronize()?;
                    v.sort_unstable();
                    break v;
                }
                Some(cap) => cap3 = cap,
            }
        };
        out.timings.phase3_s = t.elapsed().as_secs_f64();
        out.stats.candidates = candidates.len() as u64;
        out.candidates = candidates;
        Ok(out)
    }
}

impl Backend for Cuda {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError> {
        let dev = &self.devices[self.next.fetch_add(1, Ordering::Relaxed) % self.devices.len()];
        match self.run_piece(dev, g, test) {
            // A piece outside the kernels' sizes (degree above 12, more than 2^40 domains):
            // the CPU gives the same answer, slower.
            Err(CudaError::Unsupported(why)) => {
                tracing::warn!(%why, "piece searched on the CPU");
                Ok(crate::search::search_generated_cpu(g, test, packet_domains))
            }
            other => Ok(other?),
        }
    }

    fn name(&self) -> String {
        let list: Vec<String> = self
            .devices
            .iter()
            .map(|d| {
                format!(
                    "{} {} ({})",
                    d.ordinal,
                    d.name,
                    d.arch.replace("compute_", "sm_")
                )
            })
            .collect();
        format!("cuda [{}]", list.join(", "))
    }
}

// ------------------------------------------------------------------------ self-test

/// One known-answer check of the self-test.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub cases: u64,
    pub failures: u64,
    /// The first differing case, for the message.
    pub first_failure: Option<String>,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.failures == 0 && self.cases > 0
    }
}

/// The self-test of one device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub device: usize,
    pub name: String,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(Check::passed)
    }
}

/// splitmix64: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A number with a random bit length, or near the edges of the 64-bit range.
    fn edgy(&mut self) -> u64 {
        match self.below(6) {
            0 => self.next(),
            1 => self.next() >> self.below(64),
            2 => u64::MAX - self.below(1 << 20),
            3 => self.below(1 << 20),
            4 => (1u64 << self.below(64))
                .wrapping_add(self.below(3))
                .wrapping_sub(1),
            _ => self.next() | 0xffff_ffff_0000_0000,
        }
    }
}

/// `a` close to a rational with a small denominator: large partial quotients.
fn adversarial_a(rng: &mut Rng) -> u64 {
    let den = 1 + rng.below(63);
    let num = rng.below(den);
    let base = ((num as u128) << 64) / den as u128;
    let spread = rng.below(40);
    let jitter = (rng.below(1 << spread) as i128) - (rng.below(1 << 20) as i128);
    (base as i128 + jitter).rem_euclid(1i128 << 64) as u64
}

fn record(name: &str, diffs: impl Iterator<Item = Option<String>>, cases: u64) -> Check {
    let mut failures = 0;
    let mut first_failure = None;
    for msg in diffs.flatten() {
        failures += 1;
        first_failure.get_or_insert(msg);
    }
    tracing::info!(check = name, cases, failures, "self-test check");
    Check {
        name: name.to_string(),
        cases,
        failures,
        first_failure,
    }
}

/// Known-answer tests of the GPU arithmetic the kernels rely on, against the CPU: 64-bit
/// products, quotients and remainders by the kernels' method, multi-limb carry chains at
/// several widths, exact binomials, both existence tests and `flat` on random and adversarial
/// inputs, and whole pieces against the CPU back end. The daemon refuses a device whose report
/// does not pass.
pub fn selftest(device: usize) -> Result<Report, CudaError> {
    let cuda = Cuda::new(&[device])?;
    let dev = &cuda.devices[0];
    let stream = dev.ctx.new_stream()?;
    let mut checks = Vec::new();
    let mut rng = Rng(0x7d2016 + device as u64);
    let m8 = dev.module(8, 2)?;

    // 64-bit products.
    {
        let n = 1 << 16;
        let x: Vec<u64> = (0..n).map(|_| rng.edgy()).collect();
        let y: Vec<u64> = (0..n).map(|_| rng.edgy()).collect();
        let dx = stream.clone_htod(&x)?;
        let dy = stream.clone_htod(&y)?;
        let mut lo = stream.alloc_zeros::<u64>(n)?;
        let mut hi = stream.alloc_zeros::<u64>(n)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.mul);
        b.arg(&dx).arg(&dy).arg(&mut lo).arg(&mut hi).arg(&count);
        // SAFETY: tmd_selftest_mul(x, y, lo, hi, n) with four lists of n entries.
        unsafe { b.launch(launch_config(count)?) }?;
        let (lo, hi) = (stream.clone_dtoh(&lo)?, stream.clone_dtoh(&hi)?);
        stream.synchronize()?;
        checks.push(record(
            "64-bit multiply (low and high halves)",
            (0..n).map(|i| {
                let p = x[i] as u128 * y[i] as u128;
                (lo[i] != p as u64 || hi[i] != (p >> 64) as u64).then(|| {
                    format!(
                        "{:#x} * {:#x}: got hi {:#x} lo {:#x}",
                        x[i], y[i], hi[i], lo[i]
                    )
                })
            }),
            n as u64,
        ));
    }

    // Quotients and remainders through the kernels' divrem.
    {
        let n = 1 << 16;
        let mut x = Vec::with_capacity(n);
        let mut y = Vec::with_capacity(n);
        for i in 0..n {
            let (a, d) = match i % 5 {
                // small quotients: the subtraction path
                0 => {
                    let d = rng.edgy().max(1);
                    (
                        d.saturating_mul(rng.below(4)).saturating_add(rng.below(d)),
                        d,
                    )
                }
                1 => (rng.edgy(), rng.edgy().max(1)),
                2 => (rng.next(), 1 + rng.below(1 << 12)),
                // quotients around the float estimate's range (2^20), remainders at the edges
                3 => {
                    let d = (rng.next() >> rng.below(64)).max(1);
                    let k = rng.below(1 << 22);
                    let r = if rng.below(2) == 0 {
                        d - 1
                    } else {
                        rng.below(d)
                    };
                    match k.checked_mul(d).and_then(|x| x.checked_add(r)) {
                        Some(x) => (x, d),
                        None => (u64::MAX, d),
                    }
                }
                _ => (u64::MAX - rng.below(4), rng.edgy().max(1)),
            };
            x.push(a);
            y.push(d);
        }
        let dx = stream.clone_htod(&x)?;
        let dy = stream.clone_htod(&y)?;
        let mut q = stream.alloc_zeros::<u64>(n)?;
        let mut r = stream.alloc_zeros::<u64>(n)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.div);
        b.arg(&dx).arg(&dy).arg(&mut q).arg(&mut r).arg(&count);
        // SAFETY: tmd_selftest_div(x, y, q, r, n) with four lists of n entries, y > 0.
        unsafe { b.launch(launch_config(count)?) }?;
        let (q, r) = (stream.clone_dtoh(&q)?, stream.clone_dtoh(&r)?);
        stream.synchronize()?;
        checks.push(record(
            "64-bit division and remainder (subtraction, float estimate + correction, hardware)",
            (0..n).map(|i| {
                (q[i] != x[i] / y[i] || r[i] != x[i] % y[i])
                    .then(|| format!("{:#x} / {:#x}: got q {:#x} r {:#x}", x[i], y[i], q[i], r[i]))
            }),
            n as u64,
        ));
    }

    // Multi-limb words: carry chains at each width the kernels are built for.
    for limbs in 1..=8usize {
        let m = dev.module(limbs, 2)?;
        let n = 1 << 13;
        let mut a = Vec::with_capacity(n * limbs);
        let mut bw = Vec::with_capacity(n * limbs);
        let mut mul = Vec::with_capacity(n);
        for i in 0..n {
            for _ in 0..limbs {
                // Runs of all-ones limbs make carries ripple through the whole word.
                let (x, y) = match i % 3 {
                    0 => (u64::MAX, if rng.below(2) == 0 { 1 } else { rng.edgy() }),
                    1 => (rng.edgy(), rng.edgy()),
                    _ => (rng.below(2), u64::MAX - rng.below(2)),
                };
                a.push(x);
                bw.push(y);
            }
            mul.push(rng.edgy());
        }
        let da = stream.clone_htod(&a)?;
        let db = stream.clone_htod(&bw)?;
        let dm = stream.clone_htod(&mul)?;
        let stride = 4 * limbs + 3;
        let mut o = stream.alloc_zeros::<u64>(n * stride)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m.words);
        b.arg(&da).arg(&db).arg(&dm).arg(&mut o).arg(&count);
        // SAFETY: tmd_selftest_words(a, b, m, out, n) for this module's L = limbs: a and b
        // hold n words of L limbs, m n entries, out n (4 L + 3) entries.
        unsafe { b.launch(launch_config(count)?) }?;
        let o = stream.clone_dtoh(&o)?;
        stream.synchronize()?;
        let modulus = Integer::from(1) << (64 * limbs as u32);
        let to_int = |w: &[u64]| Integer::from_digits(w, rug::integer::Order::Lsf);
        checks.push(record(
            &format!("{limbs}-limb add, sub, multiply, carries and 64-bit reads"),
            (0..n).map(|i| {
                let wa = &a[i * limbs..(i + 1) * limbs];
                let wb = &bw[i * limbs..(i + 1) * limbs];
                let (ia, ib) = (to_int(wa), to_int(wb));
                let got = &o[i * stride..(i + 1) * stride];
                let want_words = [
                    Integer::from(&ia + &ib) % &modulus,
                    Integer::from(&ia - &ib).keep_bits(64 * limbs as u32),
                    Integer::from(&ia * mul[i]) % &modulus,
                    Integer::from(&ia * &ib) % &modulus,
                ];
                let low_nonzero = wa[..limbs - 1].iter().any(|&x| x != 0);
                let top = wa[limbs - 1];
                let want_reads = [
                    top,
                    top.wrapping_add(low_nonzero as u64),
                    if low_nonzero {
                        !top
                    } else {
                        top.wrapping_neg()
                    },
                ];
                let ok = want_words
                    .iter()
                    .enumerate()
                    .all(|(f, w)| word_limbs(w, limbs) == got[f * limbs..(f + 1) * limbs])
                    && got[4 * limbs..] == want_reads;
                (!ok).then(|| format!("a={wa:x?} b={wb:x?} m={:#x}: got {got:x?}", mul[i]))
            }),
            n as u64,
        ));
    }

    // Exact binomials C(i0, m), m <= 12, i0 < 2^40.
    {
        let n = 1 << 12;
        let i0: Vec<u64> = (0..n)
            .map(|i| match i % 3 {
                0 => rng.below(1 << 40),
                1 => rng.below(20),
                _ => (1u64 << 40) - 1 - rng.below(1 << 10),
            })
            .collect();
        let di = stream.clone_htod(&i0)?;
        let mut o = stream.alloc_zeros::<u64>(n * 13 * 8)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.binomial);
        b.arg(&di).arg(&mut o).arg(&count);
        // SAFETY: tmd_selftest_binomial(i0, out, n): n inputs, n * 13 * 8 outputs.
        unsafe { b.launch(launch_config(count)?) }?;
        let o = stream.clone_dtoh(&o)?;
        stream.synchronize()?;
        checks.push(record(
            "exact binomials C(i, m) for i < 2^40, m <= 12 (512-bit division by m)",
            (0..n).map(|j| {
                (0..13u32).find_map(|m| {
                    let want = word_limbs(&Integer::from(i0[j]).binomial(m), 8);
                    let got = &o[(j * 13 + m as usize) * 8..(j * 13 + m as usize + 1) * 8];
                    (want != got).then(|| format!("C({}, {m}): got {got:x?}", i0[j]))
                })
            }),
            n as u64 * 13,
        ));
    }

    // Both existence tests and the flat shortcut, exactly as the CPU answers.
    {
        let n = 1 << 17;
        let mut a = Vec::with_capacity(n);
        let mut bv = Vec::with_capacity(n);
        let mut nv = Vec::with_capacity(n);
        let mut ev = Vec::with_capacity(n);
        for i in 0..n {
            let len = match i % 5 {
                0 => 1 + rng.below(16),
                1 => 16 + rng.below(496),
                2 => 1 << rng.below(13),
                3 => 512 + rng.below(3584),
                // Up to the largest domains (2^30 at most, 2^15 by default). Not beyond: where
                // q divides p, Lefevre's test advances u by v per iteration, linear in N.
                _ => 1 + rng.below(1 << 20),
            };
            let x = match i % 6 {
                0 => rng.next(),
                1 | 5 => adversarial_a(&mut rng),
                2 => rng.below(1 << 20),
                3 => u64::MAX - rng.below(1 << 20),
                _ => rng.next() >> rng.below(63),
            };
            let y = match i % 3 {
                0 => rng.next(),
                1 => rng.below(1 << 30),
                _ => u64::MAX - rng.below(1 << 30),
            };
            // A threshold at the true minimum where brute force is cheap: wrong answers show.
            let e = if len <= 4096 && i % 2 == 0 {
                let m = existence::brute_force_min(x, y, len);
                match i % 8 {
                    0 => m,
                    2 => m.saturating_add(1),
                    4 => m.saturating_sub(rng.below(1000)),
                    _ => m.saturating_sub(1),
                }
            } else {
                rng.next() >> rng.below(64)
            };
            a.push(x);
            bv.push(y);
            nv.push(len);
            ev.push(e);
        }
        let (da, db) = (stream.clone_htod(&a)?, stream.clone_htod(&bv)?);
        let (dn, de) = (stream.clone_htod(&nv)?, stream.clone_htod(&ev)?);
        let mut o = stream.alloc_zeros::<u32>(3 * n)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.tests);
        b.arg(&da)
            .arg(&db)
            .arg(&dn)
            .arg(&de)
            .arg(&mut o)
            .arg(&count);
        // SAFETY: tmd_selftest_tests(a, b, n, e, out, count): four inputs of count entries,
        // 3 count u32 outputs.
        unsafe { b.launch(launch_config(count)?) }?;
        let o = stream.clone_dtoh(&o)?;
        stream.synchronize()?;
        let show = |i: usize| format!("a={:#x} b={:#x} n={} e={:#x}", a[i], bv[i], nv[i], ev[i]);
        checks.push(record(
            "regular existence test (with the capped last quotient) vs CPU",
            (0..n).map(|i| {
                let want = existence::regular(a[i], bv[i], nv[i], ev[i]);
                (o[3 * i] != want as u32).then(|| format!("{}: cpu {want}", show(i)))
            }),
            n as u64,
        ));
        checks.push(record(
            "Lefevre existence test vs CPU",
            (0..n).map(|i| {
                let want = existence::lefevre(a[i], bv[i], nv[i], ev[i]);
                (o[3 * i + 1] != want as u32).then(|| format!("{}: cpu {want}", show(i)))
            }),
            n as u64,
        ));
        checks.push(record(
            "flat-line shortcut vs CPU",
            (0..n).map(|i| {
                let want = match existence::flat(a[i], bv[i], nv[i], ev[i]) {
                    None => 2,
                    Some(x) => x as u32,
                };
                (o[3 * i + 2] != want).then(|| format!("{}: cpu {want}", show(i)))
            }),
            n as u64,
        ));
    }

    // Whole pieces: statistics and candidates against the CPU back end.
    for (function, bits, min_bits, first, unit_bits, test) in [
        (
            crate::Function::Exp,
            24u32,
            16u32,
            1u64 << 23,
            20u32,
            Test::Regular,
        ),
        (crate::Function::Log, 24, 16, 3 << 22, 20, Test::Lefevre),
        (crate::Function::Sin, 20, 14, 1 << 19, 16, Test::Regular),
    ] {
        let p = crate::Precision::new(bits).map_err(|e| CudaError::Unsupported(e.to_string()))?;
        let piece = crate::plan::UnitSpec {
            negative: false,
            exponent: 0,
            first,
            count: 1 << unit_bits,
        };
        let gen = crate::generation::GenConfig::new(min_bits);
        let name = format!(
            "{} p={bits} k={min_bits} [{first:#x}, +2^{unit_bits}) {}: phases 1-3 vs CPU",
            function.name(),
            test.name()
        );
        match crate::generation::generate(function, p, &gen, piece) {
            Ok(g) => {
                let cpu = crate::search::search_generated_cpu(&g, test, 1024);
                let gpu = cuda.run_piece(dev, &g, test)?;
                let same = cpu.stats == gpu.stats && cpu.candidates == gpu.candidates;
                tracing::info!(check = %name, same, stats = ?gpu.stats, "self-test check");
                checks.push(Check {
                    name,
                    cases: 1,
                    failures: (!same) as u64,
                    first_failure: (!same).then(|| {
                        format!(
                            "cpu {:?} {} candidates, gpu {:?} {} candidates",
                            cpu.stats,
                            cpu.candidates.len(),
                            gpu.stats,
                            gpu.candidates.len()
                        )
                    }),
                });
            }
            Err(e) => checks.push(Check {
                name,
                cases: 0,
                failures: 1,
                first_failure: Some(format!("generation: {e}")),
            }),
        }
    }
    Ok(Report {
        device,
        name: dev.name.clone(),
        checks,
    })
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
        assert_eq!(gpu_packet(1 << 25), 256);
        assert_eq!(grown_capacity(10, 10), None);
        assert_eq!(grown_capacity(10, 11), Some(11));
        assert_eq!(grown_capacity(10, 0), None);
    }

    #[test]
    fn the_cache_key_depends_on_every_input() {
        let o = compile_options(5, 6, "compute_90");
        let k = cache_key(&o, (13, 0));
        assert_eq!(k, cache_key(&o, (13, 0)));
        assert_ne!(k, cache_key(&o, (13, 1)));
        assert_ne!(k, cache_key(&compile_options(5, 7, "compute_90"), (13, 0)));
        assert_ne!(k, cache_key(&compile_options(4, 6, "compute_90"), (13, 0)));
        assert_ne!(k, cache_key(&compile_options(5, 6, "compute_80"), (13, 0)));
    }

    /// CI has no GPU: every module must still compile through NVRTC. With
    /// `TMD_REQUIRE_NVRTC=1` a missing NVRTC is a failure, otherwise the test says why it
    /// skips.
    #[test]
    fn every_kernel_compiles_with_nvrtc() {
        if !nvrtc_available() {
            let required = std::env::var("TMD_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "TMD_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded (LD_LIBRARY_PATH?)"
            );
            eprintln!("skipping: libnvrtc cannot be loaded (set TMD_REQUIRE_NVRTC=1 to fail)");
            return;
        }
        let version = nvrtc_version().expect("version");
        eprintln!("NVRTC {}.{}", version.0, version.1);
        // Every width with every degree: each (L, degree) is a module of its own.
        let jobs: Vec<(usize, usize)> = (1..=8)
            .flat_map(|l| (1..=MAX_DEGREE).map(move |d| (l, d)))
            .collect();
        use rayon::prelude::*;
        let failures: Vec<String> = jobs
            .par_iter()
            .filter_map(
                |&(l, d)| match compile_uncached(&compile_options(l, d, "compute_90")) {
                    Ok(ptx) => {
                        let entries = [
                            "tmd_phase1",
                            "tmd_phase1_words",
                            "tmd_phase2",
                            "tmd_phase3",
                            "tmd_selftest_tests",
                            "tmd_selftest_words",
                        ];
                        let missing: Vec<&str> = entries
                            .iter()
                            .copied()
                            .filter(|e| !ptx.contains(&format!(".entry {e}")))
                            .collect();
                        (!missing.is_empty()).then(|| format!("L={l} deg={d}: no {missing:?}"))
                    }
                    Err(e) => Some(format!("L={l} deg={d}: {e}")),
                },
            )
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
