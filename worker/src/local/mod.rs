//! The local commands: `search` (a range, printed as a table, JSON, CSV or a worst-case file),
//! `bench` (whole units, timed per phase) and `eval` (one argument through MPFR).

mod bench;
mod estimate;
mod journal;
mod plan;
mod single;
mod tally;
pub use bench::{bench, BenchArgs};
pub use estimate::{estimate, EstimateArgs};
pub use single::{eval, selftest, EvalArgs, SelftestArgs};

use crate::state::replace_file;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use journal::Journal;
use rayon::prelude::*;
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tally::Tally;
use tmd_kernels::cuda::{self, human_bytes, Cuda, DeviceMemory, MemoryBudget};
use tmd_kernels::numbers::format::Format;
use tmd_kernels::numbers::format::{float_to_hex, parse_number};
use tmd_kernels::plan::reduce::{derive, Count, Derivation};
use tmd_kernels::plan::{default_unit_bits, split_range_in};
use tmd_kernels::search::existence::{bare_loop, Test};
use tmd_kernels::search::generation::{generate, FLAT_DOMAIN_BITS};
use tmd_kernels::search::{
    search_unit, Backend, Cpu, LatticeRun, RangeResult, SearchConfig, Skipped, Stats, Timings,
    UnitResult, MAX_MIN_BITS,
};
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

/// Where phases 1-3 run.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum BackendArg {
    /// The GPU when one is usable, else the CPU (says which on stderr).
    Auto,
    /// Every core of this machine.
    Cpu,
    /// NVIDIA GPUs through CUDA (see --devices); an error if none is usable.
    Cuda,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// A table for people.
    Table,
    /// The whole result as one JSON object.
    Json,
    /// RFC 4180 csv: a header row, then one HR-case per row (x,bits,neg_log2_d,kind,rounded),
    /// CRLF line ends; the format and the skipped runs are printed on stderr.
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
    /// binary16, bfloat16, binary32, binary64, binary80 (each with its exponent range:
    /// subnormal results on the subnormal grid, overflow and underflow skipped and listed), or
    /// a bare precision in bits, p8 to p64 (exponent unbounded).
    #[arg(long, default_value = "binary64", env = "TMD_FORMAT")]
    pub format: Format,
    /// Overrides --format with a bare precision in bits (8 to 64): exponent unbounded.
    #[arg(long)]
    pub precision: Option<u32>,
    /// Threshold k: report x with at least k identical bits after the rounding bit (1 to 60),
    /// i.e. with d <= 2^-k half-ulps.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=MAX_MIN_BITS as i64))]
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
    /// Domain size n: 2^n arguments per domain where f curves as exp on [1, 2) (the
    /// published 15); lowered where f is steeper (such pieces may be split), raised up to
    /// --flat-domain-bits where it is flatter.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(5..=30))]
    pub domain_bits: u32,
    /// Largest domain size where f is flatter than that (exp below 1, say), and for pieces
    /// under the quadratic screen (exp on [1, 16), say): fewer, larger domains where the
    /// curvature and the screen's points per domain allow. At most --domain-bits: that size
    /// everywhere.
    #[arg(long, default_value_t = FLAT_DOMAIN_BITS, value_parser = clap::value_parser!(u32).range(5..=30))]
    pub flat_domain_bits: u32,
    /// Test every piece with the line alone, the engine's former route: by
    /// default phase 1 screens pieces whose line domains the curvature keeps below
    /// --flat-domain-bits (steep ones, exp on [1, 2)) on larger domains, listing the few
    /// arguments within the line's threshold and checking each against the domain's
    /// quadratic, about 2 times faster there (BENCHMARKS.md). Same HR-cases, other
    /// statistics: for comparisons, and to resume a journal written without the screen.
    #[arg(long)]
    pub no_quadratic_screen: bool,
    /// Where phases 1-3 run: auto (a GPU if usable), cpu or cuda.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto, env = "TMD_BACKEND")]
    pub backend: BackendArg,
    /// CUDA devices to use, e.g. 0,1 (default: every device).
    #[arg(long, value_delimiter = ',', env = "TMD_DEVICES")]
    pub devices: Vec<usize>,
    /// Device memory the GPU back end may use per device: bytes with a unit (8G, 512M) or a
    /// share of the memory free at start (60%). Units with more work than fits are cut into
    /// chunks that do; the budget and the peak are reported.
    #[arg(long, default_value = "auto", env = "TMD_GPU_MEMORY")]
    pub gpu_memory: MemoryBudget,
}

/// The back end a local command computes on.
pub enum Engine {
    Cpu(Cpu),
    Cuda(Cuda),
}

impl Engine {
    pub fn backend(&self) -> &dyn Backend {
        match self {
            Engine::Cpu(c) => c,
            Engine::Cuda(c) => c,
        }
    }

    /// Each GPU's memory budget and the peak of its lists; `None` on the CPU.
    pub fn gpu_memory(&self) -> Option<Vec<DeviceMemory>> {
        match self {
            Engine::Cpu(_) => None,
            Engine::Cuda(c) => Some(c.memory()),
        }
    }

    /// One line per GPU for people: budget and peak.
    fn memory_lines(&self) -> Vec<String> {
        self.gpu_memory()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                format!(
                    "GPU {} memory: peak {} of the lists, budget {} ({} slots; {} free of {} at start)",
                    m.device,
                    human_bytes(m.peak),
                    human_bytes(m.budget),
                    m.slots,
                    human_bytes(m.free_at_open),
                    human_bytes(m.total)
                )
            })
            .collect()
    }
}

impl EngineArgs {
    fn format(&self) -> Result<Format> {
        Ok(match self.precision {
            Some(b) => Format::bare(Precision::new(b)?),
            None => self.format,
        })
    }

    fn config(&self) -> Result<SearchConfig> {
        let mut cfg = SearchConfig::in_format(self.function, self.format()?, self.min_bits);
        cfg.test = self.test.into();
        cfg.gen.domain_bits = self.domain_bits;
        cfg.gen.flat_domain_bits = self.flat_domain_bits;
        cfg.gen.quadratic = !self.no_quadratic_screen;
        Ok(cfg)
    }

    /// The back end the flags ask for; `auto` falls back to the CPU and says so on stderr.
    pub fn backend(&self) -> Result<Engine> {
        let open = || -> Result<Cuda, cuda::CudaError> {
            if self.devices.is_empty() {
                Cuda::all(self.gpu_memory)
            } else {
                Cuda::new(&self.devices, self.gpu_memory)
            }
        };
        let e = match self.backend {
            BackendArg::Cpu => Engine::Cpu(Cpu),
            BackendArg::Cuda => Engine::Cuda(open().context("the CUDA back end")?),
            BackendArg::Auto => match open() {
                Ok(c) => Engine::Cuda(c),
                Err(e) => {
                    eprintln!("tmd: no usable GPU ({e}); using the CPU back end");
                    Engine::Cpu(Cpu)
                }
            },
        };
        eprintln!("tmd: back end {}", e.backend().name());
        Ok(e)
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
    #[command(flatten)]
    pub range: plan::RangeArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Write the output to this file instead of standard output. With csv or wc the cases are
    /// appended as units finish (flushed after each) and sorted when the search ends. A
    /// journal beside it (FILE.journal) records every finished unit, so an interrupted search
    /// keeps what it found: the same command with --resume goes on where it stopped.
    #[arg(long, short = 'o')]
    pub output_file: Option<PathBuf>,
    /// Go on with the interrupted search of --output-file (same settings), computing only the
    /// units its journal does not hold.
    #[arg(long, requires = "output_file")]
    pub resume: bool,
    /// No progress on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Progress of a search on stderr: a bar on a terminal (units done, rate, ETA, cases so far),
/// a line every 10 s otherwise (a log file).
struct Progress {
    bar: ProgressBar,
    plain: Option<Instant>,
    total: u64,
    done: u64,
    done_at_start: u64,
    hr_cases: u64,
    started: Instant,
}

impl Progress {
    fn new(total: u64, done: u64, hr_cases: u64, quiet: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = if quiet || !terminal {
            ProgressBar::hidden()
        } else {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} units, {per_sec}, eta {eta}, {msg}",
                )
                .expect("valid template"),
            );
            b.set_position(done);
            b.reset_eta();
            b.enable_steady_tick(Duration::from_millis(200));
            b
        };
        bar.set_message(format!("{hr_cases} HR-cases"));
        Progress {
            bar,
            plain: (!quiet && !terminal).then(Instant::now),
            total,
            done,
            done_at_start: done,
            hr_cases,
            started: Instant::now(),
        }
    }

    fn unit_done(&mut self, hr_cases: u64) {
        self.done += 1;
        self.hr_cases += hr_cases;
        self.bar.inc(1);
        self.bar.set_message(format!("{} HR-cases", self.hr_cases));
        if let Some(last) = self.plain {
            if last.elapsed() >= Duration::from_secs(10) || self.done == self.total {
                let secs = self.started.elapsed().as_secs_f64();
                let rate = (self.done - self.done_at_start) as f64 / secs.max(1e-9);
                let eta = (self.total - self.done) as f64 / rate.max(1e-9);
                eprintln!(
                    "tmd: {}/{} units, {rate:.2} units/s, eta {eta:.0} s, {} HR-cases",
                    self.done, self.total, self.hr_cases
                );
                self.plain = Some(Instant::now());
            }
        }
    }
}

/// What a search's output names: function, format, threshold, range and derived runs.
struct Described<'a> {
    cfg: &'a SearchConfig,
    from: &'a str,
    to: &'a str,
    derivation: &'a Derivation,
}

/// The search's result with the cases of the derived binades added (judged again by MPFR),
/// in argument order.
fn with_derived(
    cfg: &SearchConfig,
    derivation: &Derivation,
    mut result: RangeResult,
    quiet: bool,
) -> Result<RangeResult> {
    if !derivation.derives() {
        return Ok(result);
    }
    let t = Instant::now();
    let (hard, exact) = derive(
        cfg.function,
        cfg.format(),
        cfg.min_bits,
        derivation,
        &result.hr_cases,
        &result.exact_cases,
    )?;
    if !quiet {
        eprintln!(
            "tmd: {} HR-cases and {} exact cases derived and judged by MPFR in {:.2} s",
            hard.len(),
            exact.len(),
            t.elapsed().as_secs_f64()
        );
    }
    result.hr_cases.extend(hard);
    result.exact_cases.extend(exact);
    Ok(result.finish_in(cfg.format()))
}

/// The first lines of a csv or wc output.
fn write_stream_header(out: &mut dyn Write, kind: Output, d: &Described) -> Result<()> {
    match kind {
        // RFC 4180: the header row and the cases, nothing else (the format and the skipped
        // runs go to stderr: `describe_csv`).
        Output::Csv => write!(out, "x,bits,neg_log2_d,kind,rounded\r\n")?,
        Output::Wc => {
            writeln!(
                out,
                "# {} {} [{}, {}) at least {} identical bits after the rounding bit",
                d.cfg.function,
                d.cfg.format().name(),
                d.from,
                d.to,
                d.cfg.min_bits
            )?;
            writeln!(out, "# format {}", d.cfg.format().describe())?;
            for run in &d.derivation.runs {
                writeln!(out, "# {}", plan::derived_line(run))?;
            }
        }
        Output::Table | Output::Json => {}
    }
    Ok(())
}

/// Skipped arguments as comment lines of a wc output (a csv output's are on stderr).
fn write_stream_skipped<'a>(
    out: &mut dyn Write,
    kind: Output,
    skipped: impl IntoIterator<Item = &'a Skipped>,
) -> Result<()> {
    if matches!(kind, Output::Wc) {
        for s in skipped {
            writeln!(out, "{}", skipped_line("# skipped", s))?;
        }
    }
    Ok(())
}

/// Exact cases counted by their lattice's rule as comment lines of a wc output (a csv
/// output's are on stderr).
fn write_stream_lattices<'a>(
    out: &mut dyn Write,
    kind: Output,
    runs: impl IntoIterator<Item = &'a LatticeRun>,
) -> Result<()> {
    if matches!(kind, Output::Wc) {
        for r in runs {
            writeln!(out, "{}", r.line("# exact"))?;
        }
    }
    Ok(())
}

/// One skipped run for people: `[first, last] (count arguments): reason: rule`.
fn skipped_line(prefix: &str, s: &Skipped) -> String {
    format!(
        "{prefix} [{}, {}] ({} arguments): {}: {}",
        s.first,
        s.last,
        s.count,
        s.reason.as_str(),
        s.rule()
    )
}

/// A unit's cases as csv or wc lines.
fn write_stream_cases<'a>(
    out: &mut dyn Write,
    kind: Output,
    cases: impl IntoIterator<Item = &'a tmd_kernels::oracle::verify::HrCase>,
) -> Result<()> {
    for c in cases {
        match kind {
            Output::Csv => write!(
                out,
                "{},{},{},{},{}\r\n",
                c.x,
                c.bits,
                c.neg_log2_d,
                c.kind.as_str(),
                c.rounded
            )?,
            Output::Wc => writeln!(out, "{}", c.x)?,
            Output::Table | Output::Json => {}
        }
    }
    Ok(())
}

/// Where finished units go while the search runs.
struct Sink {
    journal: Option<Journal>,
    /// The csv or wc output file, appended per unit.
    stream: Option<std::fs::File>,
    /// The finished units added up (not kept one by one: a binade of binary80 is millions).
    tally: Tally,
    format: Format,
    progress: Progress,
}

/// A finished unit's bytes for the output file and its journal line, made by the unit's own
/// thread before it takes the sink's lock: at 32 bits a binary64 unit has about 512 cases,
/// and formatting them under the lock (one `write` per piece of each line, on an unbuffered
/// file) serialised the whole search there (about 4 ms per unit, which was the
/// binade's wall once the GPU was faster).
struct Ready {
    stream: Vec<u8>,
    journal: Option<String>,
}

impl Ready {
    fn new(kind: Output, r: &UnitResult, stream: bool, journal: bool) -> Result<Ready> {
        let mut bytes = Vec::new();
        if stream {
            write_stream_cases(&mut bytes, kind, &r.hr_cases)?;
            write_stream_skipped(&mut bytes, kind, &r.skipped)?;
            write_stream_lattices(&mut bytes, kind, &r.exact_lattice)?;
        }
        let journal = if journal {
            Some(journal::line(r)?)
        } else {
            None
        };
        Ok(Ready {
            stream: bytes,
            journal,
        })
    }
}

impl Sink {
    fn unit_done(&mut self, r: UnitResult, ready: Ready) -> Result<()> {
        let _writing = WRITING.lock().unwrap_or_else(|e| e.into_inner());
        // The output first, the journal second: a crash between them leaves a unit the
        // journal lacks, which a resume computes again and drops from the rebuilt output.
        if let Some(f) = &mut self.stream {
            f.write_all(&ready.stream)?;
            f.flush()?;
        }
        self.progress.unit_done(r.hr_cases.len() as u64);
        self.tally.add(r);
        if let (Some(j), Some(line)) = (&mut self.journal, &ready.journal) {
            j.record_line(line)?;
            if j.wants_compaction() {
                self.tally.finish_in(self.format);
                j.compact(&self.tally)?;
            }
        }
        Ok(())
    }
}

pub fn search(a: SearchArgs) -> Result<()> {
    a.engine.init_threads()?;
    let cfg = a.engine.config()?;
    let p = cfg.precision;
    let plan::Planned {
        units,
        derivation,
        from,
        to,
    } = a.range.plan(&cfg, a.engine.unit_bits, true)?;
    if units.iter().map(|u| u128::from(u.count)).sum::<u128>() > u128::from(u64::MAX) {
        bail!(
            "the search holds more than 2^64 arguments, more than its counters hold: cut it \
             into ranges, or run it as a coordinator's campaign"
        );
    }
    let described = Described {
        cfg: &cfg,
        from: &from,
        to: &to,
        derivation: &derivation,
    };
    let header = journal::Header {
        tmd_search_journal: journal::VERSION,
        function: cfg.function.name().to_string(),
        precision: p.bits(),
        format: cfg.format().name(),
        min_bits: cfg.min_bits,
        test: cfg.test.name().to_string(),
        from: from.clone(),
        to: to.clone(),
        unit_bits: a.engine.unit_bits,
        domain_bits: a.engine.domain_bits,
        flat_domain_bits: Some(a.engine.flat_domain_bits),
        whole: a.range.whole,
        reduced: derivation.derives(),
        quadratic_screen: !a.engine.no_quadratic_screen,
        screen_route: if a.engine.no_quadratic_screen {
            0
        } else {
            tmd_kernels::search::existence::quadratic::ROUTE
        },
    };
    let (journal, done) = match &a.output_file {
        None => (None, Tally::default()),
        Some(path) => {
            let jpath = journal::path_for(path);
            if a.resume {
                let (j, done) = Journal::resume(&jpath, &header)?;
                eprintln!(
                    "tmd: resuming: {} of {} units already done ({})",
                    done.units,
                    units.len(),
                    jpath.display()
                );
                (Some(j), done)
            } else {
                if path.exists() || jpath.exists() {
                    bail!(
                        "{} or its journal {} exists: pass --resume to go on with the search they hold, or remove them",
                        path.display(),
                        jpath.display()
                    );
                }
                (Some(Journal::create(&jpath, &header)?), Tally::default())
            }
        }
    };
    let todo = done.remaining(&units);
    let arguments: u128 = todo.iter().map(|u| u128::from(u.count)).sum();
    if let Some(line) = size_warning(arguments, todo.len()) {
        eprintln!("{line}");
    }
    on_interrupt(a.output_file.clone());
    let stream = match (&a.output_file, a.output) {
        (Some(path), Output::Csv | Output::Wc) => {
            // Rebuilt from the journal: whatever a crash left after its last unit goes.
            let mut f = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            // Formatted in memory and written at once (the file is unbuffered; see `Ready`).
            let mut bytes = Vec::new();
            write_stream_header(&mut bytes, a.output, &described)?;
            write_stream_cases(&mut bytes, a.output, &done.result.hr_cases)?;
            write_stream_skipped(&mut bytes, a.output, &done.result.skipped)?;
            f.write_all(&bytes)?;
            f.flush()?;
            Some(f)
        }
        _ => None,
    };
    let engine = a.engine.backend()?;
    let backend = engine.backend();
    let hr_so_far = done.result.hr_cases.len() as u64;
    let sink = Mutex::new(Sink {
        journal,
        stream,
        progress: Progress::new(units.len() as u64, done.units, hr_so_far, a.quiet),
        tally: done,
        format: cfg.format(),
    });
    let start = Instant::now();
    let (has_stream, has_journal) = {
        let s = sink.lock().unwrap_or_else(|e| e.into_inner());
        (s.stream.is_some(), s.journal.is_some())
    };
    let outcome = todo.par_iter().try_for_each(|&u| -> Result<()> {
        let r = search_unit(&cfg, u, backend)?;
        let ready = Ready::new(a.output, &r, has_stream, has_journal)?;
        sink.lock()
            .unwrap_or_else(|e| e.into_inner())
            .unit_done(r, ready)
    });
    let mut sink = sink.into_inner().unwrap_or_else(|e| e.into_inner());
    sink.progress.bar.finish_and_clear();
    if let Some(j) = &mut sink.journal {
        j.sync()?;
    }
    if let Err(e) = outcome {
        if let Some(path) = &a.output_file {
            eprintln!(
                "tmd: the search stopped; {} of {} units are kept in {}: fix the cause and run \
                 the same command with --resume",
                sink.tally.units,
                units.len(),
                journal::path_for(path).display()
            );
        }
        return Err(e);
    }
    sink.tally.finish_in(cfg.format());
    let result = with_derived(&cfg, &derivation, sink.tally.result, a.quiet)?;
    let elapsed = start.elapsed().as_secs_f64();
    let text = render(a.output, &described, &result, &engine, elapsed)?;
    if a.output == Output::Csv {
        describe_csv(&described, &result);
    }
    match &a.output_file {
        Some(path) => {
            replace_file(path, &text, false)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "tmd: {} HR-cases, {} exact cases, {} arguments skipped in {elapsed:.2} s, written to {}",
                result.hr_cases.len(),
                exact_count(&result),
                skipped_arguments(&result),
                path.display()
            );
        }
        None => std::io::stdout().lock().write_all(&text)?,
    }
    for line in engine.memory_lines() {
        eprintln!("tmd: {line}");
    }
    Ok(())
}

/// Searches above this many arguments are warned about before they start (2^40: one unit of
/// binary64 at the default size; a binade of binary80 is 2^63).
const LARGE_SEARCH_ARGUMENTS: u128 = 1 << 40;

/// A warning for a search too large to run blind on one machine.
fn size_warning(arguments: u128, units: usize) -> Option<String> {
    (arguments > LARGE_SEARCH_ARGUMENTS).then(|| {
        format!(
            "tmd: warning: this search covers 2^{:.1} arguments in {units} units; \
             `tmd-worker estimate` with the same flags projects its time from a sample first, \
             and a coordinator's campaign (`tmd-server campaign create`) spreads it over machines",
            (arguments as f64).log2()
        )
    })
}

/// Held while a finished unit is written down, so that Ctrl-C never cuts a journal line.
static WRITING: Mutex<()> = Mutex::new(());

/// Ctrl-C ends the search at once with status 130, saying how to go on: the journal beside
/// `output` keeps every unit finished so far.
fn on_interrupt(output: Option<PathBuf>) {
    let wait = move || -> std::io::Result<()> {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?
            .block_on(tokio::signal::ctrl_c())?;
        let _writing = WRITING.lock().unwrap_or_else(|e| e.into_inner());
        match &output {
            Some(path) => eprintln!(
                "\ntmd: interrupted; the units finished so far are kept in {}: run the same \
                 command with --resume to go on",
                journal::path_for(path).display()
            ),
            None => eprintln!(
                "\ntmd: interrupted; nothing was kept: with --output-file FILE a search keeps \
                 its finished units and --resume goes on where it stopped"
            ),
        }
        std::process::exit(130);
    };
    // Without the handler Ctrl-C still ends the search, only without the hint.
    let _ = std::thread::Builder::new()
        .name("tmd-signal".into())
        .spawn(move || {
            if let Err(e) = wait() {
                tracing::warn!(error = %e, "cannot watch for Ctrl-C");
            }
        });
}

/// What a csv output's rows are judged as, and the arguments it skipped, on stderr: the csv
/// itself holds its header and its cases alone, so that every csv reader takes it whole.
fn describe_csv(d: &Described, result: &RangeResult) {
    eprintln!("tmd: format {}", d.cfg.format().describe());
    for run in &d.derivation.runs {
        eprintln!("tmd: {}", plan::derived_line(run));
    }
    for s in &result.skipped {
        eprintln!("{}", skipped_line("tmd: skipped", s));
    }
    for r in &result.exact_lattices {
        eprintln!("{}", r.line("tmd: exact"));
    }
}

/// Skipped arguments: those of the skipped runs and tanpi's poles counted by their lattice's
/// rule.
fn skipped_arguments(r: &RangeResult) -> u64 {
    let poles: u64 = r.exact_lattices.iter().map(|l| l.poles).sum();
    r.skipped.iter().map(|s| s.count).sum::<u64>() + poles
}

/// Exact cases: those listed and those counted by their lattice's rule.
fn exact_count(r: &RangeResult) -> u64 {
    r.exact_cases.len() as u64 + r.exact_lattices.iter().map(|l| l.count).sum::<u64>()
}

/// The whole output of a finished search, cases sorted by argument.
fn render(
    kind: Output,
    d: &Described,
    result: &RangeResult,
    engine: &Engine,
    elapsed: f64,
) -> Result<Vec<u8>> {
    let cfg = d.cfg;
    let p = cfg.precision;
    let mut out = Vec::new();
    match kind {
        Output::Json => {
            let v = json!({
                "function": cfg.function.name(),
                "precision": p.bits(),
                "format": cfg.format().name(),
                "format_description": cfg.format().describe(),
                "exponents": cfg.format().exponents,
                "min_bits": cfg.min_bits,
                "test": cfg.test.name(),
                "backend": engine.backend().name(),
                "from": d.from,
                "to": d.to,
                "arguments": result.arguments,
                "stats": result.stats,
                "hr_cases": result.hr_cases,
                "exact_cases": result.exact_cases,
                "exact_lattices": result.exact_lattices,
                "skipped": result.skipped,
                "skipped_arguments": skipped_arguments(result),
                "derived": d.derivation.runs,
                "derived_arguments": Count(d.derivation.derived_arguments()),
                "timings": result.timings,
                "elapsed_s": elapsed,
                "gpu_memory": engine.gpu_memory(),
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        Output::Csv | Output::Wc => {
            write_stream_header(&mut out, kind, d)?;
            write_stream_cases(&mut out, kind, &result.hr_cases)?;
            write_stream_skipped(&mut out, kind, &result.skipped)?;
            write_stream_lattices(&mut out, kind, &result.exact_lattices)?;
        }
        Output::Table => {
            let derived = match d.derivation.derived_arguments() {
                0 => String::new(),
                n => format!(" searched and {n} derived"),
            };
            writeln!(
                out,
                "{}({}) on [{}, {}): {} arguments{derived}, at least {} bits",
                cfg.function,
                cfg.format().name(),
                d.from,
                d.to,
                result.arguments,
                cfg.min_bits
            )?;
            writeln!(out, "format {}", cfg.format().describe())?;
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
            for s in &result.skipped {
                writeln!(out, "{}", skipped_line("skipped:", s))?;
            }
            for r in &result.exact_lattices {
                writeln!(out, "{}", r.line("exact:"))?;
            }
            for run in &d.derivation.runs {
                writeln!(out, "{}", plan::derived_line(run))?;
            }
            write_stats(&mut out, &result.stats)?;
            writeln!(
                out,
                "{} HR-cases, {} exact cases, {} arguments skipped in {elapsed:.2} s",
                result.hr_cases.len(),
                exact_count(result),
                skipped_arguments(result)
            )?;
        }
    }
    Ok(out)
}

fn write_stats(out: &mut impl Write, s: &Stats) -> Result<()> {
    writeln!(
        out,
        "units {}  domains {}  phase-1 failures {}  subdomains {}  phase-2 failures {}  phase-3 arguments {}  candidates {}  false positives {}  exhaustive arguments {}  clear arguments {}  dense arguments {}  progression arguments {}  periodic arguments {}",
        s.units,
        s.domains,
        s.phase1_failures,
        s.subdomains,
        s.phase2_failures,
        s.phase3_arguments,
        s.candidates,
        s.false_positives,
        s.exhaustive_arguments,
        s.clear_arguments,
        s.dense_arguments,
        s.progression_arguments,
        s.periodic_arguments
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_search_is_warned_about_and_a_small_one_is_not() {
        assert!(size_warning(1 << 32, 4096).is_none());
        let w = size_warning(1 << 63, 8192).expect("a binade of binary80 is warned about");
        assert!(w.contains("2^63.0") && w.contains("8192 units"), "{w}");
        assert!(w.contains("tmd-worker estimate"), "{w}");
    }
}
