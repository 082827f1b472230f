//! A campaign in a named format from end to end (issue 14): a real `tmd-server` and a real
//! `tmd-worker` daemon on the CPU search exp in binary32 across the overflow threshold, across
//! the point where results round like 0, and on subnormal results. The campaign's HR-cases and
//! its skipped runs (stored, in the progress, in the csv and wc exports) equal those of
//! `tmd-worker search --format binary32` over the same ranges.

use std::collections::BTreeSet;
use std::time::Duration;
use tmd_test_support::TestDb;
use tmd_tests::{admin, every_unit_done_once, get, scratch, wait_for_units, Server, Worker};

/// exp in binary32: [88.5, 89) holds log(2^128) = 88.72 (overflow above), [-105, -104.5)
/// holds log(2^-151) = -104.67 (rounds like 0 below, subnormal above), and issue 14's
/// [-100, -99.98) has subnormal results only (its -0x1.8feebp+6 is hard on the real grid).
const RANGES: [(&str, &str); 3] = [
    ("-0x1.a4p+6", "-0x1.a2p+6"),
    ("-0x1.9p+6", "-0x1.8fe8p+6"),
    ("0x1.62p+6", "0x1.64p+6"),
];
const MIN_BITS: &str = "12";
const UNIT_BITS: &str = "14";

type Run = (String, String, u64, String);

/// `tmd-worker search` over one range: HR-cases `(x, bits, kind)` and skipped runs.
fn local(from: &str, to: &str) -> (BTreeSet<(String, i64, String)>, BTreeSet<Run>) {
    // `--from=-0x...`: a negative value in its own word would read as a flag.
    let (from, to) = (format!("--from={from}"), format!("--to={to}"));
    let args = [
        "--function",
        "exp",
        "--format",
        "binary32",
        "--min-bits",
        MIN_BITS,
        "--unit-bits",
        UNIT_BITS,
        &from,
        &to,
    ];
    let cases = tmd_tests::local_search(&args);
    let out = std::process::Command::new(tmd_tests::bin("tmd-worker"))
        .arg("search")
        .args(args)
        .args(["--output", "json", "--quiet"])
        .output()
        .expect("run tmd-worker search");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(run_of)
        .collect();
    (cases, runs)
}

fn run_of(s: &serde_json::Value) -> Run {
    (
        s["first"].as_str().unwrap().to_string(),
        s["last"].as_str().unwrap().to_string(),
        s["count"].as_u64().unwrap(),
        s["reason"].as_str().unwrap().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary32_campaign_judges_on_the_real_grid_and_lists_what_it_skips() {
    let db = TestDb::new().await;
    let dir = scratch("format");
    let server = Server::start(db.url(), &dir, &[]);
    let url = server.url();
    let ranges: Vec<String> = RANGES
        .iter()
        .flat_map(|(from, to)| [format!("--from={from}"), format!("--to={to}")])
        .collect();
    let mut args = vec![
        "campaign",
        "create",
        "--function",
        "exp",
        "--format",
        "binary32",
        "--min-bits",
        MIN_BITS,
        "--unit-bits",
        UNIT_BITS,
    ];
    args.extend(ranges.iter().map(String::as_str));
    let c = admin(&url, &args);
    let campaign = c["id"].as_i64().unwrap();
    let units = c["units_total"].as_i64().unwrap();
    assert_eq!(c["format"], "binary32", "{c}");
    assert!(
        c["judged_as"].as_str().unwrap().contains("subnormal"),
        "{c}"
    );
    let token = admin(&url, &["token", "create"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    let mut worker = Worker::start(
        &url,
        &token,
        &dir.join("w"),
        &["--threads", "2", "--exit-when-idle", "--backend", "cpu"],
    );
    wait_for_units(&url, campaign, units, Duration::from_secs(120)).await;
    assert!(
        worker.wait_exit(Duration::from_secs(30)).is_some(),
        "{}",
        worker.log()
    );

    let mut want_cases = BTreeSet::new();
    let mut want_runs = BTreeSet::new();
    for (from, to) in RANGES {
        let (c, r) = local(from, to);
        want_cases.extend(c);
        want_runs.extend(r);
    }
    let reasons: BTreeSet<&str> = want_runs.iter().map(|r| r.3.as_str()).collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["overflow", "underflow"]),
        "the ranges cross both ends"
    );
    assert!(
        want_cases.iter().any(|c| c.0 == "-0x1.8feebp+6"),
        "issue 14's subnormal case"
    );
    let got_cases = every_unit_done_once(&db, campaign, units).await;
    assert_eq!(got_cases, want_cases, "HR-cases equal a local search's");

    let stored: Vec<(String, String, i64, String)> = sqlx::query_as(
        "SELECT first, last, count, reason FROM skipped_runs WHERE campaign_id = $1",
    )
    .bind(campaign)
    .fetch_all(db.pool())
    .await
    .unwrap();
    let got_runs: BTreeSet<Run> = stored
        .into_iter()
        .map(|(f, l, n, r)| (f, l, n as u64, r))
        .collect();
    assert_eq!(got_runs, want_runs, "skipped runs equal a local search's");

    // Shown in the progress, per reason and run by run.
    let p = get(&url, &format!("/campaigns/{campaign}/progress"))
        .await
        .unwrap();
    let listed: BTreeSet<Run> = p["skipped_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(run_of)
        .collect();
    assert_eq!(listed, want_runs, "{p}");
    let total: u64 = want_runs.iter().map(|r| r.2).sum();
    let summed: u64 = p["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["arguments"].as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(summed, total, "{p}");
    assert!(p["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| !s["rule"].as_str().unwrap().is_empty()));

    // And in the csv and wc exports, as comment lines with their reason.
    for format in ["csv", "wc"] {
        let text = reqwest::Client::new()
            .get(format!(
                "{url}/api/v1/campaigns/{campaign}/hr-cases?format={format}"
            ))
            .bearer_auth(tmd_tests::ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        for r in &want_runs {
            let line = format!(
                "# skipped [{}, {}] ({} arguments): {}: ",
                r.0, r.1, r.2, r.3
            );
            assert!(text.contains(&line), "{format}: {line} in\n{text}");
        }
        assert!(text.contains("# format binary32"), "{text}");
    }
    drop(worker);
    drop(server);
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}
