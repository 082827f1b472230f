//! A real `tmd-worker` whose results the server refuses as unacceptable:
//! it used to drop them silently and leave its lease to expire, so an honest worker was
//! quarantined for expired leases. Now it releases those units as failed, the failures count
//! against it (not as expiries), and no unit is quarantined by one worker.

use std::time::{Duration, Instant};
use tmd_tests::{create_campaign, enrollment_token, get, Site};

/// exp in binary32 on four units of 1024 arguments just above 1, at `min_bits`, and the
/// flags `extra`.
fn exp_binary32<'a>(min_bits: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--function",
        "exp",
        "--format",
        "binary32",
        "--min-bits",
        min_bits,
        "--unit-bits",
        "10",
        "--from",
        "0x1p+0",
        "--to",
        "0x1.002p+0",
    ];
    args.extend(extra);
    args
}

#[tokio::test]
async fn a_worker_releases_the_units_the_server_refuses() {
    let site = Site::new("hostile-refused").await;
    let mut first = site.server(&[]);
    let url = first.url();
    // Units of 1024 binary32 arguments hold about 8 HR-cases each at 8 bits.
    let c = create_campaign(&url, &exp_binary32("8", &[]));
    let campaign = c["id"].as_i64().unwrap();
    let token = enrollment_token(&url, &["--trusted"]);
    // The server now takes at most 2 cases per result: every post is refused with 400.
    first.stop();
    let server = site.server(&["--max-cases-per-result", "2"]);
    let url = server.url();
    let mut w = site.worker(
        &url,
        &token,
        "w",
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
    site.finish((w, first, server)).await;
}

/// Item 11: `tmd-server serve --tls-cert --tls-key` serves HTTPS; a worker given the lab's CA
/// (`--ca-cert`) works through it, and the admin commands too.
#[tokio::test]
async fn a_campaign_runs_over_https_with_a_private_ca() {
    let site = Site::new("hostile-tls").await;
    let (db, dir) = (&site.db, &site.dir);
    let pki = tmd_test_support::private_ca(dir);
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (ca, cert, key) = (path(&pki.ca), path(&pki.cert), path(&pki.key));
    let port = tmd_tests::free_port();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let mut server = std::process::Command::new(tmd_tests::bin("tmd-server"))
        .args(["serve", "--database-url", db.url()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-token", tmd_tests::ADMIN_TOKEN])
        .args(["--tls-cert", &cert, "--tls-key", &key])
        .stderr(log)
        .spawn()
        .unwrap();
    let url = format!("https://localhost:{port}");
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap())
        .build()
        .unwrap();
    let start = Instant::now();
    while client
        .get(format!("{url}/readyz"))
        .send()
        .await
        .map(|r| !r.status().is_success())
        .unwrap_or(true)
    {
        assert!(start.elapsed() < Duration::from_secs(30), "no HTTPS server");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = create_campaign(&url, &exp_binary32("12", &["--ca-cert", &ca]));
    let campaign = c["id"].as_i64().unwrap();
    let token = enrollment_token(&url, &["--trusted", "--ca-cert", &ca]);
    let mut w = site.worker(
        &url,
        &token,
        "w",
        &["--threads", "1", "--ca-cert", &ca, "--exit-when-idle"],
    );
    let start = Instant::now();
    loop {
        let p: serde_json::Value = client
            .get(format!("{url}/api/v1/campaigns/{campaign}/progress"))
            .bearer_auth(tmd_tests::ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if p["complete"] == true {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{}", w.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(w.stop());
    // Without the CA, the same worker refuses the server's certificate.
    let mut stranger = site.worker(&url, &token, "s", &["--threads", "1"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stranger.kill();
    let log = stranger.log();
    assert!(!log.contains("registered"), "{log}");
    assert!(log.contains("certificate"), "{log}");
    let _ = server.kill();
    let _ = server.wait();
    site.finish((w, stranger)).await;
}
