//! `tmd-worker`: local searches, benchmarks and single-argument evaluation with the engine.

#![forbid(unsafe_code)]

mod daemon;
mod local;
mod state;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;

/// `--version`: the release and its engine version (a coordinator serves the versions it
/// accepts: results of different versions count different domains).
static VERSION: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| tmd_kernels::version_line(env!("CARGO_PKG_VERSION")));

/// Finds hard-to-round cases of mathematical functions.
///
/// Functions: exp exp2 exp10 expm1 exp2m1 exp10m1 log log2 log10 log1p log2p1 log10p1 sin cos
/// tan sinpi cospi tanpi asin acos atan asinpi acospi atanpi sinh cosh tanh asinh acosh atanh
/// sqrt rsqrt cbrt erf erfc.
#[derive(Parser, Debug)]
#[command(name = "tmd-worker", version = VERSION.as_str(), about, long_about)]
struct Cli {
    /// Log filter (tracing-subscriber syntax), e.g. `info` or `tmd_worker=debug` (each unit
    /// computed is logged at debug) [default: info for `run`, warn for the local commands,
    /// whose output is stdout].
    #[arg(long, env = "TMD_LOG", global = true)]
    log: Option<String>,
    /// Log lines as text for people, or as one JSON object per line for a log collector.
    #[arg(
        long,
        env = "TMD_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        global = true
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// One line of text per event (colours only on a terminal).
    Text,
    /// One JSON object per event (timestamp, level, target, fields).
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Search a range of arguments on this machine and print the HR-cases.
    Search(local::SearchArgs),
    /// Time the engine on whole units and report units/s, arguments/s and each phase.
    Bench(local::BenchArgs),
    /// Evaluate one argument with MPFR and print its hardness.
    Eval(local::EvalArgs),
    /// Project a range's or a whole function's cost (time on this machine, HR-cases, with
    /// their uncertainty) from a seeded random sample of its units, per binade.
    Estimate(local::EstimateArgs),
    /// Run as a worker of a coordinator: lease units, compute, post results, repeat.
    Run(daemon::RunArgs),
    /// Known-answer tests of the GPU arithmetic against the CPU; nonzero exit on any failure.
    Selftest(local::SelftestArgs),
}

/// mimalloc for Rust's allocations and GMP's (`tmd_kernels::alloc`): the progression
/// route's pieces are made and freed on every core.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tmd_kernels::alloc::gmp_on_mimalloc();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes alone: a user's mistake is no crash, so no stack trace
            // even where RUST_BACKTRACE is set (anyhow's `{:?}` would print one).
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    // The daemon logs its progress; the local commands only warnings (their output is stdout).
    let default_level = if matches!(cli.command, Command::Run(_)) {
        "info"
    } else {
        "warn"
    };
    let spec = cli.log.as_deref().unwrap_or(default_level);
    let filter = tracing_subscriber::EnvFilter::try_new(spec).with_context(|| {
        format!("--log {spec:?} is not a log filter (e.g. info, or info,tmd_worker=debug)")
    })?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        // Colours only on a terminal: a log file or journald would keep the escape codes.
        LogFormat::Text => logs
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
        LogFormat::Json => logs.json().init(),
    }
    match cli.command {
        Command::Search(a) => local::search(a),
        Command::Bench(a) => local::bench(a),
        Command::Eval(a) => local::eval(a),
        Command::Estimate(a) => local::estimate(a),
        Command::Run(a) => match daemon::run(a) {
            Err(e) if e.downcast_ref::<daemon::Quarantined>().is_some() => {
                eprintln!("Error: {e}");
                std::process::exit(daemon::QUARANTINED_EXIT)
            }
            Err(e) if e.downcast_ref::<daemon::EngineRefused>().is_some() => {
                eprintln!("Error: {e}");
                std::process::exit(daemon::ENGINE_REFUSED_EXIT)
            }
            Err(e) if e.downcast_ref::<daemon::DeviceLost>().is_some() => {
                eprintln!("Error: {e}");
                std::process::exit(daemon::DEVICE_LOST_EXIT)
            }
            other => other,
        },
        Command::Selftest(a) => local::selftest(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn eval_help_shows_only_what_applies_to_one_argument() {
        let help = Cli::command()
            .find_subcommand_mut("eval")
            .unwrap()
            .render_long_help()
            .to_string();
        for shown in ["--function", "--format", "--precision", "--min-bits", "<X>"] {
            assert!(help.contains(shown), "{shown} missing:\n{help}");
        }
        for hidden in [
            "--backend",
            "--unit-bits",
            "--threads",
            "--domain-bits",
            "--test ",
        ] {
            assert!(!help.contains(hidden), "{hidden} shown:\n{help}");
        }
    }

    #[test]
    fn log_options_are_global_and_checked() {
        let cli = Cli::try_parse_from([
            "tmd-worker",
            "eval",
            "-f",
            "exp",
            "1",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.log_format, LogFormat::Json);
        let cli = Cli::try_parse_from(["tmd-worker", "--log", "debug", "eval", "-f", "exp", "1"])
            .unwrap();
        assert_eq!(cli.log.as_deref(), Some("debug"));
        assert!(Cli::try_parse_from([
            "tmd-worker",
            "eval",
            "-f",
            "exp",
            "1",
            "--log-format",
            "xml"
        ])
        .is_err());
    }
}
