//! `tmd-server`: the coordinator's binary (see `tmd-server --help`).

#![forbid(unsafe_code)]

use clap::Parser;
use tmd_server::cli::{self, Cli, Command};
use tmd_server::{bench, store, Server};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(&cli.log).unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    match &cli.command {
        Command::Serve(args) => {
            let config = args.config()?;
            tracing::info!(?config, listen = %args.listen, "starting");
            let pool = args.db.connect().await?;
            let listener = tokio::net::TcpListener::bind(args.listen).await?;
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
            println!(
                "{}",
                serde_json::to_string_pretty(&tmd_server::http::openapi())?
            );
            Ok(())
        }
        Command::Bench(args) => bench::run(args).await,
    }
}
