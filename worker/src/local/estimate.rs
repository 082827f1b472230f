//! `tmd-worker estimate`: a campaign's cost before it is run. A seeded random sample of the
//! plan's units, stratified by binade (the cost per unit varies by orders of magnitude from one
//! binade to the next and little within one), runs on this machine's back end through the
//! search's own path (`search_unit`); each binade's total time and HR-cases are projected
//! from its sample with the finite-population correction (`stats.rs`), and written as the
//! coordinator's `tmd_wire::CostEstimate`.

use super::*;
use crate::local::plan::RangeArgs;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::HashMap;
use tmd_kernels::plan::UnitSpec;
use tmd_wire::{BinadeCost, CostEstimate, COST_ESTIMATE_VERSION};

#[path = "estimate_stats.rs"]
pub mod stats;
use stats::{allocate, project, Sampled};

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum EstimateOutput {
    /// A table for people.
    Table,
    /// The coordinator's CostEstimate (`tmd_wire::CostEstimate`) as JSON.
    Json,
}

#[derive(Args, Debug)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub range: RangeArgs,
    /// Units sampled in each binade at least (every unit of a binade that has fewer).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub samples: u64,
    /// Seed of the sample: the same seed, plan and back end sample the same units.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seconds to go on sampling after the first round, where one more unit shrinks the
    /// uncertainty of the total time most per second it costs (0: the first round only).
    #[arg(long, default_value_t = 0.0)]
    pub budget: f64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = EstimateOutput::Table)]
    pub output: EstimateOutput,
    /// Write the output to this file instead of standard output (with `--output json`, the
    /// table is still printed on standard output).
    #[arg(long, short = 'o')]
    pub output_file: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// One binade of the plan: its units that run something (a unit larger than `2^U` is a block
/// the plan collapsed, every argument skipped, and a unit the search would list as one
/// skipped run is the same: they cost nothing and are not sampled), the
/// order its sample is drawn in, and what the sample measured.
struct Stratum {
    negative: bool,
    exponent: i32,
    /// Every unit of the plan in this binade.
    units: u64,
    /// Their arguments, collapsed blocks included.
    arguments: u128,
    /// The units that may be sampled.
    pool: Vec<UnitSpec>,
    /// Indices into `pool` in the order they are sampled (a seeded random permutation's
    /// prefix, long enough for any budget).
    order: Vec<usize>,
    /// Machine seconds (unscaled wall time) and HR-cases of each sampled unit.
    seconds: Vec<f64>,
    hr_cases: Vec<f64>,
    /// sinpi, cospi and tanpi: the search of the binade's first period, which a process does
    /// once and its units then copy (`search::periodic`): timed apart from the units, and
    /// added once to the binade's cost.
    period_seconds: f64,
}

/// Most units one binade may sample: the permutation drawn for it is this long at most.
const MAX_PER_BINADE: usize = 4096;

/// The plan's binades as strata. A unit whose search would only list it as one skipped run
/// (overflow, underflow, a trivial or exact region) costs nothing: it is not sampled, as a
/// collapsed block is not. A range's plan does not collapse them, and where they are most of a
/// binade a small sample may draw only them: exp on [512, 1024) in units of 2^44 (153 of 256
/// overflow) was estimated at 3e-5 s a unit from 3 such draws, against about 0.4 s. Functions
/// with poles keep every unit (a pole is one argument, and finding it costs a bisection).
/// `check`: look for such units (a range's plan); `None` for a whole function's plan, which
/// collapses them already.
fn strata(
    units: &[UnitSpec],
    unit_bits: u32,
    seed: u64,
    check: Option<&SearchConfig>,
) -> Vec<Stratum> {
    // A range's units asked by runs (`collapse::skipped_whole_each`): one by one, a plan of
    // 33 million units took 6.6 minutes of 2 cores.
    let skipped = match check {
        Some(c) => tmd_kernels::plan::collapse::skipped_whole_each(
            c.function,
            c.format(),
            c.min_bits,
            units,
        ),
        None => vec![false; units.len()],
    };
    let free: Vec<bool> = units
        .iter()
        .zip(skipped)
        .map(|(u, skipped)| u.count > 1u64 << unit_bits || skipped)
        .collect();
    let mut index: HashMap<(bool, i32), usize> = HashMap::new();
    let mut out: Vec<Stratum> = Vec::new();
    for (u, free) in units.iter().zip(free) {
        let i = *index.entry((u.negative, u.exponent)).or_insert_with(|| {
            out.push(Stratum {
                negative: u.negative,
                exponent: u.exponent,
                units: 0,
                arguments: 0,
                pool: Vec::new(),
                order: Vec::new(),
                seconds: Vec::new(),
                hr_cases: Vec::new(),
                period_seconds: 0.0,
            });
            out.len() - 1
        });
        out[i].units += 1;
        out[i].arguments += u128::from(u.count);
        if !free {
            out[i].pool.push(*u);
        }
    }
    for s in &mut out {
        // Each binade's own generator: its sample does not depend on the other binades.
        let key = (u64::from(s.negative) << 32) ^ (s.exponent as u32 as u64);
        let mut rng = StdRng::seed_from_u64(seed ^ key.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let n = s.pool.len();
        s.order = rand::seq::index::sample(&mut rng, n, n.min(MAX_PER_BINADE)).into_vec();
    }
    out
}

/// Runs `picks` (stratum, unit) on the back end as `search` runs units (concurrently), one
/// binade at a time; records each unit's share of the machine and its HR-cases. Returns the
/// walls summed: (the binades' batches, their units').
///
/// A unit's share is its wall time scaled by its binade's batch wall over the sum of that
/// batch's unit walls. Batches of one binade keep a cheap unit from being charged for the
/// expensive units it ran beside: a whole-function sample in one batch made a binade's
/// projection 0.5 to 1.7 times its measured time on one H100 (docs/benchmarks-history.md).
fn run_batch(
    cfg: &SearchConfig,
    backend: &dyn Backend,
    strata: &mut [Stratum],
    picks: &[(usize, UnitSpec)],
    progress: &mut (dyn FnMut(usize) + Send),
) -> Result<(f64, f64)> {
    let done = std::sync::atomic::AtomicUsize::new(0);
    let tick = Mutex::new(progress);
    let (mut batches, mut units) = (0.0, 0.0);
    for group in picks.chunk_by(|a, b| a.0 == b.0) {
        // The binade's first period before its units, one search of it (side by side, each
        // unit would search it and time it).
        for &(s, unit) in group {
            if let Some(secs) = tmd_kernels::search::warm_period(cfg, unit, backend)? {
                strata[s].period_seconds += secs;
            }
        }
        let t0 = Instant::now();
        let results: Vec<Result<(f64, usize)>> = group
            .par_iter()
            .map(|&(_, unit)| {
                let t = Instant::now();
                let r = search_unit(cfg, unit, backend)?;
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                (tick.lock().unwrap_or_else(|e| e.into_inner()))(n);
                Ok((t.elapsed().as_secs_f64(), r.hr_cases.len()))
            })
            .collect();
        let wall = t0.elapsed().as_secs_f64();
        let results = results.into_iter().collect::<Result<Vec<_>>>()?;
        let walls: f64 = results.iter().map(|r| r.0).sum();
        let share = if walls > 0.0 { wall / walls } else { 1.0 };
        for (&(s, _), (secs, hr)) in group.iter().zip(results) {
            strata[s].seconds.push(secs * share);
            strata[s].hr_cases.push(hr as f64);
        }
        batches += wall;
        units += walls;
    }
    Ok((batches, units))
}

/// The next units of each stratum's order, `take[s]` of them.
fn picks(strata: &[Stratum], take: &[usize]) -> Vec<(usize, UnitSpec)> {
    let mut out = Vec::new();
    for (s, (st, &k)) in strata.iter().zip(take).enumerate() {
        let have = st.seconds.len();
        for &i in st.order.iter().skip(have).take(k) {
            out.push((s, st.pool[i]));
        }
    }
    out
}

/// Compiles the GPU modules the sample needs before anything is timed: a fresh machine's
/// first unit of each kind would otherwise time NVRTC.
fn warm_up(cfg: &SearchConfig, engine: &Engine, sample: &[(usize, UnitSpec)]) -> Result<()> {
    let Engine::Cuda(c) = engine else {
        return Ok(());
    };
    let mut modules: Vec<(usize, usize)> = sample
        .par_iter()
        .flat_map_iter(|&(_, u)| tmd_kernels::search::piece_modules(cfg, u))
        .collect();
    modules.sort_unstable();
    modules.dedup();
    let mut arches: Vec<String> = c
        .ordinals()
        .iter()
        .filter_map(|&d| cuda::device_arch(d).ok())
        .collect();
    arches.sort();
    arches.dedup();
    cuda::warm_up(&arches, &modules).context("compiling the sample's GPU modules")?;
    Ok(())
}

pub fn estimate(a: EstimateArgs) -> Result<()> {
    a.engine.init_threads()?;
    let cfg = a.engine.config()?;
    // Without --unit-bits, the size the coordinator would give the campaign: the estimate
    // then weighs the very units it will lease, and a range too wide for the default size
    // is sampled at a larger one instead of refused.
    let unit_bits = match a.engine.unit_bits {
        Some(u) => u,
        None => {
            let c = a.range.campaign_unit_bits(&cfg)?;
            if !a.quiet {
                eprintln!("tmd: {}", c.reason);
            }
            c.unit_bits
        }
    };
    // A campaign derives what the reduction covers, as a local search does (one created with
    // --no-reduction is estimated with --no-reduction): the same plan either way.
    let planned = a.range.plan(&cfg, Some(unit_bits), true)?;
    let check = (!a.range.whole).then_some(&cfg);
    let mut strata = strata(&planned.units, unit_bits, a.seed, check);
    let engine = a.engine.backend()?;
    let backend = engine.backend();
    let first: Vec<usize> = strata
        .iter()
        .map(|s| s.order.len().min(a.samples as usize))
        .collect();
    let batch = picks(&strata, &first);
    if !a.quiet {
        eprintln!(
            "tmd: estimate of {}({}) on [{}, {}): {} units in {} binades; sampling {} units",
            cfg.function,
            cfg.format().name(),
            planned.from,
            planned.to,
            planned.units.len(),
            strata.len(),
            batch.len()
        );
    }
    let t = Instant::now();
    warm_up(&cfg, &engine, &batch)?;
    if !a.quiet && matches!(engine, Engine::Cuda(_)) {
        eprintln!(
            "tmd: GPU modules ready in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let started = Instant::now();
    let mut last_line = Instant::now();
    let quiet = a.quiet;
    let mut sampled = 0usize;
    let mut line = |round: usize, n: usize, of: usize, sampled: usize| {
        if !quiet && (last_line.elapsed() >= Duration::from_secs(10) || n == of) {
            eprintln!(
                "tmd: round {round}: {n}/{of} units, {} sampled in all, {:.0} s",
                sampled + n,
                started.elapsed().as_secs_f64()
            );
            last_line = Instant::now();
        }
    };
    let of = batch.len();
    let (mut wall, mut unit_walls) = run_batch(&cfg, backend, &mut strata, &batch, &mut |n| {
        line(1, n, of, sampled)
    })?;
    sampled += batch.len();
    // More rounds within the budget: one unit per thread (at least 8) each round, where it
    // shrinks the variance of the total most per second.
    let per_round = rayon::current_num_threads().max(8);
    let mut round = 1;
    while started.elapsed().as_secs_f64() < a.budget {
        let state: Vec<Sampled> = strata
            .iter()
            .map(|s| Sampled {
                pool: s.pool.len() as u64,
                available: s.order.len() - s.seconds.len(),
                xs: s.seconds.clone(),
            })
            .collect();
        let take = allocate(&state, per_round);
        let batch = picks(&strata, &take);
        if batch.is_empty() {
            break;
        }
        round += 1;
        warm_up(&cfg, &engine, &batch)?;
        let of = batch.len();
        let (w, u) = run_batch(&cfg, backend, &mut strata, &batch, &mut |n| {
            line(round, n, of, sampled)
        })?;
        wall += w;
        unit_walls += u;
        sampled += batch.len();
    }
    // The units' times are already their shares of the machine (`run_batch`); `share` is how
    // concurrently they ran, for the table.
    let share = if unit_walls > 0.0 {
        wall / unit_walls
    } else {
        1.0
    };
    let est = build(&cfg, unit_bits, a.seed, backend.name(), &strata, 1.0);
    let text = match a.output {
        EstimateOutput::Json => format!("{}\n", serde_json::to_string_pretty(&est)?),
        EstimateOutput::Table => table(&est, &engine, &planned, share),
    };
    match &a.output_file {
        Some(path) => {
            replace_file(path, text.as_bytes(), false)
                .with_context(|| format!("writing {}", path.display()))?;
            if !a.quiet {
                eprintln!("tmd: estimate written to {}", path.display());
            }
            // The JSON for the coordinator in the file, the table for people on stdout.
            if a.output == EstimateOutput::Json {
                let t = table(&est, &engine, &planned, share);
                std::io::stdout().lock().write_all(t.as_bytes())?;
            }
        }
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(())
}

/// The estimate in the coordinator's terms.
fn build(
    cfg: &SearchConfig,
    unit_bits: u32,
    seed: u64,
    backend: String,
    strata: &[Stratum],
    share: f64,
) -> CostEstimate {
    let mut binades = Vec::with_capacity(strata.len());
    let (mut t, mut t_var, mut h, mut h_var) = (0.0, 0.0, 0.0, 0.0);
    for s in strata {
        let secs: Vec<f64> = s.seconds.iter().map(|x| x * share).collect();
        let pool = s.pool.len() as u64;
        let mut time = project(pool, &secs);
        time.total += s.period_seconds * share;
        let hr = project(pool, &s.hr_cases);
        let per = |x: f64| {
            if s.units == 0 {
                0.0
            } else {
                x / s.units as f64
            }
        };
        binades.push(BinadeCost {
            negative: s.negative,
            exponent: s.exponent,
            units: s.units,
            sampled: s.seconds.len() as u64,
            seconds_per_unit: per(time.total),
            seconds_per_unit_stderr: per(time.stderr),
            expected_hr_cases: hr.total,
            expected_hr_cases_stderr: hr.stderr,
            arguments: Some(s.arguments.to_string()),
        });
        t += time.total;
        t_var += time.stderr * time.stderr;
        h += hr.total;
        h_var += hr.stderr * hr.stderr;
    }
    CostEstimate {
        version: COST_ESTIMATE_VERSION,
        function: cfg.function.name().to_string(),
        format: cfg.format().name(),
        min_bits: cfg.min_bits,
        unit_bits,
        backend,
        seed,
        binades,
        total_seconds: t,
        total_seconds_stderr: t_var.sqrt(),
        total_hr_cases: h,
        total_hr_cases_stderr: h_var.sqrt(),
    }
}

/// `[2^e, 2^(e+1))` or its negative, for people.
fn binade_name(negative: bool, exponent: i32) -> String {
    if negative {
        format!("-[2^{exponent},2^{})", exponent + 1)
    } else {
        format!("[2^{exponent},2^{})", exponent + 1)
    }
}

fn table(est: &CostEstimate, engine: &Engine, planned: &plan::Planned, share: f64) -> String {
    let mut out = String::new();
    let push = |out: &mut String, s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    push(
        &mut out,
        format!(
            "estimate of {}({}) on [{}, {}) at {} bits, units of 2^{}, seed {}",
            est.function,
            est.format,
            planned.from,
            planned.to,
            est.min_bits,
            est.unit_bits,
            est.seed
        ),
    );
    push(&mut out, format!("back end {}", est.backend));
    push(
        &mut out,
        format!(
            "{:<22} {:>9} {:>7} {:>22} {:>24} {:>22}",
            "binade", "units", "sampled", "s/unit", "seconds", "HR-cases"
        ),
    );
    for b in &est.binades {
        let total = b.seconds_per_unit * b.units as f64;
        let total_se = b.seconds_per_unit_stderr * b.units as f64;
        push(
            &mut out,
            format!(
                "{:<22} {:>9} {:>7} {:>22} {:>24} {:>22}",
                binade_name(b.negative, b.exponent),
                b.units,
                b.sampled,
                pm(b.seconds_per_unit, b.seconds_per_unit_stderr),
                pm(total, total_se),
                pm(b.expected_hr_cases, b.expected_hr_cases_stderr)
            ),
        );
    }
    push(
        &mut out,
        format!(
            "total: {} units, {} sampled; projected {} s ({} h) on this machine; {} HR-cases \
             (± one standard error; units ran {:.2}x concurrent)",
            est.binades.iter().map(|b| b.units).sum::<u64>(),
            est.binades.iter().map(|b| b.sampled).sum::<u64>(),
            pm(est.total_seconds, est.total_seconds_stderr),
            pm(
                est.total_seconds / 3600.0,
                est.total_seconds_stderr / 3600.0
            ),
            pm(est.total_hr_cases, est.total_hr_cases_stderr),
            1.0 / share
        ),
    );
    if planned.derivation.derives() {
        push(
            &mut out,
            format!(
                "derived instead of searched: {} arguments in {} runs (their cases are judged \
                 by MPFR after the search, not in the projection; --no-reduction weighs them)",
                planned.derivation.derived_arguments(),
                planned.derivation.runs.len()
            ),
        );
    }
    if let Some(n) = h100s(engine, &est.backend) {
        push(
            &mut out,
            format!(
                "H100-hours: {} (measured on {n} H100)",
                pm(
                    est.total_seconds * n as f64 / 3600.0,
                    est.total_seconds_stderr * n as f64 / 3600.0
                )
            ),
        );
    }
    out
}

/// The number of GPUs when every one is an H100 (the back end's name lists each device's
/// name); `None` otherwise.
fn h100s(engine: &Engine, name: &str) -> Option<usize> {
    let Engine::Cuda(c) = engine else {
        return None;
    };
    let n = c.ordinals().len();
    (n > 0 && name.matches("H100").count() == n).then_some(n)
}

/// `x ± e` with 4 significant digits.
fn pm(x: f64, e: f64) -> String {
    format!("{} ± {}", sig(x), sig(e))
}

fn sig(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 1e5 || x.abs() < 1e-3 {
        format!("{x:.3e}")
    } else {
        format!(
            "{:.*}",
            (3 - x.abs().log10().floor() as i32).max(0) as usize,
            x
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmd_kernels::oracle::function::Function;

    /// exp in binary32 on [64, 128) overflows from 88.72 on: the units wholly above are not
    /// sampled, the one that straddles it and those below are, and every unit still counts in
    /// its binade's units and arguments.
    #[test]
    fn units_the_search_would_skip_whole_are_not_sampled() {
        let fmt = Format::named("binary32").unwrap();
        let cfg = SearchConfig::in_format(Function::Exp, fmt, 20);
        let units = split_range_in(Function::Exp, fmt, "0x1p+6", "0x1p+7", Some(16)).unwrap();
        assert_eq!(units.len(), 128);
        let s = strata(&units, 16, 1, Some(&cfg));
        assert_eq!(strata(&units, 16, 1, None)[0].pool.len(), 128);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].units, 128);
        assert_eq!(s[0].arguments, 1 << 23);
        // 88.72 is 0x1.62e43p+6: units of 2^16 significands are 2^-1 wide here, so the units
        // from 89 on (the 50th) overflow whole; 88.5 to 89 straddles.
        let overflow = |u: &UnitSpec| {
            let x = (u.first as f64) * 2f64.powi(6 - 23);
            x >= 89.0
        };
        assert!(
            s[0].pool.iter().all(|u| !overflow(u)),
            "{:?}",
            s[0].pool.last()
        );
        assert_eq!(
            s[0].pool.len(),
            units.iter().filter(|u| !overflow(u)).count()
        );
        assert_eq!(s[0].pool.len(), 50);
        assert!(s[0].order.iter().all(|&i| i < 50));
    }
}
