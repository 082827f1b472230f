//! Results we can trust from machines we do not: a replicated, adaptive campaign run by three
//! honest `tmd-worker`s and four bad ones (lazy, forging, bit-flipping, late), each from its
//! own owner. At the end the HR-cases equal a local search, every bad worker is quarantined,
//! no honest one is, and the work spent on replication is reported.

use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tmd_test_support::TestDb;
use tmd_tests::{
    assert_exp_local_search, create_campaign, enrollment_token, get, wait_for_units, Site, Worker,
    EXP_BINARY64_24_UNITS, EXP_BINARY64_UNITS,
};

const UNITS: i64 = EXP_BINARY64_UNITS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_workers_are_caught_and_the_campaign_still_finds_every_hr_case() {
    let site = Site::new("trust").await;
    // Short leases so the late worker's expire quickly; for this test one expired lease (of
    // one) is over the bar, so it is caught while the campaign still runs.
    let server = site.server(&[
        "--lease-ttl-seconds",
        "4",
        "--sweep-interval-seconds",
        "1",
        "--max-units-per-lease",
        "2",
        "--min-expired-leases",
        "1",
        // A mechanism test: one outvoted result is evidence enough here.
        "--min-outvoted-results",
        "1",
    ]);
    let url = server.url();
    let campaign = create_replicated_campaign(&url);
    let mut workers = start_workers(&site, &url);
    wait_for_units(&url, campaign, UNITS, Duration::from_secs(300)).await;
    check_quarantines(&url).await;
    check_replication(&url, campaign).await;
    check_results(&site.db, campaign).await;

    let forger = &workers.iter().find(|(n, _)| n == "forge").unwrap().1;
    assert!(
        forger.log().contains("quarantined this worker"),
        "the forger is told why it gets no work: {}",
        forger.log()
    );
    for (name, w) in &mut workers {
        if name.starts_with("honest") {
            assert!(w.stop(), "{name} stops cleanly");
        } else {
            w.kill();
        }
    }
    site.finish((workers, server)).await;
}

/// The campaign over [`EXP_BINARY64_24_UNITS`], replicated twice across distinct owners,
/// adaptive, with audits: its id.
fn create_replicated_campaign(url: &str) -> i64 {
    let mut args = EXP_BINARY64_24_UNITS.to_vec();
    args.extend([
        "--replication",
        "2",
        "--distinct-owners",
        "--adaptive",
        "--trust-after",
        "4",
        "--audit-rate",
        "0.25",
    ]);
    let c = create_campaign(url, &args);
    assert_eq!(c["units_total"], UNITS, "{c}");
    assert_eq!(c["adaptive"], true, "{c}");
    c["id"].as_i64().unwrap()
}

/// Three honest workers and four bad ones (lazy, forging, bit-flipping, late), each its own
/// owner, with their names.
fn start_workers(site: &Site, url: &str) -> Vec<(String, Worker)> {
    let token = |owner: &str| enrollment_token(url, &["--owner", owner]);
    let common = [
        "--threads",
        "1",
        "--lease-seconds",
        "2",
        "--status-seconds",
        "5",
    ];
    let mut workers = Vec::new();
    for i in 0..3 {
        let name = format!("honest-{i}");
        let mut args = common.to_vec();
        args.extend(["--name", &name]);
        workers.push((name.clone(), site.worker(url, &token(&name), &name, &args)));
    }
    for mode in ["lazy", "forge", "flip", "late"] {
        let mut args = common.to_vec();
        args.extend(["--name", mode, "--misbehave", mode]);
        workers.push((
            mode.to_string(),
            site.worker(url, &token(mode), mode, &args),
        ));
    }
    workers
}

/// Every bad worker is quarantined, each for its own fault, and no honest one.
async fn check_quarantines(url: &str) {
    // The bad workers were refused work as soon as they were caught; wait for the last
    // quarantine (the late worker's) if the campaign outran it.
    let start = Instant::now();
    let by_name = loop {
        let list = get(url, "/workers").await.expect("workers");
        let by_name: Vec<(String, Value)> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|w| (w["name"].as_str().unwrap().to_string(), w.clone()))
            .collect();
        let bad_left = by_name
            .iter()
            .filter(|(n, w)| !n.starts_with("honest") && w["quarantined_at"].is_null())
            .count();
        if bad_left == 0 || start.elapsed() > Duration::from_secs(30) {
            break by_name;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for (name, w) in &by_name {
        let quarantined = !w["quarantined_at"].is_null();
        if name.starts_with("honest") {
            assert!(!quarantined, "honest worker quarantined: {w}");
            assert_eq!(w["reputation"]["invalid"], 0, "{w}");
        } else {
            assert!(quarantined, "{name} was not caught: {w}");
            eprintln!("{name}: {}", w["quarantine_reason"]);
        }
    }
    let reason = |name: &str| {
        by_name.iter().find(|(n, _)| n == name).unwrap().1["quarantine_reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(reason("forge").contains("refutes"), "{}", reason("forge"));
    // A lazy result is refuted by a verified case of its unit when it has one (proof before
    // votes), else outvoted.
    assert!(
        reason("lazy").contains("outvoted") || reason("lazy").contains("left out"),
        "{}",
        reason("lazy")
    );
    assert!(reason("flip").contains("outvoted"), "{}", reason("flip"));
    assert!(reason("late").contains("expired"), "{}", reason("late"));
}

/// The campaign is complete, and the work spent on replication is reported.
async fn check_replication(url: &str, campaign: i64) {
    let progress = get(url, &format!("/campaigns/{campaign}/progress"))
        .await
        .unwrap();
    assert_eq!(progress["complete"], true, "{progress}");
    let r = &progress["replication"];
    eprintln!(
        "replication: results={} void={} outvoted={} alone={} work_factor={:.3}",
        r["results"], r["void"], r["outvoted"], r["alone"], r["work_factor"]
    );
    assert!(r["work_factor"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(
        r["outvoted"].as_i64().unwrap() + r["refuted"].as_i64().unwrap() >= 1,
        "{r}"
    );
}

/// Every done unit stands on honest results, and the HR-cases are a local search's.
async fn check_results(db: &TestDb, campaign: i64) {
    // Every done unit stands on live results of honest workers only.
    let vouched: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT u.id, count(r.id) FILTER (WHERE NOT r.void AND r.verdict IN ('agreed', 'alone')) \
         FROM units u LEFT JOIN results r ON r.unit_id = u.id \
         WHERE u.campaign_id = $1 GROUP BY u.id",
    )
    .bind(campaign)
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(vouched.len() as i64, UNITS);
    assert!(vouched.iter().all(|(_, n)| *n >= 1), "{vouched:?}");
    let bad_live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM results r JOIN workers w ON w.id = r.worker_id \
         WHERE NOT r.void AND w.quarantined_at IS NOT NULL",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(bad_live, 0, "a quarantined worker's results are all void");

    let rows: Vec<(String, i32, String)> =
        sqlx::query_as("SELECT x, bits, kind FROM hr_cases WHERE campaign_id = $1")
            .bind(campaign)
            .fetch_all(db.pool())
            .await
            .unwrap();
    let got: BTreeSet<(String, i64, String)> = rows
        .into_iter()
        .map(|(x, b, k)| (x, i64::from(b), k))
        .collect();
    // An all-honest search's.
    assert_exp_local_search(&got);
}

/// A lab that forgets `--trusted` and runs one worker: the campaign (two results from different
/// owners by default) cannot advance, and the worker's log says why it gets no work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_owner_is_told_that_units_wait_for_a_second_owner() {
    let site = Site::new("lone-owner").await;
    let server = site.server(&["--idle-retry-seconds", "1"]);
    let url = server.url();
    let c = create_campaign(&url, &EXP_BINARY64_24_UNITS);
    assert_eq!(c["replication"], 2, "{c}");
    let token = enrollment_token(&url, &["--owner", "lab"]);
    let worker = site.worker(
        &url,
        &token,
        "lone",
        &["--threads", "2", "--lease-seconds", "2"],
    );
    let t = Instant::now();
    while !worker.log().contains("no work now") {
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "no idle line in 180 s: {}",
            worker.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = worker.log();
    let idle = log.lines().find(|l| l.contains("no work now")).unwrap();
    assert!(
        idle.contains("wait for a replica from another worker or owner"),
        "{idle}"
    );
    site.finish((worker, server)).await;
}
