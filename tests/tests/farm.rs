//! A farm's daemons at the edges of a campaign, with real processes: daemons run
//! with `--exit-when-idle` finish a campaign whose last lease belonged to a killed worker; a
//! daemon restarted while its predecessor still holds the state directory waits and resumes
//! its lease; results posted in batches survive a coordinator crash and a worker crash; two
//! coordinators on one database do every unit once.

use std::time::{Duration, Instant};
use tmd_tests::{
    assert_exp_local_search, count, create_exp_campaign, every_unit_done_once, Server, Site,
    Worker, EXP_BINARY64_UNITS,
};

const UNITS: i64 = EXP_BINARY64_UNITS;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_daemons_finish_a_campaign_whose_last_lease_was_killed() {
    let site = Site::new("farm-idle").await;
    let db = &site.db;
    let (server, url, campaign, token) = site.exp_campaign(&[
        "--lease-ttl-seconds",
        "3",
        "--sweep-interval-seconds",
        "1",
        "--max-units-per-lease",
        "2",
        "--idle-retry-seconds",
        "1",
    ]);
    let args = ["--threads", "1", "--lease-seconds", "1", "--exit-when-idle"];
    let mut workers = site.workers(&url, &token, 2, &args);
    // Wait for the end of the campaign: nothing pending, and a worker holding a lease with
    // units still leased. That worker dies.
    let start = Instant::now();
    let victim = loop {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "no end of campaign seen: {}",
            workers[0].log()
        );
        let pending = count(
            db,
            "SELECT count(*) FROM units WHERE campaign_id = $1 AND state = 'pending'",
            campaign,
        )
        .await;
        let holders: Vec<i64> = sqlx::query_scalar(
            "SELECT DISTINCT l.worker_id FROM leases l JOIN units u ON u.lease_id = l.id \
             WHERE l.campaign_id = $1 AND l.state = 'active' AND u.state = 'leased'",
        )
        .bind(campaign)
        .fetch_all(db.pool())
        .await
        .unwrap();
        if pending == 0 {
            if let Some(i) = (0..2).find(|&i| {
                workers[i]
                    .worker_id()
                    .is_some_and(|id| holders.contains(&id))
            }) {
                break i;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let victim_id = workers[victim].worker_id().unwrap();
    workers[victim].kill();
    let survivor = &mut workers[1 - victim];
    let status = survivor
        .wait_exit(Duration::from_secs(120))
        .unwrap_or_else(|| panic!("the survivor did not exit: {}", survivor.log()));
    assert!(status.success(), "{}", survivor.log());
    let log = survivor.log();
    assert!(log.contains("no work left on the server"), "{log}");
    let expired: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM leases WHERE campaign_id = $1 AND worker_id = $2 AND state = 'expired'",
    )
    .bind(campaign)
    .bind(victim_id)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert!(expired >= 1, "the killed worker's last lease expired");
    every_unit_done_once(db, campaign, UNITS).await;
    site.finish((workers, server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_restarted_after_kill_9_waits_for_the_state_directory_and_resumes() {
    let site = Site::new("farm-lock").await;
    let (server, url, campaign, token) =
        site.exp_campaign(&["--lease-ttl-seconds", "120", "--max-units-per-lease", "24"]);
    let mut w = site.worker(
        &url,
        &token,
        "w",
        &[
            "--threads",
            "1",
            "--lease-seconds",
            "100000",
            "--state-lock-wait",
            "30",
        ],
    );
    w.wait_computed(2, Duration::from_secs(120));
    // The predecessor is killed, and (as a GPU context being torn down does) its lock lives
    // on a while: held here on its behalf.
    w.kill();
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(w.state_dir.join("lock"))
        .unwrap();
    lock.try_lock().expect("the killed worker's lock is free");
    w.restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        w.wait_exit(Duration::from_millis(10)).is_none(),
        "the new daemon waits instead of exiting: {}",
        w.log()
    );
    assert!(w.log().contains("holds the state directory"), "{}", w.log());
    drop(lock);
    tmd_tests::wait_for_units(&url, campaign, UNITS, Duration::from_secs(240)).await;
    assert!(w.stop());
    let log = w.log();
    assert!(log.contains("resuming the lease in hand"), "{log}");
    assert!(!log.contains("another tmd-worker is using"), "{log}");
    assert_eq!(
        w.units_computed(),
        UNITS as usize,
        "each unit computed once across the restart:\n{log}"
    );
    every_unit_done_once(&site.db, campaign, UNITS).await;
    site.finish((w, server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_results_survive_a_server_crash_and_a_worker_crash() {
    let site = Site::new("farm-batches").await;
    let (mut server, url, campaign, token) = site.exp_campaign(&[
        "--lease-ttl-seconds",
        "8",
        "--sweep-interval-seconds",
        "1",
        "--max-units-per-lease",
        "4",
        "--idle-retry-seconds",
        "1",
    ]);
    let args = ["--threads", "1", "--lease-seconds", "2"];
    let mut workers = site.workers(&url, &token, 2, &args);
    let limit = Duration::from_secs(300);
    // The coordinator crashes while results stream in, and comes back a few seconds later:
    // the workers keep computing and spooling meanwhile.
    tmd_tests::wait_for_units(&url, campaign, 4, limit).await;
    server.kill();
    tokio::time::sleep(Duration::from_secs(4)).await;
    server.start_again();
    // A worker dies with results computed and not yet posted; it comes back at once.
    tmd_tests::wait_for_units(&url, campaign, 12, limit).await;
    workers[0].kill_and_restart_at_once();
    // The new process must have its signals in hand before it is asked to stop: when the
    // campaign ends within its first milliseconds, a SIGTERM would find the default action.
    let restarted = Instant::now();
    while workers[0].log().matches("tmd-worker starting").count() < 2 {
        assert!(
            restarted.elapsed() < limit,
            "the restarted worker never started: {}",
            workers[0].log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tmd_tests::wait_for_units(&url, campaign, UNITS, limit).await;
    for w in &mut workers {
        assert!(w.stop(), "a worker stops cleanly: {}", w.log());
        let spool = std::fs::read_dir(w.state_dir.join("spool"))
            .unwrap()
            .count();
        assert_eq!(spool, 0, "no result is left behind");
        assert!(w.log().contains("results posted"), "{}", w.log());
    }
    assert_exp_local_search(&every_unit_done_once(&site.db, campaign, UNITS).await);
    site.finish((workers, server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_coordinators_on_one_database_do_every_unit_once() {
    let site = Site::new("farm-two-coordinators").await;
    // Both replicas sweep often and hand out small leases, so their expiry passes, lease
    // claims and completion checks overlap throughout the campaign.
    let args = [
        "--lease-ttl-seconds",
        "6",
        "--sweep-interval-seconds",
        "1",
        "--max-units-per-lease",
        "2",
        "--idle-retry-seconds",
        "1",
    ];
    let servers: Vec<Server> = (0..2)
        .map(|i| site.server_in(&format!("s{i}"), &args))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    // The campaign and the enrollment token are made through one replica; the workers,
    // half on each, see them through the other too.
    let (campaign, token) = create_exp_campaign(&urls[0]);
    let worker_args = ["--threads", "1", "--lease-seconds", "1", "--exit-when-idle"];
    let mut workers: Vec<Worker> = (0..4)
        .map(|i| site.worker(&urls[i % 2], &token, &format!("w{i}"), &worker_args))
        .collect();
    for w in &mut workers {
        let status = w
            .wait_exit(Duration::from_secs(300))
            .unwrap_or_else(|| panic!("a worker did not finish: {}", w.log()));
        assert!(status.success(), "{}", w.log());
    }
    // A unit handed out by both replicas would be computed twice; so is one whose lease
    // expired on a loaded machine, which only a lease's expiry excuses.
    let computed: usize = workers.iter().map(|w| w.units_computed()).sum();
    let expired = count(
        &site.db,
        "SELECT count(*) FROM leases WHERE campaign_id = $1 AND state = 'expired'",
        campaign,
    )
    .await;
    if expired == 0 {
        assert_eq!(computed, UNITS as usize, "no unit is computed twice");
    } else {
        assert!(computed >= UNITS as usize);
    }
    for url in &urls {
        let p = tmd_tests::get(url, &format!("/campaigns/{campaign}/progress"))
            .await
            .expect("progress from each replica");
        assert_eq!(p["state"], "complete", "{p}");
        assert_eq!(p["done"]["units"], UNITS, "{p}");
    }
    assert_exp_local_search(&every_unit_done_once(&site.db, campaign, UNITS).await);
    site.finish((workers, servers)).await;
}
