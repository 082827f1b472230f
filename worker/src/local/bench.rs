//! `tmd-worker bench`: units timed on a back end, start-up apart from the steady state, and
//! the bare loop of the regular test in the same run.

use super::*;
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::progression;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Number of consecutive units to time, from the start of the binade.
    #[arg(long, default_value_t = 2)]
    pub units: u64,
    /// The binade's end nearer 0 (default 0x1p+0: the binade [1, 2); -0x1p+8: [-512, -256),
    /// its units timed from -256 outwards).
    #[arg(long, default_value = "0x1p+0", allow_hyphen_values = true)]
    pub binade: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run the timed units concurrently (as `search` does) instead of one after the other: the
    /// steady-state throughput of a back end that overlaps units (the GPU's slots); the phase
    /// times are then summed over units that ran at the same time.
    #[arg(long)]
    pub concurrent: bool,
    /// Also time the bare loop of the regular test (random slopes and offsets, no walk, no
    /// other phase) on one core, in this run, and report the unit's cost per core against it.
    #[arg(long)]
    pub bare_loop: bool,
    /// Domains of the bare loop.
    #[arg(long, default_value_t = 1 << 25)]
    pub bare_domains: u64,
    /// Time only the host's generation of the first unit's pieces along progressions (sin,
    /// cos, tan and the like far out), nothing walked, on 1, 2, 4, ... threads up to
    /// `--threads`: pieces per second and each count's efficiency against one thread. What
    /// holds a GPU's walk there is how fast the host's cores make its pieces.
    #[arg(long)]
    pub generation_only: bool,
    /// Batches of initial pieces (2,048 each) timed at each thread count by
    /// `--generation-only`.
    #[arg(long, default_value_t = 8)]
    pub generation_batches: u64,
}

pub fn bench(a: BenchArgs) -> Result<()> {
    a.engine.init_threads()?;
    let cfg = a.engine.config()?;
    let p = cfg.precision;
    let u = a.engine.unit_bits.unwrap_or_else(|| default_unit_bits(p));
    if a.units == 0 {
        bail!("--units must be at least 1");
    }
    let units = binade_units(&a, &cfg, u)?;
    let units = &units[..a.units as usize];
    if a.generation_only {
        return generation_scaling(&cfg, units[0], a.generation_batches, a.json);
    }

    // Start-up, apart from the steady state: opening the back end (GPU contexts), then one
    // warm-up unit (NVRTC compiles or loads the kernel modules on their first use, rayon starts
    // its threads, MPFR fills its caches). The warm-up unit is the first timed unit, run once
    // more; its excess over the steady per-unit time is start-up too.
    let t = Instant::now();
    let engine = a.engine.backend()?;
    let backend = engine.backend();
    let open_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    search_unit(&cfg, units[0], backend)?;
    let warmup_s = t.elapsed().as_secs_f64();

    let cpu0 = process_cpu_seconds();
    let t0 = Instant::now();
    let (per_unit, stats, timings) = time_units(&cfg, units, backend, a.concurrent)?;
    let wall = t0.elapsed().as_secs_f64();
    // CPU time of this process: the per-core cost, unaffected by other processes' load.
    let cpu = match (cpu0, process_cpu_seconds()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let args = a.units as f64 * (1u64 << u) as f64;
    let threads = rayon::current_num_threads();
    let n = a.units as f64;
    let startup_s = open_s + (warmup_s - wall / n).max(0.0);

    // The bare loop on one core, with the first unit's domain size and phase-1 threshold.
    let bare = if a.bare_loop {
        // The unit's cost per core, to set against the bare loop's.
        let per_unit_core_s = cpu.map_or(wall * threads as f64, |c| c) / n;
        let unit_domains = stats.domains as f64 / n;
        Some(bare(
            &cfg,
            units[0],
            a.bare_domains,
            per_unit_core_s,
            unit_domains,
        )?)
    } else {
        None
    };

    let report = json!({
        "function": cfg.function.name(),
        "format": cfg.format().name(),
        "min_bits": cfg.min_bits,
        "test": cfg.test.name(),
        "backend": backend.name(),
        "unit_bits": u,
        "units": a.units,
        "threads": threads,
        "concurrent": a.concurrent,
        "startup": {
            "open_s": open_s,
            "warmup_unit_s": warmup_s,
            "startup_s": startup_s,
        },
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
        "bare_loop": bare,
        "gpu_memory": engine.gpu_memory(),
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} {} k={} test={} U={u} threads={threads} backend={}: {} units in {wall:.3} s{}",
            cfg.function,
            cfg.format().name(),
            cfg.min_bits,
            cfg.test.name(),
            backend.name(),
            a.units,
            if a.concurrent { " (concurrent)" } else { "" }
        );
        println!(
            "  start-up {startup_s:.3} s (back end {open_s:.3} s, warm-up unit {warmup_s:.3} s), not counted below"
        );
        println!(
            "  steady state: {:.4} units/s, {:.4e} arguments/s, {:.4} s per unit ({:.3} core-s per unit)",
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
        if let Some(b) = &bare {
            println!(
                "  bare loop (one core, {} random domains of {} arguments): {:.3} CPU-s, {:.1} ns per domain; a unit's CPU-s over the bare loop's for its domains: {:.3}",
                b["domains"], b["domain_arguments"], b["cpu_seconds"].as_f64().unwrap_or(0.0),
                b["ns_per_domain"].as_f64().unwrap_or(0.0),
                b["unit_core_s_over_bare"].as_f64().unwrap_or(0.0)
            );
        }
        let mut out = std::io::stdout().lock();
        write!(out, "  ")?;
        write_stats(&mut out, &stats)?;
        for line in engine.memory_lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// The first units of `--binade` (all of them, at least `--units`), in units of `2^u`
/// arguments: from the end nearer 0 outwards.
fn binade_units(a: &BenchArgs, cfg: &SearchConfig, u: u32) -> Result<Vec<UnitSpec>> {
    let start = parse_number(&a.binade, cfg.precision.bits(), rug::float::Round::Nearest)?;
    let mut end = start.clone();
    end <<= 1;
    let mut units = if start.is_sign_negative() {
        split_range_in(
            cfg.function,
            cfg.format(),
            &float_to_hex(&end),
            &a.binade,
            Some(u),
        )?
    } else {
        split_range_in(
            cfg.function,
            cfg.format(),
            &a.binade,
            &float_to_hex(&end),
            Some(u),
        )?
    };
    if start.is_sign_negative() {
        // [2 start, start) holds 2 start itself, of the next binade: only the binade's units,
        // those nearest the given end first.
        let e = units.last().map(|x| x.exponent);
        units.retain(|x| Some(x.exponent) == e);
        units.sort_by_key(|x| x.first);
    }
    if (units.len() as u64) < a.units {
        bail!(
            "the binade holds only {} units of 2^{u} arguments",
            units.len()
        );
    }
    Ok(units)
}

/// Times `units` on `backend`, one after the other or concurrently: each unit's seconds, and
/// the summed statistics and phase times.
fn time_units(
    cfg: &SearchConfig,
    units: &[UnitSpec],
    backend: &dyn Backend,
    concurrent: bool,
) -> Result<(Vec<f64>, Stats, Timings)> {
    let mut stats = Stats::default();
    let mut timings = Timings::default();
    let per_unit: Vec<f64> = if concurrent {
        let results: Vec<Result<(f64, UnitResult)>> = units
            .par_iter()
            .map(|&unit| {
                let t = Instant::now();
                let r = search_unit(cfg, unit, backend)?;
                Ok((t.elapsed().as_secs_f64(), r))
            })
            .collect();
        let mut per_unit = Vec::new();
        for r in results {
            let (s, r) = r?;
            per_unit.push(s);
            stats.add(&r.stats);
            timings.add(&r.timings);
        }
        per_unit
    } else {
        // One after the other, each on all threads, so per-phase times are wall times.
        let mut per_unit = Vec::new();
        for unit in units {
            let t = Instant::now();
            let r = search_unit(cfg, *unit, backend)?;
            per_unit.push(t.elapsed().as_secs_f64());
            stats.add(&r.stats);
            timings.add(&r.timings);
        }
        per_unit
    };
    Ok((per_unit, stats, timings))
}

/// The bare loop of the regular test on one core over `domains` random domains, with `unit`'s
/// domain size and phase-1 threshold; set against a unit's cost per core
/// (`per_unit_core_s`, over `unit_domains` domains).
fn bare(
    cfg: &SearchConfig,
    unit: UnitSpec,
    domains: u64,
    per_unit_core_s: f64,
    unit_domains: f64,
) -> Result<serde_json::Value> {
    let g = generate(cfg.function, cfg.precision, &cfg.gen, unit)
        .map_err(|e| anyhow::anyhow!("the bare loop takes the first unit's threshold: {e}"))?;
    let t = Instant::now();
    let c0 = process_cpu_seconds();
    let failed = bare_loop(domains, g.domain_size(), g.e1, 15);
    let wall_s = t.elapsed().as_secs_f64();
    // Its CPU time (the thread pool is idle meanwhile): on a loaded machine the wall
    // time says more about the neighbours than about the loop.
    let s = match (c0, process_cpu_seconds()) {
        (Some(a), Some(b)) => b - a,
        _ => wall_s,
    };
    // The unit's cost per core over the bare loop's for as many domains as a unit has.
    let bare_per_unit_s = s * unit_domains / domains as f64;
    Ok(json!({
        "domains": domains,
        "domain_arguments": g.domain_size(),
        "threshold_e1": g.e1,
        "cpu_seconds": s,
        "wall_seconds": wall_s,
        "ns_per_domain": s * 1e9 / domains as f64,
        "failed": failed,
        "seconds_per_unit_domains": bare_per_unit_s,
        "unit_core_s_over_bare": per_unit_core_s / bare_per_unit_s,
    }))
}

/// `unit`'s first `batches` batches of pieces generated along its progressions (nothing
/// walked) on 1, 2, 4, ... threads up to the pool's, each count in its own pool after one
/// untimed batch (its threads started, MPFR's caches filled), and printed.
fn generation_scaling(
    cfg: &SearchConfig,
    unit: UnitSpec,
    batches: u64,
    as_json: bool,
) -> Result<()> {
    let Some(pr) = progression::plan(cfg.function, cfg.precision, unit) else {
        bail!(
            "{} on this unit does not take the progression route (it is taken far out, e.g. \
             --binade 0x1p+100 for sin in binary64): nothing to time",
            cfg.function
        );
    };
    if batches == 0 {
        bail!("--generation-batches must be at least 1");
    }
    let max = rayon::current_num_threads();
    let mut counts: Vec<usize> = std::iter::successors(Some(1), |n| Some(n * 2))
        .take_while(|&n| n < max)
        .collect();
    counts.push(max);
    let mut rows = Vec::new();
    let mut one = None;
    for n in counts {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(n).build()?;
        let (pieces, s) = pool.install(|| {
            progression::generate_only(cfg, unit, pr, 1);
            let t = Instant::now();
            let pieces = progression::generate_only(cfg, unit, pr, batches);
            (pieces, t.elapsed().as_secs_f64())
        });
        let (own, own_s) = pool.install(|| own_shares(cfg, unit, pr, batches, n as u64));
        let rate = pieces as f64 / s;
        let own_rate = own as f64 / own_s;
        let (base, own_base) = *one.get_or_insert((rate, own_rate));
        let efficiency = rate / (base * n as f64);
        let own_efficiency = own_rate / (own_base * n as f64);
        if !as_json {
            println!(
                "{n:>4} threads: {pieces} pieces in {s:.3} s, {rate:.0} pieces/s, {:.1} us a piece a thread, efficiency {efficiency:.2}; each thread on its own: {own_rate:.0} pieces/s, efficiency {own_efficiency:.2}",
                n as f64 * s * 1e6 / pieces as f64,
            );
        }
        rows.push(json!({"threads": n, "pieces": pieces, "seconds": s,
            "pieces_per_s": rate, "efficiency": efficiency,
            "own_pieces_per_s": own_rate, "own_efficiency": own_efficiency}));
    }
    if as_json {
        let report = json!({
            "function": cfg.function.name(), "format": cfg.format().name(),
            "min_bits": cfg.min_bits, "exponent": unit.exponent, "unit_arguments": unit.count,
            "progressions": pr.q, "batches": batches, "generation": rows,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// The control of `generation_scaling`: each of the pool's `n` threads generates its own share
/// of the same initial pieces on its own (its own bases, its pieces dropped where they were
/// made), nothing shared; the pieces made and the seconds.
fn own_shares(
    cfg: &SearchConfig,
    unit: UnitSpec,
    pr: progression::Progressions,
    batches: u64,
    n: u64,
) -> (u64, f64) {
    let per = batches * progression::BATCH / n;
    let t = Instant::now();
    let own: u64 = (0..n)
        .into_par_iter()
        .map(|j| progression::dense_pieces(cfg, unit, pr, j * per..(j + 1) * per).len() as u64)
        .sum();
    (own, t.elapsed().as_secs_f64())
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
