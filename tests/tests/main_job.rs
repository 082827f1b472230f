//! The README's main job, run as written (`bash scripts/local-campaign.sh`) on a small range
//! through the same script: it must finish, and the HR-cases it prints must be those of a
//! local search of the same range. The script's own settings (FROM, TO, PORT, TMD_LOCAL_DIR,
//! TMD_LOCAL_DB) keep it off the machine's defaults; nothing else is changed.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use tmd_tests::{exp_binary64, free_port, local_search, scratch};

/// Four units of exp in binary64 at 36 bits: the README's campaign, a quarter of its range.
const FROM: &str = "0x1p+0";
const TO: &str = "0x1.0004p+0";

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The `(x, bits, kind)` of each case of the table the script prints, and the count of its
/// closing line ("N HR-cases").
fn printed_cases(stdout: &str) -> (BTreeSet<(String, i64, String)>, Option<usize>) {
    let mut cases = BTreeSet::new();
    let mut count = None;
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 2 && f[1] == "HR-cases" {
            count = f[0].parse().ok();
        } else if f.len() == 5 && f[0].starts_with("0x") {
            cases.insert((
                f[0].to_string(),
                f[1].parse().expect("bits"),
                f[3].to_string(),
            ));
        }
    }
    (cases, count)
}

#[test]
#[ignore = "long: run by `bash scripts/test.sh --long`"]
fn the_readme_main_job_finishes_and_prints_the_local_searchs_hr_cases() {
    let dir = scratch("main-job");
    let db = format!("tmd_main_job_{}", std::process::id());
    let out = Command::new("bash")
        .arg("scripts/local-campaign.sh")
        .current_dir(repo_root())
        .env("FROM", FROM)
        .env("TO", TO)
        .env("PORT", free_port().to_string())
        .env("TMD_LOCAL_DIR", &dir)
        .env("TMD_LOCAL_DB", &db)
        .env("POLL_SECONDS", "0.2")
        .output()
        .expect("run bash scripts/local-campaign.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let logs = ["server.log", "worker.log"]
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default());
    assert!(
        out.status.success(),
        "the main job failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}\nworker log:\n{}",
        out.status,
        logs[0],
        logs[1]
    );
    assert!(
        stderr.contains("4/4 units") && stderr.contains("COMPLETE"),
        "{stderr}"
    );
    assert!(
        stderr.contains("/hr-cases?format=wc"),
        "the REST URLs close the job: {stderr}"
    );

    let (printed, count) = printed_cases(&stdout);
    let want = local_search(&exp_binary64(FROM, TO));
    assert!(!want.is_empty(), "the range has HR-cases to print");
    assert_eq!(printed, want, "printed:\n{stdout}");
    assert_eq!(count, Some(want.len()), "{stdout}");

    // The script's coordinator is gone (it was not asked to stay), and so is its database.
    let psql = Command::new("psql")
        .args([
            "postgres://postgres@127.0.0.1:5432/postgres",
            "-qc",
            &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        ])
        .output();
    if !matches!(psql, Ok(ref o) if o.status.success()) {
        // No server on 5432: the script started a private cluster in its folder; stop it.
        stop_private_cluster(&dir.join("pg").join("data"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stops the cluster the script started where nothing answered on 5432 (as `postgres` when
/// root, as the script ran it).
fn stop_private_cluster(data: &Path) {
    if !data.join("PG_VERSION").exists() {
        return;
    }
    let pg_ctl = Command::new("bash")
        .args([
            "-c",
            "command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -n1",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let mut cmd = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &pg_ctl]);
        c
    } else {
        Command::new(&pg_ctl)
    };
    let _ = cmd
        .arg("-D")
        .arg(data)
        .args(["-m", "fast", "stop"])
        .output();
}
