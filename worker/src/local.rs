//! The local commands: `search` (a range, printed as a table, JSON, CSV or a worst-case file),
//! `bench` (whole units, timed per phase) and `eval` (one argument through MPFR).

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::io::Write;
use std::time::Instant;
use tmd_kernels::existence::Test;
use tmd_kernels::format::{float_to_hex, parse_number};
use tmd_kernels::plan::{default_unit_bits, parse_range, split_range};
use tmd_kernels::search::{search_unit, search_units, Cpu, SearchConfig, Stats, Timings};
use tmd_kernels::verify::{verify_case, Verdict};
use tmd_kernels::{Function, Precision};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TestArg {
    Regular,
    Lefevre,
}

impl From<TestArg> for Test {
    fn from(t: TestArg) -> Test {
        match t {
            TestArg::Regular => Test::Regular,
            TestArg::Lefevre => Test::Lefevre,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// A table for people.
    Table,
    /// The whole result as one JSON object.
    Json,
    /// One HR-case per line: x,bits,neg_log2_d,kind,rounded.
    Csv,
    /// One hex argument per line, as CORE-MATH's worst-case files.
    Wc,
}

/// What every engine command needs: function, format, threshold, engine options.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// The function (see `tmd-worker --help` for the list).
    #[arg(long, short = 'f', env = "TMD_FUNCTION")]
    pub function: Function,
    /// binary32, binary64, or a precision in bits (8 to 64).
    #[arg(long, default_value = "binary64", env = "TMD_FORMAT")]
    pub format: Precision,
    /// Overrides --format with a precision in bits (8 to 64).
    #[arg(long)]
    pub precision: Option<u32>,
    /// Threshold k: report x with at least k identical bits after the rounding bit (1 to 60).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub min_bits: u32,
    /// The existence test of phases 1 and 2.
    #[arg(long, value_enum, default_value_t = TestArg::Regular)]
    pub test: TestArg,
    /// Worker threads (default: all cores).
    #[arg(long, env = "TMD_THREADS")]
    pub threads: Option<usize>,
    /// Unit size U: 2^U arguments per unit (default: 40 for binary64, p-4 for smaller p).
    #[arg(long)]
    pub unit_bits: Option<u32>,
    /// Largest domain size n: 2^n arguments per domain (lowered per unit where needed).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(5..=30))]
    pub domain_bits: u32,
}

impl EngineArgs {
    fn precision(&self) -> Result<Precision> {
        Ok(match self.precision {
            Some(b) => Precision::new(b)?,
            None => self.format,
        })
    }

    fn config(&self) -> Result<SearchConfig> {
        let mut cfg = SearchConfig::new(self.function, self.precision()?, self.min_bits);
        cfg.test = self.test.into();
        cfg.gen.domain_bits = self.domain_bits;
        Ok(cfg)
    }

    fn init_threads(&self) -> Result<()> {
        if let Some(n) = self.threads {
            if n == 0 {
                bail!("--threads must be at least 1");
            }
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build_global()
                .context("starting the thread pool")?;
        }
        Ok(())
    }
}

#[derive(Args, Debug)]
pub struct SearchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Start of the range (included), C99 hex (0x1.8p+0) or decimal.
    #[arg(long, allow_hyphen_values = true)]
    pub from: String,
    /// End of the range (excluded), C99 hex or decimal.
    #[arg(long, allow_hyphen_values = true)]
    pub to: String,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// No progress bar on stderr.
    #[arg(long)]
    pub quiet: bool,
}

pub fn search(a: SearchArgs) -> Result<()> {
    a.engine.init_threads()?;
    let cfg = a.engine.config()?;
    let p = cfg.precision;
    let unit_bits = a.engine.unit_bits;
    let units = split_range(cfg.function, p, &a.from, &a.to, unit_bits)?;
    let (lo, hi) = parse_range(p, &a.from, &a.to)?;
    let total: u64 = units.iter().map(|u| u.count).sum();
    let bar = if a.quiet {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {percent}% of {human_len} arguments, eta {eta}",
            )
            .expect("valid template"),
        );
        b
    };
    let start = Instant::now();
    let result = search_units(&cfg, &units, &Cpu, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    let elapsed = start.elapsed().as_secs_f64();
    let mut out = std::io::stdout().lock();
    let from = float_to_hex(&lo);
    let to = float_to_hex(&hi);
    match a.output {
        Output::Json => {
            let v = json!({
                "function": cfg.function.name(),
                "precision": p.bits(),
                "format": p.name(),
                "min_bits": cfg.min_bits,
                "test": cfg.test.name(),
                "backend": "cpu",
                "from": from,
                "to": to,
                "arguments": result.arguments,
                "stats": result.stats,
                "hr_cases": result.hr_cases,
                "exact_cases": result.exact_cases,
                "timings": result.timings,
                "elapsed_s": elapsed,
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Output::Csv => {
            writeln!(out, "x,bits,neg_log2_d,kind,rounded")?;
            for c in &result.hr_cases {
                writeln!(
                    out,
                    "{},{},{},{},{}",
                    c.x,
                    c.bits,
                    c.neg_log2_d,
                    c.kind.as_str(),
                    c.rounded
                )?;
            }
        }
        Output::Wc => {
            writeln!(
                out,
                "# {} {} [{from}, {to}) at least {} identical bits after the rounding bit",
                cfg.function,
                p.name(),
                cfg.min_bits
            )?;
            for c in &result.hr_cases {
                writeln!(out, "{}", c.x)?;
            }
        }
        Output::Table => {
            writeln!(
                out,
                "{}({}) on [{from}, {to}): {} arguments, at least {} bits",
                cfg.function,
                p.name(),
                result.arguments,
                cfg.min_bits
            )?;
            writeln!(
                out,
                "{:<28} {:>5} {:>10} {:>4}  rounded",
                "x", "bits", "-log2 d", "kind"
            )?;
            for c in &result.hr_cases {
                writeln!(
                    out,
                    "{:<28} {:>5} {:>10.4} {:>4}  {}",
                    c.x,
                    c.bits,
                    c.neg_log2_d,
                    c.kind.as_str(),
                    c.rounded
                )?;
            }
            for e in &result.exact_cases {
                writeln!(out, "exact: {}({}) = {}", cfg.function, e.x, e.value)?;
            }
            write_stats(&mut out, &result.stats)?;
            writeln!(
                out,
                "{} HR-cases, {} exact cases in {elapsed:.2} s",
                result.hr_cases.len(),
                result.exact_cases.len()
            )?;
        }
    }
    Ok(())
}

fn write_stats(out: &mut impl Write, s: &Stats) -> Result<()> {
    writeln!(
        out,
        "units {}  domains {}  phase-1 failures {}  subdomains {}  phase-2 failures {}  phase-3 arguments {}  candidates {}  false positives {}  exhaustive arguments {}",
        s.units,
        s.domains,
        s.phase1_failures,
        s.subdomains,
        s.phase2_failures,
        s.phase3_arguments,
        s.candidates,
        s.false_positives,
        s.exhaustive_arguments
    )?;
    Ok(())
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Number of consecutive units to time, from the start of the binade.
    #[arg(long, default_value_t = 2)]
    pub units: u64,
    /// The binade's lower end (default 0x1p+0: the binade [1, 2)).
    #[arg(long, default_value = "0x1p+0", allow_hyphen_values = true)]
    pub binade: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn bench(a: BenchArgs) -> Result<()> {
    a.engine.init_threads()?;
    let cfg = a.engine.config()?;
    let p = cfg.precision;
    let u = a.engine.unit_bits.unwrap_or_else(|| default_unit_bits(p));
    if a.units == 0 {
        bail!("--units must be at least 1");
    }
    let start = parse_number(&a.binade, p.bits(), rug::float::Round::Nearest)?;
    let mut end = start.clone();
    end <<= 1;
    let units = split_range(cfg.function, p, &a.binade, &float_to_hex(&end), Some(u))?;
    if (units.len() as u64) < a.units {
        bail!(
            "the binade holds only {} units of 2^{u} arguments",
            units.len()
        );
    }
    let mut stats = Stats::default();
    let mut timings = Timings::default();
    let mut per_unit = Vec::new();
    let cpu0 = process_cpu_seconds();
    let t0 = Instant::now();
    // Units run one after the other, each on all threads, so per-phase times are wall times.
    for unit in units.iter().take(a.units as usize) {
        let t = Instant::now();
        let r = search_unit(&cfg, *unit, &Cpu)?;
        per_unit.push(t.elapsed().as_secs_f64());
        stats.add(&r.stats);
        timings.add(&r.timings);
    }
    let wall = t0.elapsed().as_secs_f64();
    // CPU time of this process: the per-core cost, unaffected by other processes' load.
    let cpu = match (cpu0, process_cpu_seconds()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let args = a.units as f64 * (1u64 << u) as f64;
    let threads = rayon::current_num_threads();
    let n = a.units as f64;
    let report = json!({
        "function": cfg.function.name(),
        "format": p.name(),
        "min_bits": cfg.min_bits,
        "test": cfg.test.name(),
        "unit_bits": u,
        "units": a.units,
        "threads": threads,
        "wall_s": wall,
        "units_per_s": n / wall,
        "arguments_per_s": args / wall,
        "seconds_per_unit": wall / n,
        "core_seconds_per_unit": wall * threads as f64 / n,
        "cpu_seconds_per_unit": cpu.map(|c| c / n),
        "phase_s_per_unit": {
            "generation": timings.generation_s / n,
            "phase1": timings.phase1_s / n,
            "phase2": timings.phase2_s / n,
            "phase3": timings.phase3_s / n,
            "verification": timings.verification_s / n,
            "exhaustive": timings.exhaustive_s / n,
        },
        "stats": stats,
        "per_unit_s": per_unit,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} {} k={} test={} U={u} threads={threads}: {} units in {wall:.3} s",
            cfg.function,
            p.name(),
            cfg.min_bits,
            cfg.test.name(),
            a.units
        );
        println!(
            "  {:.4} units/s, {:.4e} arguments/s, {:.3} s per unit ({:.3} core-s per unit)",
            n / wall,
            args / wall,
            wall / n,
            wall * threads as f64 / n
        );
        if let Some(c) = cpu {
            println!("  {:.3} CPU-s per unit (process CPU time)", c / n);
        }
        println!(
            "  per unit: generation {:.4} s, phase 1 {:.4} s, phase 2 {:.4} s, phase 3 {:.4} s, verification {:.4} s",
            timings.generation_s / n,
            timings.phase1_s / n,
            timings.phase2_s / n,
            timings.phase3_s / n,
            timings.verification_s / n
        );
        let mut out = std::io::stdout().lock();
        write!(out, "  ")?;
        write_stats(&mut out, &stats)?;
    }
    Ok(())
}

/// User plus system CPU time of this process, from `/proc/self/stat` (Linux; `None` elsewhere).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Linux reports clock ticks; USER_HZ is 100 on every mainstream architecture.
    Some((utime + stime) / 100.0)
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The argument, C99 hex or decimal (decimal is rounded to nearest in the format).
    #[arg(allow_hyphen_values = true)]
    pub x: String,
}

pub fn eval(a: EvalArgs) -> Result<()> {
    let p = a.engine.precision()?;
    let x = parse_number(&a.x, p.bits(), rug::float::Round::Nearest)?;
    let hex = float_to_hex(&x);
    let (y, _) = a.engine.function.eval(&x, 200);
    println!("x = {hex}");
    println!("{}(x) = {} (200 bits)", a.engine.function, float_to_hex(&y));
    match verify_case(a.engine.function, p, a.engine.min_bits, &hex)? {
        Verdict::Hard(c) => println!(
            "hard: {} identical bits after the rounding bit (-log2 d = {:.4}), near a {}, rounded {}",
            c.bits,
            c.neg_log2_d,
            if c.kind == tmd_kernels::verify::Kind::Fp { "floating-point number" } else { "midpoint" },
            c.rounded
        ),
        Verdict::NotHard { bits } => println!(
            "not hard at {} bits: {bits} identical bits after the rounding bit",
            a.engine.min_bits
        ),
        Verdict::Exact(e) => println!("exact: {}(x) = {}", a.engine.function, e.value),
    }
    Ok(())
}
