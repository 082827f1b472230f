//! A real `tmd-worker` whose results the server refuses as unacceptable (issue 13, item 7):
//! it used to drop them silently and leave its lease to expire, so an honest worker was
//! quarantined for expired leases. Now it releases those units as failed, the failures count
//! against it (not as expiries), and no unit is quarantined by one worker.

use std::time::{Duration, Instant};
use tmd_test_support::TestDb;
use tmd_tests::{admin, get, scratch, Server, Worker};

#[tokio::test]
async fn a_worker_releases_the_units_the_server_refuses() {
    let db = TestDb::new().await;
    let dir = scratch("hostile-refused");
    let mut first = Server::start(db.url(), &dir, &[]);
    let url = first.url();
    // Units of 1024 binary32 arguments hold about 8 HR-cases each at 8 bits.
    let c = admin(
        &url,
        &[
            "campaign",
            "create",
            "--function",
            "exp",
            "--format",
            "binary32",
            "--min-bits",
            "8",
            "--unit-bits",
            "10",
            "--from",
            "0x1p+0",
            "--to",
            "0x1.002p+0",
        ],
    );
    let campaign = c["id"].as_i64().unwrap();
    let token = admin(&url, &["token", "create"])["token"]
        .as_str()
        .unwrap()
        .to_string();
    // The server now takes at most 2 cases per result: every post is refused with 400.
    first.stop();
    let server = Server::start(db.url(), &dir, &["--max-cases-per-result", "2"]);
    let url = server.url();
    let mut w = Worker::start(
        &url,
        &token,
        &dir.join("w"),
        &[
            "--threads",
            "1",
            "--lease-seconds",
            "1",
            "--status-seconds",
            "1",
        ],
    );
    let start = Instant::now();
    let worker = loop {
        let workers = get(&url, "/workers").await.unwrap_or_default();
        if let Some(info) = workers.as_array().and_then(|a| a.first()).cloned() {
            if info["quarantined_at"].is_string() {
                break info;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{}", w.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    w.kill();
    let log = w.log();
    assert!(log.contains("result refused"), "{log}");
    assert!(log.contains("lease released"), "{log}");
    let r = &worker["reputation"];
    assert_eq!(r["leases_expired"], 0, "{worker}");
    assert!(r["failed_units"].as_i64().unwrap() >= 5, "{worker}");
    assert!(
        worker["quarantine_reason"]
            .as_str()
            .unwrap()
            .contains("failed"),
        "{worker}"
    );
    // Its reports were taken back with it: no unit is lost to quarantine.
    let p = get(&url, &format!("/campaigns/{campaign}/progress"))
        .await
        .unwrap();
    assert_eq!(p["quarantined"]["units"], 0, "{p}");
    assert_eq!(p["pending"]["units"], 4, "{p}");
    drop(server);
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
}
