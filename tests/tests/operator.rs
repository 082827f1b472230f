//! An operator's day with real processes: a worker restarted against another
//! coordinator on the same database keeps its identity, its lease and its results; a worker
//! whose state directory is deleted under it stops with that cause and gives its units back
//! instead of leaving them to the lease's expiry.

use std::time::{Duration, Instant};
use tmd_tests::{
    assert_exp_local_search, count, create_exp_campaign, every_unit_done_once, wait_for_units,
    Server, Site, EXP_BINARY64_UNITS,
};

const UNITS: i64 = EXP_BINARY64_UNITS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_repointed_at_another_coordinator_keeps_its_identity_and_its_lease() {
    let site = Site::new("operator-repoint").await;
    // A lease the killed process asked for but never wrote down (kill -9 lands between the
    // answer and the write) is the server's to expire: soon enough for the test.
    let args = ["--lease-ttl-seconds", "10", "--sweep-interval-seconds", "1"];
    let servers: Vec<Server> = (0..2)
        .map(|i| site.server_in(&format!("s{i}"), &args))
        .collect();
    let (a, b) = (servers[0].url(), servers[1].url());
    let (campaign, token) = create_exp_campaign(&a);
    let mut w = site.worker(&a, &token, "w", &["--threads", "1", "--exit-when-idle"]);
    w.wait_computed(2, Duration::from_secs(120));
    let id = w.worker_id().expect("registered");
    // kill -9 in the middle of its lease (most likely: its units take a tenth of a second),
    // then the same state directory on the other replica.
    let leases = w.state_dir.join("leases");
    let leases_in_hand = || std::fs::read_dir(&leases).map(|d| d.count()).unwrap_or(0);
    let start = Instant::now();
    while leases_in_hand() == 0 && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(5));
    }
    w.kill();
    let held = leases_in_hand() > 0;
    w.restart_at(&b);
    let status = w
        .wait_exit(Duration::from_secs(300))
        .unwrap_or_else(|| panic!("the worker did not finish: {}", w.log()));
    assert!(status.success(), "{}", w.log());
    let log = w.log();
    assert_eq!(w.worker_id(), Some(id), "the same worker: {log}");
    assert!(log.contains("keeping its identity"), "{log}");
    let second_run = log.split("keeping its identity").nth(1).unwrap();
    assert!(
        !held || second_run.contains("resuming the lease in hand"),
        "the lease of the first run goes on at the other replica: {log}"
    );
    assert!(!log.contains("registering again"), "{log}");
    assert!(
        !log.contains("forbidden") && !log.contains("refused"),
        "no result refused: {log}"
    );
    assert_eq!(
        count(&site.db, "SELECT count(*) FROM workers WHERE id <> $1", id).await,
        0,
        "no second identity"
    );
    assert_exp_local_search(&every_unit_done_once(&site.db, campaign, UNITS).await);
    site.finish((w, servers)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_state_directory_stops_the_worker_with_its_cause_and_gives_its_units_back() {
    let site = Site::new("operator-state-dir").await;
    let db = &site.db;
    let (server, url, campaign, token) = site.exp_campaign(&[
        "--lease-ttl-seconds",
        "600",
        "--sweep-interval-seconds",
        "1",
    ]);
    let mut w = site.worker(
        &url,
        &token,
        "w",
        &[
            "--threads",
            "1",
            "--units-in-flight",
            "1",
            "--lease-seconds",
            "600",
        ],
    );
    w.wait_computed(1, Duration::from_secs(120));
    std::fs::remove_dir_all(&w.state_dir).unwrap();
    let status = w
        .wait_exit(Duration::from_secs(120))
        .unwrap_or_else(|| panic!("the worker did not stop: {}", w.log()));
    let log = w.log();
    assert!(!status.success(), "{log}");
    // Whether a result's spooling or a new lease's writing meets the deleted folder first,
    // the run ends on that error, not on a later read of the spool.
    let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert!(
        last.starts_with("Error: ")
            && last.contains("state directory")
            && last.contains("given back"),
        "the pipeline's own error ends the run: {log}"
    );
    assert!(log.contains("lease released"), "{log}");
    let id: i64 = sqlx::query_scalar("SELECT id FROM workers")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(
        count(
            db,
            "SELECT count(*) FROM leases WHERE worker_id = $1 AND state = 'active'",
            id
        )
        .await,
        0,
        "no lease left active: {log}"
    );
    assert_eq!(
        count(
            db,
            "SELECT count(*) FROM units WHERE campaign_id = $1 AND state = 'leased'",
            campaign
        )
        .await,
        0,
        "every unit not done is back in the pool"
    );
    // Another worker finishes the campaign at once, without waiting for an expiry.
    let mut other = site.worker(&url, &token, "w2", &["--threads", "1", "--exit-when-idle"]);
    wait_for_units(&url, campaign, UNITS, Duration::from_secs(240)).await;
    assert!(other.wait_exit(Duration::from_secs(60)).is_some());
    every_unit_done_once(db, campaign, UNITS).await;
    site.finish((w, other, server)).await;
}
