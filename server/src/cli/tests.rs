//! The command line's parsing, defaults and checks.

use super::*;
use clap::CommandFactory;

#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn serve_defaults_are_the_documented_ones() {
    let cli = Cli::try_parse_from([
        "tmd-server",
        "serve",
        "--database-url",
        "postgres://x@127.0.0.1/db",
        "--admin-token",
        "0123456789abcdef",
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("serve expected")
    };
    let c = args.config().unwrap();
    assert_eq!(args.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(c.policy.ttl_seconds, 300);
    assert_eq!(c.policy.max_attempts, 5);
    assert_eq!(c.max_body_bytes, 1 << 20);
    assert!(!format!("{c:?}").contains("0123456789abcdef"));
    assert_eq!(c.policy.max_lease_seconds, 21_600);
    assert_eq!(c.policy.max_units_per_worker, 128);
    assert_eq!(c.policy.default_seconds, 60);
    assert_eq!(c.policy.max_held_seconds, 600);
    assert_eq!(c.policy.max_units, 20_000);
    assert_eq!(c.max_cases_per_result, 10_000);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    assert_eq!(c.derive_tasks, crate::default_derive_tasks(cores));
    assert!(c.tls.is_none());
}

#[test]
fn derive_tasks_follow_the_cores_within_bounds() {
    let tasks: Vec<usize> = [1, 2, 4, 6, 16, 128]
        .into_iter()
        .map(crate::default_derive_tasks)
        .collect();
    assert_eq!(tasks, [2, 2, 2, 3, 8, 8]);
    let cli = Cli::try_parse_from([
        "tmd-server",
        "serve",
        "--database-url",
        "postgres://x@127.0.0.1/db",
        "--derive-tasks",
        "0",
    ])
    .unwrap();
    let Command::Serve(args) = cli.command else {
        panic!("serve expected")
    };
    assert_eq!(args.config().unwrap().derive_tasks, 0);
}

#[test]
fn the_shipped_placeholder_admin_token_is_refused() {
    let env = include_str!("../../../deploy/coordinator.env");
    let shipped = env
        .lines()
        .find_map(|l| l.strip_prefix("TMD_ADMIN_TOKEN="))
        .expect("coordinator.env sets TMD_ADMIN_TOKEN");
    for token in [shipped, PLACEHOLDER_ADMIN_TOKEN, "short"] {
        let cli = Cli::try_parse_from([
            "tmd-server",
            "serve",
            "--database-url",
            "postgres://x@127.0.0.1/db",
            "--admin-token",
            token,
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("serve expected")
        };
        assert!(args.config().is_err(), "{token} accepted");
    }
    assert!(check_admin_token(&"ab12".repeat(8)).is_ok());
}

#[test]
fn the_shipped_coordinator_env_holds_the_built_in_defaults() {
    let env = include_str!("../../../deploy/coordinator.env");
    let mut cli = Cli::command();
    cli.build();
    let serve = cli.find_subcommand("serve").unwrap();
    let mut checked = 0;
    for line in env.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap();
        let arg = serve
            .get_arguments()
            .chain(cli.get_arguments())
            .find(|a| a.get_env().is_some_and(|e| e == key))
            .unwrap_or_else(|| panic!("coordinator.env: {key} is no flag's variable"));
        let Some(default) = arg.get_default_values().first() else {
            continue; // no default: the database, the admin token
        };
        let default = default.to_str().unwrap();
        let same = match (value.parse::<f64>(), default.parse::<f64>()) {
            (Ok(a), Ok(b)) => a == b,
            _ => value == default,
        };
        assert!(
            same,
            "coordinator.env: {key}={value}, the built-in default is {default}"
        );
        checked += 1;
    }
    assert!(checked >= 5, "{checked} defaults checked");
    assert!(env.lines().any(|l| l.starts_with("DATABASE_URL=")));
}

/// `campaign create`'s args from the words after it.
fn create(words: &[&str]) -> Result<CreateArgs, clap::Error> {
    let mut argv = vec!["tmd-server", "campaign", "create", "--function", "exp"];
    argv.extend(["--format", "binary64", "--min-bits", "44"]);
    argv.extend(words);
    let cli = Cli::try_parse_from(argv)?;
    match cli.command {
        Command::Campaign {
            command: CampaignCommand::Create(a),
            ..
        } => Ok(a),
        _ => panic!("campaign create expected"),
    }
}

/// Negative bounds as written, and --whole instead of bounds.
#[test]
fn campaign_create_takes_negative_bounds_and_whole() {
    let a = create(&["--from", "-0x1p+3", "--to", "-0x1p+1"]).unwrap();
    assert_eq!(
        (a.from, a.to),
        (vec!["-0x1p+3".into()], vec!["-0x1p+1".into()])
    );
    let a = create(&["--from", "-745", "--to", "1", "--from", "1", "--to", "2"]).unwrap();
    assert_eq!(a.from, ["-745", "1"]);
    let a = create(&["--whole"]).unwrap();
    assert!(a.whole && a.from.is_empty());
    let neither = create(&[]).unwrap().ranges().unwrap_err().to_string();
    assert!(
        neither.contains("--whole") && neither.contains("--from"),
        "{neither}"
    );
    assert!(create(&["--from", "1"]).unwrap().ranges().is_err());
    assert!(create(&["--whole", "--from", "1", "--to", "2"]).is_err());
}

#[test]
fn campaign_create_formats_default_to_binary64_and_are_all_named() {
    let mut argv = vec!["tmd-server", "campaign", "create", "--function", "exp"];
    argv.extend(["--min-bits", "44", "--whole"]);
    let cli = Cli::try_parse_from(argv).unwrap();
    let Command::Campaign {
        command: CampaignCommand::Create(a),
        ..
    } = cli.command
    else {
        panic!("campaign create expected")
    };
    assert_eq!(a.format, "binary64");
    let help = Cli::command()
        .find_subcommand_mut("campaign")
        .and_then(|c| c.find_subcommand_mut("create"))
        .map(|c| c.render_long_help().to_string())
        .unwrap();
    for f in [
        "binary16", "bfloat16", "binary32", "binary64", "binary80", "p8",
    ] {
        assert!(help.contains(f), "{f} not in the help:\n{help}");
    }
}

#[test]
fn database_urls_of_other_kinds_are_refused_with_what_is_expected() {
    let e = postgres_options("mysql://x@127.0.0.1/db")
        .unwrap_err()
        .to_string();
    assert!(e.contains("mysql://") && e.contains("PostgreSQL"), "{e}");
    let e = postgres_options("localhost:5432/tmd")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a URL") && e.contains("postgres://"), "{e}");
    let o = postgres_options("postgresql://u@db.example:6543/tmd").unwrap();
    assert_eq!((o.get_host(), o.get_port()), ("db.example", 6543));
}

#[test]
fn terminal_escapes_are_printed_escaped() {
    assert_eq!(printable("gpu-01"), "gpu-01");
    let evil = printable("x\u{1b}]0;owned\u{7}\nfake row");
    assert!(!evil.chars().any(char::is_control), "{evil}");
}
