//! NVRTC: the kernels' compile options in one place, compilation at run time for the device's
//! own architecture, and the on-disk cache of compiled modules.

use super::{CudaError, SOURCE};
use cudarc::nvrtc::{CompileError, CompileOptions};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

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
/// (0; `TMD_CUDA_STRIPE`): see `stride_state` in `tmd.cu` (issue 15).
const PHASE1_STRIPE: u64 = 1;
/// Blocks of 256 threads of phase 2 that must fit on a multiprocessor (`TMD_CUDA_P2_MINBLOCKS`;
/// 0 leaves the registers to the compiler): 4 caps them at 64 (80 before, 37.5% occupancy) and
/// took phase 2 from 0.71 to 0.58 ms per unit at 44 bits, the exp binade at 44 bits from
/// 15.9-16.2 s to 15.0-15.1 s on an H100 (issue 15); 3 was slower (16.1 s).
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
/// multiprocessor (its register cap). No answer depends on them.
pub fn compile_options(limbs: usize, degree: usize, arch: &str) -> Vec<String> {
    let min_blocks = env_u64("TMD_CUDA_MINBLOCKS").unwrap_or(PHASE1_MIN_BLOCKS);
    let lanes = env_u64("TMD_CUDA_LANES").unwrap_or(PHASE1_LANES);
    let top_min_blocks = env_u64("TMD_CUDA_TOP_MINBLOCKS").unwrap_or(PHASE1_TOP_MIN_BLOCKS);
    let stripe = env_u64("TMD_CUDA_STRIPE").unwrap_or(PHASE1_STRIPE).min(1);
    let p2_min_blocks = env_u64("TMD_CUDA_P2_MINBLOCKS")
        .unwrap_or(PHASE2_MIN_BLOCKS)
        .min(8);
    vec![
        format!("--gpu-architecture={arch}"),
        format!("-DTMD_L={limbs}"),
        format!("-DTMD_DEG={degree}"),
        format!("-DTMD_MINBLOCKS={min_blocks}"),
        format!("-DTMD_LANES={lanes}"),
        format!("-DTMD_TOP_MINBLOCKS={top_min_blocks}"),
        format!("-DTMD_STRIPE={stripe}"),
        format!("-DTMD_P2_MINBLOCKS={p2_min_blocks}"),
        "--std=c++17".to_string(),
    ]
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
            // Unique per write, not only per process: the devices of one process compile the
            // same module at once (their self-tests run side by side), and two writers of one
            // temporary file could rename a half-written one into place.
            static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = dir.join(format!("{key}.{}.{n}.tmp", std::process::id()));
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
                            "tmd_phase1_top",
                            "tmd_phase1_exact",
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
