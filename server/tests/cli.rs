//! The admin command line, run as a real process against a real server: `migrate`,
//! `campaign create|list|show|pause|resume|cancel`, `token create`.

mod common;

use common::{tmd, TestApp, ADMIN};
use serde_json::Value;

#[tokio::test]
async fn admin_commands_drive_a_running_server() {
    let app = TestApp::new().await;
    let api = ["--server", &app.base, "--admin-token", ADMIN];
    let with = |sub: &[&'static str], extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = sub.iter().map(|s| s.to_string()).collect();
        v.extend(api.iter().map(|s| s.to_string()));
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: Vec<String>| async move {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        tmd(&refs).await
    };

    let (ok, out, err) = run(with(
        &["campaign"],
        &[
            "create",
            "--function",
            "exp",
            "--format",
            "binary32",
            "--min-bits",
            "12",
            "--from",
            "1",
            "--to",
            "0x1.0004p+0",
            "--unit-bits",
            "8",
            "--name",
            "cli-test",
        ],
    ))
    .await;
    assert!(ok, "{err}");
    let c: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(c["name"], "cli-test");
    assert_eq!(c["units_total"], 2);
    let id = c["id"].to_string();

    let (ok, out, err) = run(with(&["campaign"], &["list"])).await;
    assert!(ok, "{err}");
    assert!(out.lines().nth(1).unwrap().contains("cli-test"), "{out}");

    let (ok, out, err) = run(with(&["campaign"], &["show", &id])).await;
    assert!(ok, "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["progress"]["pending"]["units"], 2);
    // A volunteer campaign by default: two results from different owners.
    assert_eq!(shown["campaign"]["replication"], 2, "{shown}");
    assert_eq!(shown["campaign"]["trust_all_workers"], false, "{shown}");

    // Known cases from a .wc file: each verified, only HR-cases inside a unit kept.
    let wc = std::env::temp_dir().join(format!("tmd-cli-ringers-{}.wc", std::process::id()));
    std::fs::write(
        &wc,
        "# exp binary32\n0x1p+0  # exp(1): not hard\n0x1.8p+5\n",
    )
    .unwrap();
    let (ok, out, err) = run(with(
        &["campaign"],
        &["ringers", &id, "--file", wc.to_str().unwrap()],
    ))
    .await;
    std::fs::remove_file(&wc).unwrap();
    assert!(ok, "{err}");
    let loaded: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            &loaded["submitted"],
            &loaded["loaded"],
            &loaded["refused_total"]
        ),
        (
            &serde_json::json!(2),
            &serde_json::json!(0),
            &serde_json::json!(2)
        ),
        "{loaded}"
    );

    for (action, state) in [
        ("pause", "paused"),
        ("resume", "active"),
        ("cancel", "cancelled"),
    ] {
        let (ok, out, err) = run(with(&["campaign"], &[action, &id])).await;
        assert!(ok, "{action}: {err}");
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["state"], state);
    }
    let (ok, _, err) = run(with(&["campaign"], &["resume", &id])).await;
    assert!(!ok);
    assert!(err.contains("conflict"), "{err}");

    let (ok, out, err) = run(with(
        &["token"],
        &["create", "--uses", "3", "--note", "rack"],
    ))
    .await;
    assert!(ok, "{err}");
    let t: Value = serde_json::from_str(&out).unwrap();
    assert!(t["token"].as_str().unwrap().starts_with("tmde_"));
    assert_eq!(t["uses_left"], 3);

    let (ok, _, err) = tmd(&[
        "campaign",
        "list",
        "--server",
        &app.base,
        "--admin-token",
        "nope",
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("unauthorized"), "{err}");
    let (ok, _, err) = tmd(&["campaign", "create", "--function", "exp", "--min-bits", "3"]).await;
    assert!(!ok, "missing arguments are refused");
    assert!(err.contains("--from") && err.contains("--whole"), "{err}");
}

/// `campaign create --dry-run` prints the plan with the unit size it chose and creates
/// nothing; without it, the size chosen is said on stderr.
#[tokio::test]
async fn campaign_create_dry_run_prints_the_plan() {
    let app = TestApp::new().await;
    let api = ["--server", app.base.as_str(), "--admin-token", ADMIN];
    let mut words = vec![
        "campaign",
        "create",
        "--function",
        "exp",
        "--format",
        "binary80",
    ];
    words.extend(["--min-bits", "32", "--from", "1", "--to", "2", "--dry-run"]);
    words.extend(api);
    let (ok, out, err) = tmd(&words).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("units        1048576 of 2^43 arguments"),
        "{out}"
    );
    assert!(
        out.contains("the default 2^41 would make 4194304 units"),
        "{out}"
    );
    assert!(out.contains("nothing created"), "{out}");
    let (ok, out, err) = tmd(&[
        "campaign", "list", "--output", "json", api[0], api[1], api[2], api[3],
    ])
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "[]");
    // Created for real, the format by default binary64, the chosen size said on stderr.
    let (ok, out, err) = tmd(&[
        "campaign",
        "create",
        "--function",
        "exp",
        "--min-bits",
        "40",
        "--from",
        "1",
        "--to",
        "0x1.0001p+0",
        "--trust-all-workers",
        api[0],
        api[1],
        api[2],
        api[3],
    ])
    .await;
    assert!(ok, "{err}");
    let c: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(c["format"], "binary64", "{c}");
    assert!(
        err.contains(&format!("units of 2^{}", c["unit_bits"])),
        "{err}"
    );
}

/// The mistakes of a first start say what to fix, name the address, and print no stack trace
/// even where RUST_BACKTRACE is set.
#[tokio::test]
async fn start_up_mistakes_say_what_to_fix() {
    let app = TestApp::new().await;
    let port = app.base.rsplit(':').next().unwrap().to_string();
    let db = tmd_test_support::TestDb::new().await;
    let serve = |url: String, listen: String| async move {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tmd-server"))
            .args(["serve", "--database-url", &url, "--listen", &listen])
            .args(["--admin-token", ADMIN, "--db-acquire-timeout-seconds", "1"])
            .env("RUST_BACKTRACE", "1")
            .env("TMD_LOG", "warn")
            .output()
            .await
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            !err.contains("backtrace") && !err.contains("panicked"),
            "{err}"
        );
        err
    };
    let free = "127.0.0.1:0".to_string();
    let err = serve("mysql://x@127.0.0.1/db".into(), free.clone()).await;
    assert!(
        err.contains("mysql://") && err.contains("PostgreSQL"),
        "{err}"
    );
    let err = serve("not-a-url".into(), free.clone()).await;
    assert!(err.contains("not a URL"), "{err}");
    // A port where nothing listens: the address and the cause, not the pool's timeout.
    let err = serve("postgres://postgres@127.0.0.1:9/x".into(), free).await;
    assert!(err.contains("127.0.0.1:9"), "{err}");
    assert!(!err.contains("pool timed out"), "{err}");
    // The running test server holds its port.
    let taken = format!("127.0.0.1:{port}");
    let err = serve(db.url().to_string(), taken.clone()).await;
    assert!(err.contains(&format!("cannot listen on {taken}")), "{err}");
    db.drop_db().await;
}

#[tokio::test]
async fn migrate_applies_the_schema_and_is_idempotent() {
    let db = tmd_test_support::TestDb::new().await;
    for _ in 0..2 {
        let (ok, _, err) = tmd(&["migrate", "--database-url", db.url()]).await;
        assert!(ok, "{err}");
    }
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' \
         AND table_name IN ('campaigns', 'units', 'leases', 'results', 'hr_cases', 'workers', 'enrollment_tokens')",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(tables, 7);
}

#[tokio::test]
async fn the_bench_runs_cycles_and_reports_its_figures() {
    let (ok, out, err) = tmd(&[
        "bench",
        "--database-url",
        tmd_test_support::admin_url(),
        "--workers",
        "2",
        "--seconds",
        "1",
        "--max-connections",
        "4",
    ])
    .await;
    assert!(ok, "{err}");
    let summary = out.lines().find(|l| l.contains(" cycles=")).unwrap();
    assert!(
        out.lines()
            .any(|l| l.starts_with("replication=1 ") && l.contains("work_factor=")),
        "{out}"
    );
    let cycles: u64 = summary
        .split_whitespace()
        .find_map(|f| f.strip_prefix("cycles="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(cycles > 0, "{out}");
    for field in ["cycles_per_s=", "cycle_p99_ms=", "request_p50_ms="] {
        assert!(summary.contains(field), "{out}");
    }
    assert!(out.contains("heartbeat: p50_ms="), "{out}");
}

/// `tmd-server openapi | head`: the reader leaves before the end; the command ends quietly
/// (the document is larger than a pipe's buffer, so the write does hit the closed pipe).
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_tmd-server"))
        .arg("openapi")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // The read end is closed here, as `head` does after its lines.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(String::from_utf8_lossy(&head).contains("openapi"));
}

/// The admin's remedies from the command line, with the token read from a file (a
/// command line shows in `ps`), and names printed with their control characters escaped.
#[tokio::test]
async fn admin_remedies_from_the_command_line() {
    let app = TestApp::new().await;
    let dir = std::env::temp_dir().join(format!("tmd-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("admin-token");
    std::fs::write(&file, format!("{ADMIN}\n")).unwrap();
    let file = file.to_str().unwrap().to_string();
    let run = |args: Vec<&str>| {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        v.extend([
            "--server".into(),
            app.base.clone(),
            "--admin-token-file".into(),
            file.clone(),
        ]);
        async move {
            let refs: Vec<&str> = v.iter().map(String::as_str).collect();
            tmd(&refs).await
        }
    };
    let (ok, out, err) = run(vec!["token", "create", "--owner", "lab"]).await;
    assert!(ok, "{err}");
    let t: Value = serde_json::from_str(&out).unwrap();
    // A table like the other lists; JSON when asked.
    let (ok, out, err) = run(vec!["token", "list"]).await;
    assert!(ok, "{err}");
    let row = out.lines().nth(1).unwrap_or_default();
    assert!(out.starts_with("    id  state"), "{out}");
    assert!(row.contains("active") && row.contains("lab"), "{out}");
    assert!(
        !out.contains(t["token"].as_str().unwrap()),
        "the token is never shown again"
    );
    let (ok, out, err) = run(vec!["token", "list", "--output", "json"]).await;
    assert!(ok, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[0]["owner"], "lab");
    for list in [["worker", "list"], ["campaign", "list"]] {
        let mut words = list.to_vec();
        words.extend(["--output", "json"]);
        let (ok, out, err) = run(words).await;
        assert!(ok, "{err}");
        assert!(
            serde_json::from_str::<Value>(&out).unwrap().is_array(),
            "{out}"
        );
    }
    let id = t["id"].to_string();
    let (ok, out, err) = run(vec!["token", "revoke", &id]).await;
    assert!(ok, "{err}");
    assert!(serde_json::from_str::<Value>(&out).unwrap()["revoked_at"].is_string());

    // A name stored before names were checked, with a terminal escape in it.
    let (wid, _) = app.worker("plain").await;
    sqlx::query("UPDATE workers SET name = $2 WHERE id = $1")
        .bind(wid)
        .bind("evil\u{1b}]0;owned\u{7}")
        .execute(app.db.pool())
        .await
        .unwrap();
    let (ok, out, err) = run(vec!["worker", "list"]).await;
    assert!(ok, "{err}");
    assert!(!out.contains('\u{1b}'), "{out:?}");
    assert!(out.contains("evil\\u{1b}"), "{out}");
    let wid = wid.to_string();
    let (ok, out, err) = run(vec!["worker", "revoke", &wid]).await;
    assert!(ok, "{err}");
    assert!(serde_json::from_str::<Value>(&out).unwrap()["revoked_at"].is_string());

    let c = app.small_campaign(2, 4).await;
    let cid = c["id"].to_string();
    let (ok, out, err) = run(vec!["campaign", "requeue", &cid]).await;
    assert!(ok, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["requeued"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A lab queues three functions in one command: three campaigns, priorities descending in the
/// order given; a worker takes every unit of the first before any of the second, and so on.
#[tokio::test]
async fn several_functions_queue_campaigns_that_run_in_order() {
    let app = TestApp::new().await;
    let (ok, out, err) = tmd(&[
        "campaign",
        "create",
        "--server",
        &app.base,
        "--admin-token",
        ADMIN,
        "--function",
        "exp,log, sinh",
        "--format",
        "binary32",
        "--min-bits",
        "8",
        "--from",
        "1",
        "--to",
        "0x1.0004p+0",
        "--unit-bits",
        "8",
        "--trust-all-workers",
        "--priority",
        "10",
    ])
    .await;
    assert!(ok, "{err}");
    let made: Vec<Value> = serde_json::from_str(&out).unwrap();
    let names: Vec<(&str, i64)> = made
        .iter()
        .map(|c| {
            (
                c["function"].as_str().unwrap(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, [("exp", 10), ("log", 9), ("sinh", 8)]);
    assert_eq!(err.matches("queued campaign").count(), 3, "{err}");
    let ids: Vec<i64> = made.iter().map(|c| c["id"].as_i64().unwrap()).collect();

    let (_, w) = app.worker("w").await;
    let mut order = Vec::new();
    while let Some(l) = w.lease(Some(1)).await.unwrap().lease {
        order.push(l.task.campaign_id);
        for u in &l.units {
            let r = tmd_server::bench::empty_result(l.fencing_token, u.unit_id, 0.01);
            w.post(l.lease_id, u.unit_id, &r).await.unwrap();
        }
    }
    let mut runs = order.clone();
    runs.dedup();
    assert_eq!(runs, ids, "{order:?}");

    // One estimate cannot serve three functions.
    let (ok, _, err) = tmd(&[
        "campaign",
        "create",
        "--server",
        &app.base,
        "--admin-token",
        ADMIN,
        "--function",
        "exp,log",
        "--format",
        "binary32",
        "--min-bits",
        "8",
        "--whole",
        "--estimate",
        "/nonexistent.json",
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("campaign estimate ID FILE"), "{err}");
}
