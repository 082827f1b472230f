//! The main job's progress loop (`scripts/follow-campaign.sh`, used by
//! `scripts/local-campaign.sh`) against a worker that exits right after posting its last
//! result: the loop must report the campaign complete, never "the worker stopped early".

use std::path::Path;
use std::process::Command;
use tmd_tests::{bin, create_campaign, enrollment_token, exp_binary64, Site, ADMIN_TOKEN};

/// Four units of exp in binary64, a fraction of a second each.
const CAMPAIGN: [&str; 12] = exp_binary64("0x1p+0", "0x1.0004p+0");

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Runs the loop as local-campaign.sh does: the worker a background job of the same shell,
/// polling without pause so that a progress read often lands just before the last post.
fn follow(server: &str, campaign: i64, token: &str, dir: &Path) -> std::process::Output {
    let state = dir.join(format!("worker-{campaign}"));
    let log = dir.join(format!("worker-{campaign}.log"));
    let script = format!(
        ". scripts/follow-campaign.sh\n\
         {worker} run --server {server} --token {token} --state-dir {state} \
           --max-units 4 --exit-when-idle > {log} 2>&1 &\n\
         follow_campaign {server} {admin} {campaign} $! {log}",
        worker = bin("tmd-worker").display(),
        state = state.display(),
        log = log.display(),
        admin = ADMIN_TOKEN,
    );
    Command::new("bash")
        .args(["-c", &script])
        .current_dir(repo_root())
        .env("POLL_SECONDS", "0")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run bash")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_progress_loop_reports_success_when_the_worker_exits_after_its_last_post() {
    let site = Site::new("progress-loop").await;
    let server = site.server(&[]);
    let url = server.url();
    // Several campaigns in a row: each is one chance for the last post to land between the
    // loop's progress read and its look at the worker.
    for round in 0..4 {
        let c = create_campaign(&url, &CAMPAIGN);
        assert_eq!(c["units_total"], 4, "{c}");
        let campaign = c["id"].as_i64().unwrap();
        let token = enrollment_token(&url, &["--trusted"]);
        let out = follow(&url, campaign, &token, &site.dir);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.contains("4/4 units") && stderr.contains("COMPLETE"),
            "round {round}: the loop failed although the worker finished: {stderr}"
        );
    }
    site.finish(server).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_progress_loop_fails_when_the_worker_stops_before_the_end() {
    let site = Site::new("progress-loop-early").await;
    let server = site.server(&[]);
    let url = server.url();
    let campaign = create_campaign(&url, &CAMPAIGN)["id"].as_i64().unwrap();
    // A worker that is not running at all: the loop must say so instead of waiting forever.
    let log = site.dir.join("none.log");
    std::fs::write(&log, "worker log line\n").unwrap();
    let out = Command::new("bash")
        .args([
            "-c",
            &format!(
                ". scripts/follow-campaign.sh\ntrue & pid=$!; wait $pid\n\
                 follow_campaign {url} {ADMIN_TOKEN} {campaign} $pid {}",
                log.display()
            ),
        ])
        .current_dir(repo_root())
        .env("POLL_SECONDS", "0")
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("0/4 units"), "{stderr}");
    assert!(stderr.contains("worker log line"), "{stderr}");
    site.finish(server).await;
}
