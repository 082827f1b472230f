//! The dashboard: the page is self-contained (no external resource, a strict CSP), and in
//! headless Chromium (Debian's `chromium`, never a downloaded browser) against the real server
//! and a seeded campaign it loads without script errors and shows the campaign's numbers.
//! The test leaves a screenshot at `target/dashboard.png` for people to look at.
//!
//! Without Chromium (and when it cannot be installed with apt-get), the browser test fails
//! in CI (`CI` set) and is skipped with a printed reason elsewhere.

mod common;

use common::seed::{seeded_campaign, Seeded};
use common::{TestApp, ADMIN};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[tokio::test]
async fn the_page_is_self_contained() {
    let app = TestApp::new().await;
    let resp = app.http.get(app.url("/")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.starts_with("default-src 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("script-src 'sha256-") && csp.contains("style-src 'sha256-"));
    let html = resp.text().await.unwrap();
    assert!(html.starts_with("<!doctype html>"));
    // The only absolute URL is the SVG namespace, an identifier that is never fetched.
    let urls: Vec<&str> = html
        .match_indices("http")
        .map(|(i, _)| &html[i..(i + 40).min(html.len())])
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .filter(|u| !u.starts_with("http://www.w3.org/2000/svg"))
        .collect();
    assert!(urls.is_empty(), "external references: {urls:?}");
    for tag in ["<link", "<img", "<iframe", " src=", "@import", "url("] {
        assert!(!html.contains(tag), "the page loads something: {tag}");
    }
    // The token is read from the fragment, which browsers never send, and kept per tab.
    assert!(html.contains("sessionStorage") && !html.contains("localStorage"));
    assert!(html.contains("'Authorization': 'Bearer '"));
}

/// Chromium, installed from Debian if missing and we may; `Err` says why there is none.
fn chromium() -> Result<PathBuf, String> {
    fn find() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("CHROMIUM") {
            return Some(PathBuf::from(p));
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
            .find(|p| p.is_file())
    }
    if let Some(p) = find() {
        return Ok(p);
    }
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root || !Path::new("/usr/bin/apt-get").exists() {
        return Err(
            "no chromium on PATH, and not root with apt-get to install it \
                    (scripts/setup.sh installs it)"
                .into(),
        );
    }
    eprintln!("installing Debian's chromium (apt-get install -y chromium)");
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !apt(&["install", "-y", "-qq", "chromium"]) {
        apt(&["update", "-qq"]);
        apt(&["install", "-y", "-qq", "chromium"]);
    }
    find().ok_or_else(|| "apt-get could not install chromium".into())
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Runs headless Chromium on `url` with its own throwaway profile; returns stdout.
async fn headless(bin: &Path, url: &str, extra: &[String]) -> String {
    let profile = std::env::temp_dir().join(format!("tmd-chromium-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&profile).unwrap();
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        // Virtual time runs while the page waits on timers, and stops while requests are in
        // flight: the page gets its first loads and two refreshes, whatever the machine's
        // speed.
        "--virtual-time-budget=12000",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("--user-data-dir={}", profile.display()));
    args.extend_from_slice(extra);
    args.push(url.to_string());
    let started = Instant::now();
    let child = tokio::process::Command::new(bin)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("chromium finishes within 2 minutes")
        .unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "chromium failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("chromium on {url}: {:?}", started.elapsed());
    stdout
}

/// The value of attribute `name` on the element with id `id` in serialised HTML.
fn attr(dom: &str, id: &str, name: &str) -> Option<String> {
    let at = dom.find(&format!(" id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let key = format!(" {name}=\"");
    let v = tag.find(&key)? + key.len();
    Some(tag[v..v + tag[v..].find('"')?].to_string())
}

fn check(dom: &str, id: &str, name: &str, expected: impl ToString) {
    assert_eq!(
        attr(dom, id, name).as_deref(),
        Some(expected.to_string().as_str()),
        "#{id}[{name}] in:\n{dom}"
    );
}

/// Where the screenshot goes: the workspace's `target/` (or `CARGO_TARGET_DIR`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

/// Requests served so far for every campaign's progress, and for one campaign's (`/metrics`).
async fn requests(app: &TestApp) -> (u64, u64) {
    let text = app.metrics().await;
    let count = |route: &str| {
        let key = format!(
            "tmd_http_request_duration_seconds_count{{method=\"GET\",route=\"{route}\",status=\"200\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    (
        count("/api/v1/campaigns/progress"),
        count("/api/v1/campaigns/{id}/progress"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_seeded_campaign_in_chromium() {
    let bin = match chromium() {
        Ok(b) => b,
        Err(why) if in_ci() => panic!("the dashboard test needs Chromium in CI: {why}"),
        Err(why) => {
            eprintln!("SKIPPED the_dashboard_shows_a_seeded_campaign_in_chromium: {why}");
            return;
        }
    };
    let app = TestApp::new().await;
    let Seeded {
        id,
        cases,
        units_total,
        units_done,
        ..
    } = seeded_campaign(&app).await;
    // An estimate of an hour per unit, a case per 256 arguments: the burn-up's projection,
    // the binades' estimated seconds and the HR-cases it expects.
    let (status, v) = app
        .admin(
            reqwest::Method::POST,
            &format!("/api/v1/campaigns/{id}/estimate"),
            Some(seeded_estimate()),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let progress = app.progress(id).await;
    let (_, times) = app
        .admin(
            reqwest::Method::GET,
            &format!("/api/v1/campaigns/{id}/times"),
            None,
        )
        .await;

    // Without a token the page asks for one.
    let dom = headless(&bin, &app.url("/"), &["--dump-dom".into()]).await;
    check(&dom, "app", "data-state", "token");
    assert!(dom.contains("id=\"token-input\""), "{dom}");
    // A wrong token is refused, and asked for again.
    let dom = headless(
        &bin,
        &app.url("/#token=not-the-admin-token"),
        &["--dump-dom".into()],
    )
    .await;
    check(&dom, "app", "data-state", "token");
    assert!(dom.contains("refused the token"), "{dom}");

    // The campaigns list.
    let before = requests(&app).await;
    let dom = headless(
        &bin,
        &app.url(&format!("/#token={ADMIN}")),
        &["--dump-dom".into()],
    )
    .await;
    check(&dom, "errors", "data-count", 0);
    check(&dom, "app", "data-state", "ready");
    check(&dom, "app", "data-view", "list");
    check(&dom, "campaigns", "data-count", 1);
    // The queue (the one campaign, active) and the farm's workers.
    check(&dom, "queue", "data-count", 1);
    assert!(
        dom.contains(&format!("data-campaign=\"{id}\" data-priority=\"0\"")),
        "{dom}"
    );
    check(&dom, "workers-table", "data-count", 1);
    assert!(
        dom.contains(&format!("data-hr=\"{}\"", cases.len())),
        "{dom}"
    );
    // The name is shown as text, never interpreted as HTML.
    assert!(dom.contains("seeded &lt;b&gt;exp&lt;/b&gt;"), "{dom}");
    // The list asked for every campaign's progress at once, never campaign by campaign.
    let after = requests(&app).await;
    assert!(after.0 > before.0, "{before:?} -> {after:?}");
    assert_eq!(after.1, before.1, "no request for one campaign's progress");

    // One campaign: every number, the charts and the tables.
    let page = app.url(&format!("/?campaign={id}#token={ADMIN}"));
    let dom = headless(&bin, &page, &["--dump-dom".into()]).await;
    check(&dom, "errors", "data-count", 0);
    check(&dom, "app", "data-state", "ready");
    check(&dom, "app", "data-view", "campaign");
    let refreshes: u32 = attr(&dom, "app", "data-refreshes")
        .unwrap()
        .parse()
        .unwrap();
    assert!(refreshes >= 2, "the page refreshes by itself: {refreshes}");
    check(&dom, "units-done", "data-value", units_done);
    check(&dom, "units-total", "data-value", units_total);
    check(&dom, "units-leased", "data-value", 1);
    check(
        &dom,
        "units-pending",
        "data-value",
        units_total - units_done - 1,
    );
    check(&dom, "units-quarantined", "data-value", 0);
    check(&dom, "outvoted", "data-value", 0);
    check(&dom, "hr-count", "data-value", cases.len());
    check(
        &dom,
        "percent-done",
        "data-value",
        format!("{:.2}", progress["percent_done"].as_f64().unwrap()),
    );
    check(
        &dom,
        "arguments-done",
        "data-value",
        progress["done"]["arguments"].as_str().unwrap(),
    );
    check(&dom, "coverage-chart", "data-binades", 3);
    check(&dom, "hardness-chart", "data-total", cases.len());
    check(&dom, "workers-table", "data-count", 1);
    check(&dom, "hr-rows", "data-count", cases.len().min(500));
    assert!(dom.contains("seed-worker"), "{dom}");
    // The worker was heard from just now, and said what it computes on.
    assert!(dom.contains("data-state=\"active\""), "{dom}");
    assert!(dom.contains("tmd-server bench client"), "{dom}");
    // Time per binade: the estimate's seconds beside the reported ones; cases expected.
    check(&dom, "binade-times", "data-count", 3);
    assert!(
        dom.contains("data-exponent=\"0\" data-negative=\"false\" data-estimated=\"7200\""),
        "two units of an hour: {dom}"
    );
    check(
        &dom,
        "hr-expected-estimate",
        "data-value",
        format!("{:.1}", times["expected_hr_cases_so_far"].as_f64().unwrap()),
    );
    check(&dom, "burnup-chart", "data-estimate-seconds", 21600);
    assert!(dom.contains("id=\"burnup-projection\""), "{dom}");
    let hardest = cases.iter().max_by(|a, b| {
        (a.bits, a.neg_log2_d)
            .partial_cmp(&(b.bits, b.neg_log2_d))
            .unwrap()
    });
    let hardest = &hardest.unwrap().x;
    let first_row = dom.find("<tbody id=\"hr-rows\"").unwrap();
    assert!(
        dom[first_row..]
            .find(&format!("data-x=\"{hardest}\""))
            .unwrap()
            < 200,
        "the hardest case comes first: {hardest}"
    );

    // The kind filter, from the address.
    let mids = cases
        .iter()
        .filter(|c| c.kind == tmd_wire::HrKind::Mid)
        .count();
    let dom = headless(
        &bin,
        &app.url(&format!("/?campaign={id}&kind=mid#token={ADMIN}")),
        &["--dump-dom".into()],
    )
    .await;
    check(&dom, "errors", "data-count", 0);
    check(&dom, "hr-rows", "data-count", mids);
    assert_eq!(dom.matches("data-kind=\"mid\"").count(), mids, "{dom}");
    assert!(!dom.contains("data-kind=\"fp\""), "{dom}");

    check(&dom, "waiting", "data-count", 0);
    // Elapsed since creation, and one time left in words (no timestamp).
    let elapsed: u64 = attr(&dom, "elapsed", "data-value")
        .unwrap()
        .parse()
        .unwrap();
    assert!(elapsed < 600, "{elapsed}");
    assert!(!dom.contains("id=\"work-left\""), "one time left, not two");
    // 4,096 arguments done at 8 bits: about 32 cases by chance.
    check(&dom, "hr-expected", "data-value", 32);

    // A paused campaign says why its units wait.
    let (status, v) = app
        .admin(
            reqwest::Method::POST,
            &format!("/api/v1/campaigns/{id}/pause"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    // And a worker silent past a heartbeat's interval is no longer active.
    sqlx::query("UPDATE workers SET last_seen = now() - interval '200 seconds'")
        .execute(app.db.pool())
        .await
        .unwrap();
    let dom = headless(&bin, &page, &["--dump-dom".into()]).await;
    check(&dom, "errors", "data-count", 0);
    assert!(dom.contains("data-state=\"stale\""), "{dom}");
    assert!(!dom.contains("data-state=\"active\""), "{dom}");
    check(&dom, "waiting", "data-count", 1);
    assert!(dom.contains("data-reason=\"paused\""), "{dom}");
    assert!(dom.contains(&format!("campaign resume {id}")), "{dom}");
    let (status, v) = app
        .admin(
            reqwest::Method::POST,
            &format!("/api/v1/campaigns/{id}/resume"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{v}");

    // Five hours of history: the campaign started five hours ago, readings every half hour
    // (those older than two hours thinned to one an hour), the worker back.
    let pool = app.db.pool();
    sqlx::query("UPDATE campaigns SET created_at = now() - interval '5 hours' WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO campaign_snapshots (campaign_id, taken_at, work_done, args_done, work_total) \
         SELECT $1, now() - make_interval(mins => 300 - 30 * k), k * 0.06, k * 300, 1 \
         FROM generate_series(1, 9) AS k",
    )
    .bind(id)
    .execute(pool)
    .await
    .unwrap();
    tmd_server::store::tallies::snapshot(pool).await.unwrap();
    sqlx::query("UPDATE workers SET last_seen = now()")
        .execute(pool)
        .await
        .unwrap();
    let (_, history) = app
        .admin(
            reqwest::Method::GET,
            &format!("/api/v1/campaigns/{id}/history"),
            None,
        )
        .await;
    let points = history["points"].as_array().unwrap().len();
    assert!(points >= 6, "{history}");
    let dom = headless(&bin, &page, &["--dump-dom".into()]).await;
    check(&dom, "errors", "data-count", 0);
    check(&dom, "burnup-chart", "data-points", points);

    // A screenshot for people.
    let png = target_dir().join("dashboard.png");
    let _ = std::fs::remove_file(&png);
    headless(
        &bin,
        &page,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1280,1500".into(),
            "--hide-scrollbars".into(),
        ],
    )
    .await;
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 20_000,
        "{}",
        bytes.len()
    );
    eprintln!("screenshot: {}", png.canonicalize().unwrap().display());
}

/// An estimate of the seeded campaign: three binades of two units, an hour a unit, 8 cases
/// expected per binade (one per 256 arguments).
fn seeded_estimate() -> serde_json::Value {
    let binade = |negative: bool, exponent: i32| {
        serde_json::json!({"negative": negative, "exponent": exponent, "units": 2, "sampled": 2,
            "seconds_per_unit": 3600.0, "seconds_per_unit_stderr": 0.0,
            "expected_hr_cases": 8.0, "expected_hr_cases_stderr": 0.0})
    };
    serde_json::json!({
        "version": 1, "function": "exp", "format": "binary32",
        "min_bits": common::seed::MIN_BITS, "unit_bits": 10, "backend": "cuda (1 device: test)",
        "seed": 1, "binades": [binade(true, 1), binade(false, -1), binade(false, 0)],
        "total_seconds": 21600.0, "total_seconds_stderr": 0.0,
        "total_hr_cases": 24.0, "total_hr_cases_stderr": 0.0
    })
}

/// `GET /campaigns/progress`: every campaign's progress in one answer, newest first, the same
/// as each campaign's own.
#[tokio::test]
async fn every_campaigns_progress_in_one_request() {
    let app = TestApp::new().await;
    let first = app.small_campaign(3, 4).await["id"].as_i64().unwrap();
    let second = app.small_campaign(2, 4).await["id"].as_i64().unwrap();
    let (status, all) = app
        .admin(reqwest::Method::GET, "/api/v1/campaigns/progress", None)
        .await;
    assert_eq!(status, 200, "{all}");
    let all = all.as_array().unwrap().clone();
    let ids: Vec<i64> = all
        .iter()
        .map(|p| p["campaign_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [second, first]);
    for p in &all {
        let id = p["campaign_id"].as_i64().unwrap();
        let own = app.progress(id).await;
        assert_eq!(p["total"], own["total"]);
        assert_eq!(p["done"], own["done"]);
        assert_eq!(p["hr_cases"], own["hr_cases"]);
    }
    assert_eq!(all[0]["total"]["units"], 2);
    // Admin only.
    let r = app
        .http
        .get(app.url("/api/v1/campaigns/progress"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}
