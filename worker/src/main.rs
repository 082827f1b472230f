//! `tmd-worker`: local searches, benchmarks and single-argument evaluation with the engine.

#![forbid(unsafe_code)]

mod daemon;
mod local;
mod state;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::IsTerminal;

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
    #[command(subcommand)]
    command: Command,
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

fn main() -> Result<()> {
    let cli = Cli::parse();
    // The daemon logs its progress; the local commands only warnings (their output is stdout).
    let default_level = if matches!(cli.command, Command::Run(_)) {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TMD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file or journald would keep the escape codes.
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .init();
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
}
