//! NVRTC: the kernels' compile options in one place, compilation at run time to a cubin for the
//! device's own architecture, and the on-disk cache of compiled modules.

use super::{CudaError, SOURCE};
use cudarc::nvrtc;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Phase-1 blocks per multiprocessor the register allocation must allow (tuned on an H200).
const PHASE1_MIN_BLOCKS: u64 = 2;
/// Phase-1 blocks per multiprocessor with the two-limb walk (`tmd_phase1_top`), whose state
/// is a fraction of the whole words'; `TMD_CUDA_TOP_MINBLOCKS` overrides it.
const PHASE1_TOP_MIN_BLOCKS: u64 = 4;
/// Domains tested at once per phase-1 thread by the regular test (1 or 2; `TMD_CUDA_LANES`).
/// Two lanes measured slower on an H100 (7.8 ms against 6.3 ms per binary64 unit): the lanes'
/// branches do not overlap, and the second state costs registers.
const PHASE1_LANES: u64 = 1;
/// Whether phase 1's warps walk their domains in stripes (1) or each thread its own packet
/// (0; `TMD_CUDA_STRIPE`): see `stride_state` in `tmd.cu`.
const PHASE1_STRIPE: u64 = 1;
/// Blocks of 256 threads of phase 2 that must fit on a multiprocessor (`TMD_CUDA_P2_MINBLOCKS`;
/// 0 leaves the registers to the compiler): 4 caps them at 64 (80 before, 37.5% occupancy) and
/// took phase 2 from 0.71 to 0.58 ms per unit at 44 bits, the exp binade at 44 bits from
/// 15.9-16.2 s to 15.0-15.1 s on an H100; 3 was slower (16.1 s).
const PHASE2_MIN_BLOCKS: u64 = 4;

/// Whether `libnvrtc` can be loaded.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to open the shared library under its usual names (dlopen).
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
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
/// warps, some walk state in local memory), `TMD_CUDA_TOP_MINBLOCKS` the same for the two-limb
/// walk; `TMD_CUDA_LANES` (1 or 2) how many domains one thread tests at once;
/// `TMD_CUDA_STRIPE` (0 or 1) whether a warp's lanes walk neighbouring domains;
/// `TMD_CUDA_P2_MINBLOCKS` (0: no cap) the blocks of phase 2 that must fit on a
/// multiprocessor (its register cap), `TMD_CUDA_QUAD_MINBLOCKS` those of the quadratic screen's
/// two-limb walk (default 2); `TMD_CUDA_LINEINFO=1` keeps source lines in the cubin for a
/// profiler (Nsight Compute's source view). No answer depends on them.
pub fn compile_options(limbs: usize, degree: usize, arch: &str) -> Vec<String> {
    let min_blocks = env_u64("TMD_CUDA_MINBLOCKS").unwrap_or(PHASE1_MIN_BLOCKS);
    let lanes = env_u64("TMD_CUDA_LANES").unwrap_or(PHASE1_LANES);
    let top_min_blocks = env_u64("TMD_CUDA_TOP_MINBLOCKS").unwrap_or(PHASE1_TOP_MIN_BLOCKS);
    let stripe = env_u64("TMD_CUDA_STRIPE").unwrap_or(PHASE1_STRIPE).min(1);
    let p2_min_blocks = env_u64("TMD_CUDA_P2_MINBLOCKS")
        .unwrap_or(PHASE2_MIN_BLOCKS)
        .min(8);
    let quad_min_blocks = env_u64("TMD_CUDA_QUAD_MINBLOCKS").unwrap_or(2).clamp(1, 8);
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        format!("-DTMD_L={limbs}"),
        format!("-DTMD_DEG={degree}"),
        format!("-DTMD_MINBLOCKS={min_blocks}"),
        format!("-DTMD_LANES={lanes}"),
        format!("-DTMD_TOP_MINBLOCKS={top_min_blocks}"),
        format!("-DTMD_STRIPE={stripe}"),
        format!("-DTMD_P2_MINBLOCKS={p2_min_blocks}"),
        format!("-DTMD_QUAD_MINBLOCKS={quad_min_blocks}"),
        "--std=c++17".to_string(),
    ];
    if env_u64("TMD_CUDA_LINEINFO") == Some(1) {
        options.push("-lineinfo".to_string());
    }
    options
}

/// A numeric tuning knob from the environment.
pub(super) fn env_u64(name: &str) -> Option<u64> {
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

/// A compiled module: its image (a cubin for a real architecture `sm_XY`, PTX text for a
/// virtual one `compute_XY`) and whether it came from the disk cache.
pub struct Compiled {
    pub image: Vec<u8>,
    pub cached: bool,
}

/// Compiles the module for `limbs` and `degree` for `arch` (`sm_90`, ...), from the disk cache
/// when it holds it. The cache is an optimisation: failures to read or write it only cost a
/// compilation. A cubin, not PTX, so that loading it is a copy: PTX is compiled again by the
/// driver at each load, 1.2-3 s per module wherever the driver's own cache is cold (a fresh
/// machine), which made most of a cold start.
pub fn compile(limbs: usize, degree: usize, arch: &str) -> Result<Compiled, CudaError> {
    compile_with(limbs, degree, arch, true)
}

/// [`compile`] without reading the cache (which it fills): for a cached image the driver
/// refused.
pub fn recompile(limbs: usize, degree: usize, arch: &str) -> Result<Compiled, CudaError> {
    compile_with(limbs, degree, arch, false)
}

fn compile_with(
    limbs: usize,
    degree: usize,
    arch: &str,
    read: bool,
) -> Result<Compiled, CudaError> {
    compile_in(limbs, degree, arch, read, cache_dir().as_deref())
}

/// [`compile_with`] with the disk cache in `dir` (none: in memory only).
fn compile_in(
    limbs: usize,
    degree: usize,
    arch: &str,
    read: bool,
    dir: Option<&Path>,
) -> Result<Compiled, CudaError> {
    let options = compile_options(limbs, degree, arch);
    let version = nvrtc_version()?;
    let key = cache_key(&options, version);
    // One compilation of a module per process: the lock of its key is held while it compiles,
    // so the devices of one process and the warm-up ahead of the engine (`warm_up`) wait for
    // each other's result instead of compiling it again.
    let cell = in_process()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.clone())
        .or_default()
        .clone();
    let mut held = cell.lock().unwrap_or_else(|e| e.into_inner());
    if read {
        if let Some(image) = held.as_ref() {
            return Ok(Compiled {
                image: image.to_vec(),
                cached: true,
            });
        }
    }
    let path = dir.map(|d| d.join(format!("{key}.bin")));
    let cached = || path.as_deref().filter(|_| read).and_then(read_cached);
    if let Some(image) = cached() {
        return Ok(Compiled {
            image,
            cached: true,
        });
    }
    // Across processes the same: the daemons of one machine (several a GPU) start together
    // and each compiled every module of its first leases (17 s a module at worst); the first
    // takes the key's lock file and the others wait and read its image.
    let _turn = path.as_deref().and_then(|p| key_lock(p, LOCK_WAIT));
    if let Some(image) = cached() {
        return Ok(Compiled {
            image,
            cached: true,
        });
    }
    let image = compile_uncached(&options)?;
    // Kept in memory only where the disk cache cannot hold it.
    *held = match &path {
        Some(p) if write_cached(p, &image) => None,
        _ => Some(Arc::new(image.clone())),
    };
    Ok(Compiled {
        image,
        cached: false,
    })
}

/// How long a process waits for another's compilation of a module before it compiles the
/// module itself (a process stuck in NVRTC must not stop the others).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The exclusive lock of the cache file `path`'s key (the file `KEY.lock` beside it), taken
/// within `wait`, held until the returned file is dropped; `None` where the lock cannot be
/// had (a read-only cache, a holder that takes longer than `wait`): the caller compiles
/// anyway, at worst twice as before.
fn key_lock(path: &Path, wait: std::time::Duration) -> Option<std::fs::File> {
    let lock = path.with_extension("lock");
    let file = std::fs::create_dir_all(path.parent()?)
        .and_then(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock)
        })
        .map_err(|e| tracing::debug!(path = %lock.display(), error = %e, "no compile lock"))
        .ok()?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Some(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => {
                tracing::warn!(path = %lock.display(), error = %e, "compiling without the lock");
                return None;
            }
        }
    }
}

/// A module's entry in [`in_process`]: its image where the disk cache could not take it.
type Cell = Arc<Mutex<Option<Arc<Vec<u8>>>>>;

/// The modules this process compiles or has compiled, by cache key.
fn in_process() -> &'static Mutex<HashMap<String, Cell>> {
    static MODULES: OnceLock<Mutex<HashMap<String, Cell>>> = OnceLock::new();
    MODULES.get_or_init(Mutex::default)
}

/// Compiles the modules `modules` (limbs, degree) for each architecture of `arches` into this
/// process and the disk cache, in parallel on the engine's threads, without a device: the
/// daemon's first lease names them while its GPU opens and self-tests, and its first unit
/// then finds its module ready instead of compiling it (about 5 s of a fresh machine's
/// start). A device that loads a module meanwhile waits for this compilation.
pub fn warm_up(arches: &[String], modules: &[(usize, usize)]) -> Result<(), CudaError> {
    use rayon::prelude::*;
    let jobs: Vec<(&str, usize, usize)> = arches
        .iter()
        .flat_map(|a| modules.iter().map(move |&(l, d)| (a.as_str(), l, d)))
        .collect();
    jobs.par_iter()
        .try_for_each(|&(arch, limbs, degree)| compile(limbs, degree, arch).map(drop))
}

/// A cached image: the file holds the SHA-256 of the image, then the image. `None` when the
/// file is missing, short or does not match its digest (a torn or damaged write): a damaged
/// cubin could load and compute wrong answers, so it is never taken on trust.
pub fn read_cached(path: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    if bytes.len() <= 32 {
        return None;
    }
    let (digest, image) = bytes.split_at(32);
    (Sha256::digest(image).as_slice() == digest).then(|| image.to_vec())
}

/// Writes `image` to the cache file `path` (created with its folder), through a temporary file
/// renamed into place; a failure is logged (`false`) and costs only a later compilation.
pub fn write_cached(path: &Path, image: &[u8]) -> bool {
    let Some(dir) = path.parent() else {
        return false;
    };
    // Unique per write, not only per process: the modules are compiled in parallel, and the
    // devices of one process compile the same module at once (their self-tests run side by
    // side); two writers of one temporary file could rename a half-written one into place.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!("{name}.{}.{n}.tmp", std::process::id()));
    let mut file = Sha256::digest(image).to_vec();
    file.extend_from_slice(image);
    let written = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, &file))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = &written {
        tracing::warn!(path = %path.display(), error = %e, "cannot cache a compiled kernel");
        let _ = std::fs::remove_file(&tmp);
    }
    written.is_ok()
}

/// Compiles with NVRTC, bypassing the cache: a cubin when `options` name a real architecture
/// (`--gpu-architecture=sm_XY`), else PTX text (NUL-terminated, as the driver loads it).
/// NVRTC needs no GPU for either.
pub fn compile_uncached(options: &[String]) -> Result<Vec<u8>, CudaError> {
    if !nvrtc_available() {
        return Err(CudaError::NoNvrtc);
    }
    let cubin = options
        .iter()
        .any(|o| o.starts_with("--gpu-architecture=sm_"));
    let fail = |log: String| CudaError::Compile {
        options: options.join(" "),
        log,
    };
    let source = CString::new(SOURCE).map_err(|e| fail(e.to_string()))?;
    let prog = nvrtc::result::create_program(&source, Some(c"tmd.cu"))
        .map_err(|e| fail(format!("nvrtcCreateProgram: {e:?}")))?;
    let prog = Program(prog);
    // SAFETY: `prog.0` was created above and is destroyed only when `prog` drops, after every
    // call below; the log, PTX and cubin buffers are sized by NVRTC's own size calls.
    unsafe {
        if let Err(e) = nvrtc::result::compile_program(prog.0, options) {
            let log = nvrtc::result::get_program_log(prog.0)
                .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
                .unwrap_or_else(|_| format!("{e:?}"));
            return Err(fail(log));
        }
        if !cubin {
            let ptx =
                nvrtc::result::get_ptx(prog.0).map_err(|e| fail(format!("nvrtcGetPTX: {e:?}")))?;
            return Ok(ptx.into_iter().map(|c| c as u8).collect());
        }
        let mut size = 0usize;
        nvrtc::sys::nvrtcGetCUBINSize(prog.0, &mut size)
            .result()
            .map_err(|e| fail(format!("nvrtcGetCUBINSize: {e:?}")))?;
        let mut image = vec![0u8; size];
        nvrtc::sys::nvrtcGetCUBIN(prog.0, image.as_mut_ptr().cast())
            .result()
            .map_err(|e| fail(format!("nvrtcGetCUBIN: {e:?}")))?;
        Ok(image)
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed only here.
        let _ = unsafe { nvrtc::result::destroy_program(self.0) };
    }
}

/// Whether a compiled image defines the kernel `name`: an `.entry` of PTX, or in a cubin the
/// name NUL-terminated in a string table, after a NUL (the symbol) or a dot (its section,
/// `.text.NAME`, where the table shares one string between both).
pub fn defines_kernel(image: &[u8], name: &str) -> bool {
    if !image.starts_with(b"\x7fELF") {
        let want = format!(".entry {name}(");
        return image.windows(want.len()).any(|w| w == want.as_bytes());
    }
    let want = [name.as_bytes(), b"\0"].concat();
    image
        .windows(want.len())
        .enumerate()
        .any(|(i, w)| w == want.as_slice() && i > 0 && matches!(image[i - 1], 0 | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::MAX_DEGREE;

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

    /// The kernels every module defines.
    const ENTRIES: [&str; 16] = [
        "tmd_phase1",
        "tmd_phase1_top",
        "tmd_phase1_exact",
        "tmd_phase1_quad",
        "tmd_phase1_top_quad",
        "tmd_phase1_exact_quad",
        "tmd_phase1_words",
        "tmd_phase2",
        "tmd_phase3",
        "tmd_dense_walk",
        "tmd_narrow_walk",
        "tmd_selftest_mul",
        "tmd_selftest_div",
        "tmd_selftest_words",
        "tmd_selftest_binomial",
        "tmd_selftest_tests",
    ];

    /// `Err` with why, when NVRTC cannot be loaded and the test may skip; a panic when
    /// `TMD_REQUIRE_NVRTC=1` (CI).
    fn nvrtc_or_skip() -> Result<(), ()> {
        if nvrtc_available() {
            return Ok(());
        }
        let required = std::env::var("TMD_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "TMD_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded (LD_LIBRARY_PATH?)"
        );
        eprintln!("skipping: libnvrtc cannot be loaded (set TMD_REQUIRE_NVRTC=1 to fail)");
        Err(())
    }

    /// What is missing from an image: the kernels it does not define.
    fn missing(image: &[u8]) -> Vec<&'static str> {
        ENTRIES
            .into_iter()
            .filter(|e| !defines_kernel(image, e))
            .collect()
    }

    /// CI has no GPU: every module must still compile through NVRTC (to PTX, the front end
    /// where the source's errors show). With `TMD_REQUIRE_NVRTC=1` a missing NVRTC is a
    /// failure, otherwise the test says why it skips.
    #[test]
    fn every_kernel_compiles_with_nvrtc() {
        if nvrtc_or_skip().is_err() {
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
                        let missing = missing(&ptx);
                        (!missing.is_empty()).then(|| format!("L={l} deg={d}: no {missing:?}"))
                    }
                    Err(e) => Some(format!("L={l} deg={d}: {e}")),
                },
            )
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// What the daemon loads: a cubin for a real architecture, made by NVRTC with no GPU here
    /// (sm_90, the H100's), at the widest and the narrowest words.
    #[test]
    fn a_module_compiles_to_a_cubin_without_a_gpu() {
        if nvrtc_or_skip().is_err() {
            return;
        }
        let jobs = [(1usize, 2usize), (8, 2)];
        let images: Vec<_> = std::thread::scope(|s| {
            let runs: Vec<_> = jobs
                .iter()
                .map(|&(l, d)| s.spawn(move || compile_uncached(&compile_options(l, d, "sm_90"))))
                .collect();
            runs.into_iter()
                .map(|r| r.join().expect("no panic"))
                .collect()
        });
        for ((l, d), image) in jobs.iter().zip(images) {
            let image = image.unwrap_or_else(|e| panic!("L={l} deg={d}: {e}"));
            assert!(
                image.starts_with(b"\x7fELF"),
                "L={l} deg={d}: not an ELF cubin"
            );
            assert_eq!(missing(&image), Vec::<&str>::new(), "L={l} deg={d}");
            assert!(!defines_kernel(&image, "tmd_phase4"));
        }
    }

    #[test]
    fn the_cache_refuses_a_damaged_image() {
        let dir = std::env::temp_dir().join(format!("tmd-cache-test-{}", std::process::id()));
        let path = dir.join("k.bin");
        let image: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert!(write_cached(&path, &image));
        assert_eq!(read_cached(&path), Some(image.clone()));
        // A flipped bit anywhere, a torn write, an empty file: not an image.
        let file = std::fs::read(&path).unwrap();
        for at in [0, 31, 32, 1000, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 4;
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(read_cached(&path), None, "bit flipped at {at}");
        }
        for len in [0, 20, 32, file.len() - 1] {
            std::fs::write(&path, &file[..len]).unwrap();
            assert_eq!(read_cached(&path), None, "cut at {len}");
        }
        assert_eq!(read_cached(&dir.join("absent.bin")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A process that finds a module's lock taken (another process compiling it) waits, then
    /// takes the image that process cached instead of compiling it again.
    #[test]
    fn a_module_another_process_compiles_is_waited_for() {
        if nvrtc_or_skip().is_err() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("tmd-lock-test-{}", std::process::id()));
        let (limbs, degree, arch) = (3, 5, "sm_90");
        let key = cache_key(
            &compile_options(limbs, degree, arch),
            nvrtc_version().unwrap(),
        );
        let path = dir.join(format!("{key}.bin"));
        // The other process: its lock taken through a file of its own (flock locks are held
        // per open file, so this is what another process's lock looks like).
        let other = key_lock(&path, std::time::Duration::ZERO).expect("the lock");
        let waiter = std::thread::spawn({
            let dir = dir.clone();
            move || compile_in(limbs, degree, arch, true, Some(&dir))
        });
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(
            !waiter.is_finished(),
            "compiled without waiting for the lock"
        );
        let image = b"the image the other process compiled".to_vec();
        assert!(write_cached(&path, &image));
        drop(other);
        let got = waiter.join().expect("no panic").expect("compiled");
        assert!(got.cached, "compiled again");
        assert_eq!(got.image, image);
        // Free again: a lock is had at once.
        assert!(key_lock(&path, std::time::Duration::ZERO).is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kernels_are_found_by_their_whole_names() {
        let ptx = b".visible .entry tmd_phase1_top(\n.param";
        assert!(defines_kernel(ptx, "tmd_phase1_top"));
        assert!(!defines_kernel(ptx, "tmd_phase1"));
        let elf = b"\x7fELF\0\0.text.tmd_phase1_top\0tmd_phase2\0";
        assert!(defines_kernel(elf, "tmd_phase1_top"));
        assert!(defines_kernel(elf, "tmd_phase2"));
        assert!(!defines_kernel(elf, "tmd_phase1"));
        assert!(!defines_kernel(elf, "phase2"));
    }
}
