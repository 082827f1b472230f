//! `eval` (one argument through MPFR, with only the options its verdict depends on) and
//! `selftest` (known-answer tests of each GPU's arithmetic against the CPU).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::time::Instant;
use tmd_kernels::cuda::{self, Cuda, MemoryBudget};
use tmd_kernels::numbers::format::{float_to_hex, parse_number, Format};
use tmd_kernels::oracle::verify::{verify_case_in, Verdict};
use tmd_kernels::search::MAX_MIN_BITS;
use tmd_kernels::{Function, Precision};

/// `eval`'s options: only what MPFR's verdict on one argument depends on (no engine, no
/// back end, no unit).
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The function (see `tmd-worker --help` for the list).
    #[arg(long, short = 'f', env = "TMD_FUNCTION")]
    pub function: Function,
    /// binary16, bfloat16, binary32, binary64, binary80, or a bare precision in bits, p8 to
    /// p64 (exponent unbounded).
    #[arg(long, default_value = "binary64", env = "TMD_FORMAT")]
    pub format: Format,
    /// Overrides --format with a bare precision in bits (8 to 64): exponent unbounded.
    #[arg(long)]
    pub precision: Option<u32>,
    /// Threshold k: the argument is hard with at least k identical bits after the rounding
    /// bit (1 to 60).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=MAX_MIN_BITS as i64))]
    pub min_bits: u32,
    /// The argument, C99 hex or decimal (decimal is rounded to nearest in the format).
    #[arg(allow_hyphen_values = true)]
    pub x: String,
}

pub fn eval(a: EvalArgs) -> Result<()> {
    let fmt = match a.precision {
        Some(b) => Format::bare(Precision::new(b)?),
        None => a.format,
    };
    let p = fmt.precision;
    let x = parse_number(&a.x, p.bits(), rug::float::Round::Nearest)?;
    let hex = float_to_hex(&x);
    let (y, _) = a.function.eval(&x, 200);
    println!("x = {hex}");
    println!("{}(x) = {} (200 bits)", a.function, float_to_hex(&y));
    match verify_case_in(a.function, fmt, a.min_bits, &hex)? {
        Verdict::Hard(c) => println!(
            "hard: {} identical bits after the rounding bit (-log2 d = {:.4}), near a {}, rounded {}",
            c.bits,
            c.neg_log2_d,
            if c.kind == tmd_kernels::oracle::verify::Kind::Fp { "floating-point number" } else { "midpoint" },
            c.rounded
        ),
        Verdict::NotHard { bits } => println!(
            "not hard at {} bits: {bits} identical bits after the rounding bit",
            a.min_bits
        ),
        Verdict::Exact(e) => println!("exact: {}(x) = {}", a.function, e.value),
        Verdict::Skipped(r) => println!("skipped in {}: {}", fmt.name(), r.rule()),
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct SelftestArgs {
    /// CUDA devices to test, e.g. 0,1 (default: every device).
    #[arg(long, value_delimiter = ',', env = "TMD_DEVICES")]
    pub devices: Vec<usize>,
    /// Print the reports as JSON.
    #[arg(long)]
    pub json: bool,
    /// Device memory the test may use per device, as for `search` and `run`: the test runs in
    /// the back end a search with this budget would open (its slots, its modules), so test
    /// with the budget the device will work with.
    #[arg(long, default_value = "auto", env = "TMD_GPU_MEMORY")]
    pub gpu_memory: MemoryBudget,
}

/// Known-answer tests of each GPU's arithmetic against the CPU, in one back end opened with
/// the given devices and memory budget; fails if any check fails.
pub fn selftest(a: SelftestArgs) -> Result<()> {
    // The CPU's answers are computed while the devices open.
    let reference = std::sync::OnceLock::new();
    let engine = std::thread::scope(|s| {
        s.spawn(|| reference.get_or_init(cuda::Reference::compute));
        if a.devices.is_empty() {
            Cuda::all(a.gpu_memory)
        } else {
            Cuda::new(&a.devices, a.gpu_memory)
        }
    })
    .context("opening the CUDA devices")?;
    let mut all_passed = true;
    for d in engine.ordinals() {
        let t = Instant::now();
        let report = engine
            .selftest(d, &reference)
            .with_context(|| format!("self-test of device {d}"))?;
        all_passed &= report.passed();
        if a.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
            continue;
        }
        println!("device {} ({}):", report.device, report.name);
        for c in &report.checks {
            println!(
                "  {} {} ({} cases, {} failures)",
                if c.passed() { "pass" } else { "FAIL" },
                c.name,
                c.cases,
                c.failures
            );
            if let Some(f) = &c.first_failure {
                println!("       first failure: {f}");
            }
        }
        println!(
            "  device {d}: {} in {:.2} s",
            if report.passed() { "passed" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
    }
    if !all_passed {
        bail!("the GPU self-test failed: do not use this device");
    }
    Ok(())
}
