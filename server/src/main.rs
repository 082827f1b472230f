//! `tmd-server`: the coordinator's binary (see `tmd-server --help`).

#![forbid(unsafe_code)]

use anyhow::Context;
use clap::Parser;
use std::io::IsTerminal;
use std::io::Write;
use std::process::ExitCode;
use tmd_server::cli::{self, Cli, Command};
use tmd_server::{bench, store, Server};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of stdout went away (`| head`): it has all it wanted.
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes alone: a user's mistake is no crash, so no stack trace
            // even where RUST_BACKTRACE is set (anyhow's `{:?}` would print one).
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The log filter: the operator's, and sqlx's pool quiet below ERROR unless the operator
/// names sqlx. During a database outage the pool warns once per broken connection; the server
/// logs the outage once itself (`outage.rs`).
fn log_filter(spec: &str) -> EnvFilter {
    let filter = EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"));
    if spec.contains("sqlx") {
        return filter;
    }
    filter.add_directive("sqlx_core::pool=error".parse().expect("a valid directive"))
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Colours only on a terminal: a log file or journald would keep the escape codes.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(log_filter(&cli.log))
        .with_writer(std::io::stderr);
    match cli.log_format {
        cli::LogFormat::Text => logs.with_ansi(colour).init(),
        cli::LogFormat::Json => logs.json().init(),
    }
    match &cli.command {
        Command::Serve(args) => {
            let config = args.config()?;
            tracing::info!(?config, listen = %args.listen, "starting");
            let pool = args.db.connect().await?;
            let listener = tokio::net::TcpListener::bind(args.listen)
                .await
                .with_context(|| {
                    format!(
                        "cannot listen on {} (--listen, TMD_LISTEN): another process may hold it",
                        args.listen
                    )
                })?;
            Server::start(pool, config, listener)
                .await?
                .wait_for_signal()
                .await
        }
        Command::Migrate(db) => {
            let pool = db.connect().await?;
            store::migrate(&pool).await?;
            tracing::info!("migrations applied");
            Ok(())
        }
        Command::Campaign { api, command } => cli::run_campaign(api, command).await,
        Command::Token { api, command } => cli::run_token(api, command).await,
        Command::Worker { api, command } => cli::run_worker(api, command).await,
        Command::Openapi => {
            let text = serde_json::to_string_pretty(&tmd_server::api::openapi())?;
            writeln!(std::io::stdout().lock(), "{text}")?;
            Ok(())
        }
        Command::Bench(args) => bench::run(args).await,
    }
}
