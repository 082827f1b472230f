//! The deployment files agree with the binaries: what can be checked without Docker, systemd or
//! Slurm themselves.

use std::path::PathBuf;
use std::process::Command;
use tmd_tests::bin;

fn deploy(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("deploy/{path}: {e}"))
}

fn help(binary: &str, args: &[&str]) -> String {
    let out = Command::new(bin(binary)).args(args).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn compose_names_the_three_services_and_known_settings() {
    let doc: serde_yaml::Value = serde_yaml::from_str(&read("compose.yaml")).unwrap();
    let services = doc["services"].as_mapping().expect("services");
    for s in ["postgres", "coordinator", "worker"] {
        assert!(services.contains_key(s), "service {s}");
    }
    let server_help = help("tmd-server", &["serve", "--help"]);
    for (k, _) in doc["services"]["coordinator"]["environment"]
        .as_mapping()
        .unwrap()
    {
        let k = k.as_str().unwrap();
        assert!(
            server_help.contains(&format!("env: {k}")),
            "{k} is not read by tmd-server serve"
        );
    }
    let worker_help = help("tmd-worker", &["run", "--help"]);
    for (k, _) in doc["services"]["worker"]["environment"]
        .as_mapping()
        .unwrap()
    {
        let k = k.as_str().unwrap();
        assert!(
            worker_help.contains(&format!("env: {k}")),
            "{k} is not read by tmd-worker run"
        );
    }
}

#[test]
fn every_variable_of_the_env_files_is_read_by_its_binary() {
    let server_help = help("tmd-server", &["serve", "--help"]);
    let worker_help = help("tmd-worker", &["run", "--help"]);
    for (file, text) in [
        ("coordinator.env", &server_help),
        ("worker.env", &worker_help),
    ] {
        for line in read(file).lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key = line.split('=').next().unwrap();
            assert!(text.contains(&format!("env: {key}")), "{file}: {key}");
        }
    }
}

#[test]
fn systemd_units_call_existing_commands_and_flags() {
    for (unit, binary) in [
        ("systemd/tmd-server.service", "tmd-server"),
        ("systemd/tmd-worker.service", "tmd-worker"),
    ] {
        let text = read(unit);
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .expect("ExecStart");
        let mut words = exec.split_whitespace();
        assert!(words.next().unwrap().ends_with(binary));
        let sub = words.next().unwrap();
        let h = help(binary, &[sub, "--help"]);
        for w in words.filter(|w| w.starts_with("--")) {
            assert!(h.contains(w), "{unit}: {w}");
        }
        for section in ["[Unit]", "[Service]", "[Install]"] {
            assert!(text.contains(section), "{unit}: {section}");
        }
    }
}

/// `tmd-worker run --dry-run --config deploy/worker.toml` with this enrollment token.
fn dry_run(token: Option<&str>) -> std::process::Output {
    let mut c = Command::new(bin("tmd-worker"));
    c.args(["run", "--dry-run", "--config"])
        .arg(deploy("worker.toml"))
        .env_remove("TMD_SERVER")
        .env_remove("TMD_TOKEN")
        .env("RUST_BACKTRACE", "1");
    if let Some(t) = token {
        c.env("TMD_TOKEN", t);
    }
    c.output().unwrap()
}

#[test]
fn the_worker_configuration_file_is_accepted() {
    let out = dry_run(Some("a-token-from-token-create"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("http://127.0.0.1:8080"), "{text}");
    // For people: one setting a line, no Rust struct, the token redacted.
    assert!(
        text.contains("state directory    /var/lib/tmd-worker"),
        "{text}"
    );
    assert!(
        !text.contains("Settings {") && !text.contains("misbehave"),
        "{text}"
    );
    assert!(!text.contains("a-token-from"), "{text}");
}

#[test]
fn the_dry_run_refuses_no_token_and_the_placeholder_before_any_request() {
    let shipped = read("worker.env")
        .lines()
        .find_map(|l| l.strip_prefix("TMD_TOKEN=").map(String::from))
        .expect("worker.env sets TMD_TOKEN");
    for (token, says) in [(None, "--token"), (Some(shipped.as_str()), "placeholder")] {
        let out = dry_run(token);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{token:?} accepted");
        assert!(err.contains(says), "{err}");
        // A user's mistake, not a crash: no stack trace even with RUST_BACKTRACE=1.
        assert!(
            !err.contains("Stack backtrace") && err.lines().count() <= 2,
            "{err}"
        );
    }
}

#[test]
fn the_slurm_script_is_valid_bash_and_forwards_the_signal() {
    let status = Command::new("bash")
        .arg("-n")
        .arg(deploy("slurm/tmd-worker.sbatch"))
        .status()
        .unwrap();
    assert!(status.success());
    let text = read("slurm/tmd-worker.sbatch");
    assert!(text.contains("#SBATCH --signal=TERM@"));
    assert!(text.contains("run --state-dir"));
}
