//! The benchmarks of the coordinator, commands of `tmd-server bench`: the lease cycles
//! ([`cycles`]), a GPU farm posting result batches ([`farm`]) and a campaign of millions of
//! units ([`scale`]); [`client`] is what they (and the tests) share. None of them is part of
//! serving: they drive a server over HTTP like workers do.

pub mod client;
pub mod costs;
pub mod cycles;
pub mod farm;
pub mod phases;
pub mod scale;

pub use client::{empty_batch, empty_result, register, Refused, WorkerClient};

use clap::Args;

/// `bench` options: the cycles bench, or another bench as a subcommand.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// A GPU farm posting result batches to real server processes (see `bench farm --help`).
    #[command(subcommand)]
    pub mode: Option<BenchMode>,
    #[command(flatten)]
    pub cycles: cycles::CyclesArgs,
}

/// The other benches.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchMode {
    /// Simulated GPUs finishing units at a rate and posting them in batches to one or more
    /// `tmd-server serve` processes on a throwaway database.
    Farm(farm::FarmArgs),
    /// A campaign of millions of units (default 10 million) on a throwaway database: its
    /// creation time, the tables' sizes, and the latency and size of progress, dashboard,
    /// coverage and metrics requests.
    Scale(scale::ScaleArgs),
}

/// Runs the benchmark and prints its figures.
pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    match &args.mode {
        Some(BenchMode::Farm(farm)) => farm::run(farm).await,
        Some(BenchMode::Scale(scale)) => scale::run(scale).await,
        None => cycles::run(&args.cycles).await,
    }
}
