//! A campaign from end to end with real processes: PostgreSQL, one `tmd-server`, three
//! `tmd-worker`s, and the failures a farm sees (a worker killed mid-lease, a server restart, a
//! server outage). At the end every unit is done exactly once and the HR-cases are those of a
//! local search over the same range.

use std::time::Duration;
use tmd_tests::{assert_exp_local_search, count, every_unit_done_once, Site, EXP_BINARY64_UNITS};

const UNITS: i64 = EXP_BINARY64_UNITS;

async fn wait_for(server: &str, campaign: i64, units: i64, limit: Duration) {
    tmd_tests::wait_for_units(server, campaign, units, limit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_survives_a_killed_worker_a_restart_and_an_outage() {
    let site = Site::new("chaos").await;
    let (mut server, url, campaign, token) = site.exp_campaign(&[
        "--lease-ttl-seconds",
        "4",
        "--sweep-interval-seconds",
        "1",
        "--max-units-per-lease",
        "3",
    ]);
    let worker_args = [
        "--threads",
        "1",
        "--lease-seconds",
        "2",
        "--status-seconds",
        "5",
    ];
    let mut workers = site.workers(&url, &token, 3, &worker_args);
    let limit = Duration::from_secs(240);

    // A worker dies with a lease in hand; it comes back later with its state directory.
    wait_for(&url, campaign, 3, limit).await;
    workers[0].kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    workers[0].restart();

    // The coordinator restarts gracefully in the middle of the campaign.
    wait_for(&url, campaign, 8, limit).await;
    server.restart();

    // The coordinator crashes and stays away for a while: workers wait and spool.
    wait_for(&url, campaign, 12, limit).await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(6)).await;
    server.start_again();

    wait_for(&url, campaign, UNITS, limit).await;
    for w in &mut workers {
        assert!(w.stop(), "a worker stops cleanly on SIGTERM");
    }
    assert_exp_local_search(&every_unit_done_once(&site.db, campaign, UNITS).await);
    let computed: usize = workers.iter().map(|w| w.units_computed()).sum();
    assert!(computed >= UNITS as usize);
    // Each daemon named its back end and device in its lease requests.
    let named = count(
        &site.db,
        "SELECT count(*) FROM workers WHERE backend = 'cpu' AND device LIKE 'cpu (%' \
         AND id >= $1",
        0,
    )
    .await;
    assert_eq!(named, 3);
    site.finish((workers, server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_worker_resumes_without_redoing_finished_units() {
    let site = Site::new("resume").await;
    let (server, url, campaign, token) =
        site.exp_campaign(&["--lease-ttl-seconds", "120", "--max-units-per-lease", "24"]);
    let mut w = site.worker(
        &url,
        &token,
        "w",
        &["--threads", "1", "--lease-seconds", "100000"],
    );
    w.wait_computed(3, Duration::from_secs(120));
    w.kill();
    let before = w.units_computed();
    w.restart();
    wait_for(&url, campaign, UNITS, Duration::from_secs(240)).await;
    assert!(w.stop());
    let log = w.log();
    assert!(log.contains("resuming the lease in hand"), "{log}");
    assert!(before >= 3);
    assert_eq!(
        w.units_computed(),
        UNITS as usize,
        "each unit computed once across the interruption:\n{log}"
    );
    every_unit_done_once(&site.db, campaign, UNITS).await;
    site.finish((w, server)).await;
}
