//! Work and scale over real HTTP and PostgreSQL: the maintained counters equal a
//! full scan after a random sequence of every operation that changes a unit, a result or an
//! HR-case; cost estimates are checked and weigh progress and leases; coverage comes in pages;
//! units generated in the database are the engine's plan.

mod common;

use common::{TestApp, ADMIN};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use sqlx::PgPool;
use tmd_server::bench::{empty_result, WorkerClient};
use tmd_wire::BatchedResult;

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// exp in binary32 over two binades, [1, 2) and [2, 4), units of 2^16 arguments: 256 units.
fn two_binades(extra: Value) -> Value {
    // At 22 bits a unit of 2^16 arguments expects 1/32 of a case: the walk's empty results
    // are plausible to the count audit.
    let mut body = json!({"function": "exp", "format": "binary32", "min_bits": 22,
        "ranges": [{"from": "0x1p+0", "to": "0x1p+2"}], "unit_bits": 16});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// A valid estimate of [`two_binades`]: `ms` milliseconds per unit in [1, 2) and [2, 4).
fn estimate(ms: [f64; 2]) -> Value {
    json!({
        "version": 1, "function": "exp", "format": "binary32", "min_bits": 22,
        "unit_bits": 16, "backend": "test", "seed": 1,
        "binades": [
            {"negative": false, "exponent": 0, "units": 128, "sampled": 4,
             "seconds_per_unit": ms[0] / 1e3, "seconds_per_unit_stderr": 0.0,
             "expected_hr_cases": 0.0, "expected_hr_cases_stderr": 0.0},
            {"negative": false, "exponent": 1, "units": 128, "sampled": 4,
             "seconds_per_unit": ms[1] / 1e3, "seconds_per_unit_stderr": 0.0,
             "expected_hr_cases": 0.0, "expected_hr_cases_stderr": 0.0}
        ],
        "total_seconds": 128.0 * (ms[0] + ms[1]) / 1e3, "total_seconds_stderr": 0.0,
        "total_hr_cases": 0.0, "total_hr_cases_stderr": 0.0
    })
}

/// The counters as the server keeps them and as a full scan computes them, for one campaign:
/// (name, kept, scanned) per counter.
async fn compare(pool: &PgPool, campaign: i64) -> Vec<(String, f64, f64)> {
    let kept: Vec<(String, f64)> = sqlx::query_as(
        "SELECT k, v FROM ( \
           SELECT sum(units_pending)::float8 AS up, sum(units_leased)::float8 AS ul, \
                  sum(units_done)::float8 AS ud, sum(units_quarantined)::float8 AS uq, \
                  sum(args_pending)::float8 AS ap, sum(args_leased)::float8 AS al, \
                  sum(args_done)::float8 AS ad, sum(args_quarantined)::float8 AS aq, \
                  sum(work_pending)::float8 AS wp, sum(work_leased)::float8 AS wl, \
                  sum(work_done)::float8 AS wd, sum(work_quarantined)::float8 AS wq, sum(hr_cases)::float8 AS hr, \
                  sum(results)::float8 AS r, sum(results_void)::float8 AS rv, \
                  sum(results_outvoted)::float8 AS ro, sum(results_alone)::float8 AS ra, \
                  sum(results_alone_untrusted)::float8 AS rau, \
                  sum(results_refuted)::float8 AS rr, sum(results_arguments)::float8 AS rargs \
           FROM campaign_tallies WHERE campaign_id = $1) t, \
         LATERAL (VALUES ('up', up), ('ul', ul), ('ud', ud), ('uq', uq), ('ap', ap), \
             ('al', al), ('ad', ad), ('aq', aq), ('wp', wp), ('wl', wl), ('wd', wd), \
             ('wq', wq), ('hr', hr), ('r', r), ('rv', rv), ('ro', ro), ('ra', ra), \
             ('rau', rau), ('rr', rr), ('rargs', rargs)) AS x(k, v)",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await
    .unwrap();
    let scanned: Vec<(String, f64)> = sqlx::query_as(
        "WITH u AS (SELECT u.*, COALESCE(k.weight::numeric, 1) AS w FROM units u \
                    LEFT JOIN campaign_costs k ON k.campaign_id = u.campaign_id \
                         AND k.negative = u.negative AND k.exponent = u.exponent \
                    WHERE u.campaign_id = $1), \
         s AS (SELECT \
             count(*) FILTER (WHERE state = 'pending')::float8 AS up, \
             count(*) FILTER (WHERE state = 'leased')::float8 AS ul, \
             count(*) FILTER (WHERE state = 'done')::float8 AS ud, \
             count(*) FILTER (WHERE state = 'quarantined')::float8 AS uq, \
             COALESCE(sum(count) FILTER (WHERE state = 'pending'), 0)::float8 AS ap, \
             COALESCE(sum(count) FILTER (WHERE state = 'leased'), 0)::float8 AS al, \
             COALESCE(sum(count) FILTER (WHERE state = 'done'), 0)::float8 AS ad, \
             COALESCE(sum(count) FILTER (WHERE state = 'quarantined'), 0)::float8 AS aq, \
             COALESCE(sum(count * w) FILTER (WHERE state = 'pending'), 0)::float8 AS wp, \
             COALESCE(sum(count * w) FILTER (WHERE state = 'leased'), 0)::float8 AS wl, \
             COALESCE(sum(count * w) FILTER (WHERE state = 'done'), 0)::float8 AS wd, \
             COALESCE(sum(count * w) FILTER (WHERE state = 'quarantined'), 0)::float8 AS wq \
           FROM u), \
         r AS (SELECT count(*)::float8 AS r, count(*) FILTER (WHERE r.void)::float8 AS rv, \
             count(*) FILTER (WHERE r.verdict = 'outvoted')::float8 AS ro, \
             count(*) FILTER (WHERE r.verdict = 'alone' AND NOT r.void)::float8 AS ra, \
             count(*) FILTER (WHERE r.verdict = 'alone' AND NOT r.void AND NOT r.by_trusted \
                              AND u.state = 'done')::float8 AS rau, \
             count(*) FILTER (WHERE r.verdict = 'refuted')::float8 AS rr, \
             COALESCE(sum(u.count), 0)::float8 AS rargs \
           FROM results r JOIN units u ON u.id = r.unit_id WHERE u.campaign_id = $1), \
         h AS (SELECT count(*)::float8 AS hr FROM hr_cases WHERE campaign_id = $1) \
         SELECT k, v FROM s, r, h, \
         LATERAL (VALUES ('up', up), ('ul', ul), ('ud', ud), ('uq', uq), ('ap', ap), \
             ('al', al), ('ad', ad), ('aq', aq), ('wp', wp), ('wl', wl), ('wd', wd), \
             ('wq', wq), ('hr', hr), ('r', r), ('rv', rv), ('ro', ro), ('ra', ra), \
             ('rau', rau), ('rr', rr), ('rargs', rargs)) AS x(k, v)",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await
    .unwrap();
    kept.into_iter()
        .zip(scanned)
        .map(|((k, a), (k2, b))| {
            assert_eq!(k, k2);
            (k, a, b)
        })
        .collect()
}

/// The binades' counters against a scan grouped by binade.
async fn binades_match(pool: &PgPool, campaign: i64) {
    let diff: Vec<(bool, i32)> = sqlx::query_as(
        "WITH kept AS ( \
             SELECT negative, exponent, sum(units_pending) AS up, sum(units_leased) AS ul, \
                    sum(units_done) AS ud, sum(units_quarantined) AS uq, \
                    sum(args_pending) AS ap, sum(args_leased) AS al, sum(args_done) AS ad, \
                    sum(args_quarantined) AS aq \
             FROM binade_tallies WHERE campaign_id = $1 GROUP BY negative, exponent), \
         scan AS ( \
             SELECT negative, exponent, \
                    count(*) FILTER (WHERE state = 'pending')::numeric AS up, \
                    count(*) FILTER (WHERE state = 'leased')::numeric AS ul, \
                    count(*) FILTER (WHERE state = 'done')::numeric AS ud, \
                    count(*) FILTER (WHERE state = 'quarantined')::numeric AS uq, \
                    COALESCE(sum(count) FILTER (WHERE state = 'pending'), 0) AS ap, \
                    COALESCE(sum(count) FILTER (WHERE state = 'leased'), 0) AS al, \
                    COALESCE(sum(count) FILTER (WHERE state = 'done'), 0) AS ad, \
                    COALESCE(sum(count) FILTER (WHERE state = 'quarantined'), 0) AS aq \
             FROM units WHERE campaign_id = $1 GROUP BY negative, exponent) \
         SELECT COALESCE(kept.negative, scan.negative), COALESCE(kept.exponent, scan.exponent) \
         FROM kept FULL JOIN scan USING (negative, exponent) \
         WHERE (kept.up, kept.ul, kept.ud, kept.uq, kept.ap, kept.al, kept.ad, kept.aq) \
               IS DISTINCT FROM \
               (scan.up, scan.ul, scan.ud, scan.uq, scan.ap, scan.al, scan.ad, scan.aq)",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(diff.is_empty(), "binades whose counters differ: {diff:?}");
}

async fn assert_counters(pool: &PgPool, campaign: i64, step: &str) {
    // Every counter is exact (integers, and work as numeric sums of `count * weight::numeric`),
    // so the kept value equals the scan's to the last bit, however many times units came and
    // went.
    for (k, kept, scanned) in compare(pool, campaign).await {
        assert_eq!(
            kept.to_bits(),
            scanned.to_bits(),
            "after {step}: counter {k} is {kept}, a scan says {scanned}"
        );
    }
    binades_match(pool, campaign).await;
    seconds_match(pool, campaign, step).await;
}

/// The results' seconds (over their workers' slots) as the binades' counters and as a scan of
/// the results say: sums of floats in other orders, so equal to a relative 1e-9.
async fn seconds_match(pool: &PgPool, campaign: i64, step: &str) {
    let (binades, scanned): (f64, f64) = sqlx::query_as(
        "SELECT (SELECT COALESCE(sum(seconds), 0) FROM binade_tallies WHERE campaign_id = $1), \
                (SELECT COALESCE(sum(r.elapsed_seconds / w.slots), 0) FROM results r \
                 JOIN units u ON u.id = r.unit_id JOIN workers w ON w.id = r.worker_id \
                 WHERE u.campaign_id = $1)",
    )
    .bind(campaign)
    .fetch_one(pool)
    .await
    .unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300);
    assert!(
        close(binades, scanned),
        "after {step}: results' seconds: binades {binades}, a scan {scanned}"
    );
}

/// Posts results for `units` of `lease` (some with a wrong digest when `lie`).
async fn post(w: &WorkerClient, lease: &tmd_wire::Lease, units: &[i64], lie: bool) {
    let results = units
        .iter()
        .map(|&u| {
            let mut r = empty_result(lease.fencing_token, u, 0.5);
            if lie {
                r.stats.domains += 7;
            }
            BatchedResult {
                lease_id: lease.lease_id,
                unit_id: u,
                result: r,
            }
        })
        .collect();
    // Refusals (a lease revoked by a quarantine, a unit done meanwhile) are part of the game.
    let _ = w.post_batch(results).await;
}

/// The random walk went through every kind of change: done units, void results, quarantined
/// units, expired leases.
async fn every_kind_of_change_happened(pool: &PgPool) {
    let (done, void, outvoted, quarantined, expired): (i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM units WHERE state = 'done'), \
                (SELECT count(*) FROM results WHERE void), \
                (SELECT count(*) FROM results WHERE verdict = 'outvoted'), \
                (SELECT count(*) FROM units WHERE attempts > 0), \
                (SELECT count(*) FROM leases WHERE state = 'expired')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        done > 0 && void > 0 && quarantined > 0 && expired > 0,
        "{done} {void} {outvoted} {quarantined} {expired}"
    );
}

/// Progress reads the counters: its numbers are a scan's.
async fn progress_reads_the_counters(app: &TestApp, campaign: i64) {
    let p = app.progress(campaign).await;
    let units: i64 =
        sqlx::query_scalar("SELECT count(*) FROM units WHERE campaign_id = $1 AND state = 'done'")
            .bind(campaign)
            .fetch_one(app.db.pool())
            .await
            .unwrap();
    assert_eq!(p["done"]["units"], units);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_equal_a_full_scan_after_random_operations() {
    let app = TestApp::new().await;
    let pool = app.db.pool().clone();
    // One campaign settled by one result, one with two replicas (verdicts, votes, voids).
    let single = app.campaign(two_binades(json!({}))).await["id"]
        .as_i64()
        .unwrap();
    let double = app
        .campaign(two_binades(json!({"replication": 2, "name": "replicated"})))
        .await["id"]
        .as_i64()
        .unwrap();
    let mut workers = Vec::new();
    for i in 0..4 {
        workers.push(app.worker(&format!("w{i}")).await);
    }
    let mut held: Vec<(usize, tmd_wire::Lease)> = Vec::new();
    // Worker 3 holds a live result before its quarantine (its results become void then),
    // whatever the random walk below leases it: the walk's lease sizes follow the workers'
    // measured speeds, which follow the clock.
    let first = workers[3]
        .1
        .lease(Some(1))
        .await
        .unwrap()
        .lease
        .expect("work to lease");
    let ids: Vec<i64> = first.units.iter().map(|u| u.unit_id).collect();
    post(&workers[3].1, &first, &ids[..1], false).await;
    if ids.len() > 1 {
        held.push((3, first));
    }
    assert_counters(&pool, single, "worker 3's first result").await;
    assert_counters(&pool, double, "worker 3's first result").await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for step in 0..120 {
        // Worker 3 (a liar now and then) is quarantined half way: its results become void and
        // the units it vouched for are redone.
        let op = if step == 60 { 99 } else { rng.below(10) };
        let what = match op {
            0..=2 => {
                let i = rng.below(workers.len() as u64) as usize;
                if let Ok(r) = workers[i].1.lease(Some(1 + rng.below(30) as u32)).await {
                    if let Some(l) = r.lease {
                        held.push((i, l));
                    }
                }
                "a lease"
            }
            3..=5 if !held.is_empty() => {
                let (i, l) = held.swap_remove(rng.below(held.len() as u64) as usize);
                let ids: Vec<i64> = l.units.iter().map(|u| u.unit_id).collect();
                let take = 1 + rng.below(ids.len() as u64) as usize;
                // Worker 3 lies now and then: outvoted results, then a quarantine.
                post(&workers[i].1, &l, &ids[..take], i == 3 && rng.below(2) == 0).await;
                if take < ids.len() {
                    held.push((i, l));
                }
                "results"
            }
            6 if !held.is_empty() => {
                let (i, l) = held.swap_remove(rng.below(held.len() as u64) as usize);
                // Only the liar reports failures (enough of them quarantine a worker).
                let failed: Vec<i64> = l
                    .units
                    .iter()
                    .filter(|_| i == 3 && rng.below(2) == 0)
                    .map(|u| u.unit_id)
                    .collect();
                let _ = workers[i].1.release(&l, &failed).await;
                "a release"
            }
            7 => {
                // Every lease out expires at once; the next lease request returns its units.
                sqlx::query(
                    "UPDATE leases SET expires_at = now() - interval '1 second' \
                             WHERE state = 'active'",
                )
                .execute(&pool)
                .await
                .unwrap();
                held.clear();
                let _ = workers[0].1.lease(Some(1)).await.map(|r| {
                    if let Some(l) = r.lease {
                        held.push((0, l));
                    }
                });
                "an expiry"
            }
            8 => {
                let (status, _) = app
                    .admin(
                        Method::POST,
                        &format!("/api/v1/campaigns/{single}/requeue"),
                        Some(json!({})),
                    )
                    .await;
                assert!(status.is_success() || status == StatusCode::NOT_FOUND);
                "a requeue"
            }
            99 => {
                // (Its lies may have had it quarantined already: 409.)
                let (status, v) = app.quarantine(workers[3].0, "test").await;
                assert!(
                    status == StatusCode::OK || status == StatusCode::CONFLICT,
                    "{v}"
                );
                "a quarantine"
            }
            9 => {
                let ms = [1.0 + rng.below(10) as f64, 1.0 + rng.below(1000) as f64];
                let (status, v) = app
                    .admin(
                        Method::POST,
                        &format!("/api/v1/campaigns/{single}/estimate"),
                        Some(estimate(ms)),
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "{v}");
                "an estimate"
            }
            _ => continue,
        };
        for c in [single, double] {
            assert_counters(&pool, c, &format!("step {step} ({what})")).await;
        }
    }
    every_kind_of_change_happened(&pool).await;
    progress_reads_the_counters(&app, single).await;
    app.db.assert_no_orphans().await;
}

#[tokio::test]
async fn estimates_are_checked_and_weigh_progress() {
    // Leases sized by work alone: no cap by the pending units (tested on its own below).
    let mut config = common::config();
    config.policy.max_pending_share = 1.0;
    let app = TestApp::with_config(config).await;
    let id = app.campaign(two_binades(json!({}))).await["id"]
        .as_i64()
        .unwrap();
    let p = app.progress(id).await;
    // Before an estimate, the engine's plan weighs the binades.
    assert_eq!(p["work"]["basis"], "plan");
    assert!(p["work"]["note"].as_str().unwrap().contains("plan"), "{p}");
    let total = p["work"]["total"].as_f64().unwrap();
    assert!((total - (1u64 << 24) as f64).abs() < 1e-3, "{p}");
    let path = format!("/api/v1/campaigns/{id}/estimate");
    let refused = |mut body: Value, edit: &dyn Fn(&mut Value)| {
        edit(&mut body);
        body
    };
    for (body, code) in [
        (
            refused(estimate([1.0, 2.0]), &|b| b["version"] = json!(2)),
            "estimate_invalid",
        ),
        (
            refused(estimate([1.0, 2.0]), &|b| b["function"] = json!("log")),
            "estimate_mismatch",
        ),
        (
            refused(estimate([1.0, 2.0]), &|b| b["format"] = json!("binary64")),
            "estimate_mismatch",
        ),
        (
            refused(estimate([1.0, 2.0]), &|b| b["min_bits"] = json!(23)),
            "estimate_mismatch",
        ),
        (
            refused(estimate([1.0, 2.0]), &|b| b["format"] = json!("binary7")),
            "estimate_invalid",
        ),
        (
            refused(estimate([1.0, 2.0]), &|b| {
                b["binades"][1]["seconds_per_unit"] = json!(-1.0)
            }),
            "estimate_invalid",
        ),
        (
            refused(estimate([1.0, 2.0]), &|b| {
                b["binades"].as_array_mut().unwrap().pop();
            }),
            "estimate_mismatch",
        ),
        (
            refused(estimate([1.0, 2.0]), &|b| {
                let first = b["binades"][0].clone();
                b["binades"].as_array_mut().unwrap().push(first);
            }),
            "estimate_invalid",
        ),
        (estimate([0.0, 0.0]), "estimate_invalid"),
    ] {
        let (status, v) = app.admin(Method::POST, &path, Some(body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert_eq!(v["code"], code, "{v}");
    }
    let (status, v) = app
        .call(
            Method::POST,
            &path,
            Some("not-admin"),
            Some(estimate([1.0, 3.0])),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
    // An alias of the format and the function's name as the engine spells it are accepted.
    let mut body = estimate([1.0, 99.0]);
    body["format"] = json!("single");
    let (status, v) = app.admin(Method::POST, &path, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["binades"], 2);
    assert!(
        (v["min_weight"].as_f64().unwrap() - 0.02).abs() < 1e-12,
        "{v}"
    );
    assert!(
        (v["max_weight"].as_f64().unwrap() - 1.98).abs() < 1e-12,
        "{v}"
    );
    let p = app.progress(id).await;
    assert_eq!(p["work"]["basis"], "estimate");
    let total = p["work"]["total"].as_f64().unwrap();
    assert!((total - (1u64 << 24) as f64).abs() < 1e-3, "{p}");
    // 12.8 s in all: 128 units at 1 ms and 128 at 99 ms.
    let seconds = p["work"]["estimated_seconds_total"].as_f64().unwrap();
    assert!((seconds - 12.8).abs() < 1e-9, "{p}");

    // Leases by work: a worker measured at one mean unit (2^16 weighted arguments) per second
    // asking for 10 s gets the whole cheap binade (128 units at 0.02) and then the dear units
    // (1.98 each) while the work before each is under 10: 132 units, not 10.
    let (wid, w) = app.worker("weighed").await;
    sqlx::query("UPDATE workers SET speed = 65536 WHERE id = $1")
        .bind(wid)
        .execute(app.db.pool())
        .await
        .unwrap();
    let l = w.lease(Some(10)).await.unwrap().lease.unwrap();
    assert_eq!(l.units.len(), 132);
    // In the dear binade alone, 10 s of work is 6 units (before each: 0, 1.98, ..., 9.9).
    let l2 = w.lease(Some(10)).await.unwrap().lease.unwrap();
    assert_eq!(l2.units.len(), 6);
    assert!(l2.units.iter().all(|u| u.spec.exponent == 1));
}

/// A worker measured fast (on cheap units, say, before any estimate) asks for a long lease:
/// it gets at most the pending-share cap of what is pending (5% by default, never fewer than
/// 32 units), so it cannot take most of a campaign at once; leases shrink as the campaign
/// empties, down to that floor.
#[tokio::test]
async fn a_fast_worker_takes_a_share_of_what_is_pending_not_the_campaign() {
    let app = TestApp::new().await;
    let c = app.small_campaign(2048, 4).await;
    assert_eq!(c["units_total"], 2048, "{c}");
    let (wid, w) = app.worker("fast").await;
    app.measured_fast(wid).await;
    let mut sizes = Vec::new();
    let mut left = 2048usize;
    while let Some(l) = w.lease(Some(600)).await.unwrap().lease {
        sizes.push(l.units.len());
        assert_eq!(
            l.units.len(),
            left.min(((left as f64 * 0.05).ceil() as usize).max(32)),
            "{sizes:?}"
        );
        left -= l.units.len();
        w.post_batch(tmd_server::bench::empty_batch(&l, 1e-6))
            .await
            .unwrap();
    }
    assert_eq!(left, 0, "{sizes:?}");
    assert_eq!(sizes[0], 103, "{sizes:?}");
    assert!(*sizes.last().unwrap() <= 32, "{sizes:?}");
}

#[tokio::test]
async fn coverage_comes_in_pages() {
    let app = TestApp::new().await;
    // log in binary32 from 2^-10 to 2^10 with units of 2^20: 20 binades of 8 units (exp
    // would overflow from 88.7, and a plan merges the units it skips whole).
    let id = app
        .campaign(
            json!({"function": "log", "format": "binary32", "min_bits": 12,
            "ranges": [{"from": "0x1p-10", "to": "0x1p+10"}], "unit_bits": 20}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let page = |q: &str| {
        let url = app.url(&format!("/api/v1/campaigns/{id}/coverage{q}"));
        let http = app.http.clone();
        async move {
            let resp = http.get(url).bearer_auth(ADMIN).send().await.unwrap();
            let status = resp.status();
            let total = resp
                .headers()
                .get("x-tmd-binades")
                .map(|v| v.to_str().unwrap().to_string());
            (status, total, resp.json::<Value>().await.unwrap())
        }
    };
    let (status, total, all) = page("").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(total.as_deref(), Some("20"));
    let all = all.as_array().unwrap().clone();
    assert_eq!(all.len(), 20);
    assert_eq!(all[0]["exponent"], -10);
    assert_eq!(all[19]["exponent"], 9);
    assert!(all
        .iter()
        .all(|b| b["units_total"] == 8 && b["weight"].as_f64().unwrap() > 0.0));
    let (_, _, second) = page("?offset=5&limit=3").await;
    assert_eq!(second.as_array().unwrap()[..], all[5..8]);
    let (_, total, past) = page("?offset=40").await;
    assert_eq!(past, json!([]));
    assert_eq!(total.as_deref(), Some("20"));
    for bad in [
        "?limit=0",
        "?limit=1025",
        "?offset=-1",
        "?limit=x",
        "?page=2",
    ] {
        let (status, _, v) = page(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert_eq!(v["code"], "bad_request");
    }
}

#[tokio::test]
async fn units_generated_in_the_database_are_the_plan() {
    let app = TestApp::new().await;
    // Ranges that start and end inside units, over a binade's edge, both signs, subnormal
    // numbers of binary16 and a binade of one unit.
    let body = json!({"function": "exp", "format": "binary16", "min_bits": 6,
        "ranges": [{"from": "-0x1.8p+1", "to": "-0x1.02p-1"},
                   {"from": "0x0.04p-14", "to": "0x1.0cp-13"},
                   {"from": "0x1.1p+0", "to": "0x1.f8p+2"}], "unit_bits": 5});
    let id = app.campaign(body.clone()).await["id"].as_i64().unwrap();
    let new =
        tmd_server::domain::validate_campaign(&serde_json::from_value(body).unwrap()).unwrap();
    let plan = tmd_server::domain::engine::plan(&new, 1 << 20).unwrap();
    let rows: Vec<(i32, bool, i32, String, i64)> = sqlx::query_as(
        "SELECT seq, negative, exponent, first::text, count FROM units \
         WHERE campaign_id = $1 ORDER BY seq",
    )
    .bind(id)
    .fetch_all(app.db.pool())
    .await
    .unwrap();
    assert_eq!(rows.len(), plan.units.len());
    for (i, (row, u)) in rows.iter().zip(&plan.units).enumerate() {
        assert_eq!(
            (row.0, row.1, row.2, row.3.clone(), row.4),
            (
                i as i32,
                u.negative,
                u.exponent,
                u.first.to_string(),
                u.count as i64
            ),
            "unit {i}"
        );
    }
    let p = app.progress(id).await;
    assert_eq!(p["pending"]["units"], plan.units.len());
}

/// Before any estimate, the engine's plan weighs the binades: exp's units near 512 are about
/// two hundred times dearer per argument than those of [0.5, 1). A worker measured on cheap
/// units (one a second) that asks for a minute gets one steep unit, not sixty, so when it dies
/// it leaves one unit waiting for expiry while another worker takes the rest.
#[tokio::test]
async fn the_plan_weighs_binades_before_an_estimate_so_a_dead_worker_holds_little() {
    let app = TestApp::new().await;
    // Steep first: units are leased in the order the ranges are given.
    let id = app
        .campaign(
            json!({"function": "exp", "format": "binary64", "min_bits": 44,
            "ranges": [{"from": "512", "to": "516"}, {"from": "0.5", "to": "1"}],
            "unit_bits": 40}),
        )
        .await["id"]
        .as_i64()
        .unwrap();
    let p = app.progress(id).await;
    assert_eq!(p["work"]["basis"], "plan", "{p}");
    assert!(p["work"]["rough"].as_bool().unwrap(), "{p}");
    let url = app.url(&format!("/api/v1/campaigns/{id}/coverage"));
    let cov: Value = app
        .http
        .get(url)
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let weight = |e: i64| {
        cov.as_array()
            .unwrap()
            .iter()
            .find(|b| b["exponent"] == e)
            .unwrap()["weight"]
            .as_f64()
            .unwrap()
    };
    let (steep, cheap) = (weight(9), weight(-1));
    assert!(steep / cheap > 60.0, "steep {steep}, cheap {cheap}");
    // Total work is the campaign's arguments, as with an estimate's weights.
    let total = p["work"]["total"].as_f64().unwrap();
    let args = (32u64 << 40) as f64 + (1u64 << 52) as f64;
    assert!((total - args).abs() < args * 1e-9, "{total} {args}");

    let (dies, w) = app.worker("dies").await;
    sqlx::query("UPDATE workers SET speed = $2 WHERE id = $1")
        .bind(dies)
        .bind(cheap * (1u64 << 40) as f64)
        .execute(app.db.pool())
        .await
        .unwrap();
    let held = w.lease(Some(60)).await.unwrap().lease.unwrap();
    assert_eq!(held.units.len(), 1, "a minute at one cheap unit a second");
    assert_eq!(held.units[0].spec.exponent, 9);
    // The worker dies with its lease; another takes the other steep units.
    let (_, other) = app.worker("other").await;
    let mut steep_taken = 0;
    while let Some(l) = other.lease(Some(60)).await.unwrap().lease {
        steep_taken += l.units.iter().filter(|u| u.spec.exponent == 9).count();
        if steep_taken >= 31 {
            break;
        }
        other
            .post_batch(tmd_server::bench::empty_batch(&l, 1e-6))
            .await
            .unwrap();
    }
    assert_eq!(steep_taken, 31);
}

/// A GPU computes its units side by side, each reporting its own elapsed time: 32 units that
/// each took 32 s, posted together, took about 32 s of the worker's time, not 1,024 s. Its
/// speed is measured over the elapsed times divided by the units it said it computes at once
/// (and never faster than the server's clock allows); a worker that computes one unit at a
/// time is measured as before.
#[tokio::test]
async fn a_worker_computing_units_side_by_side_is_measured_by_its_slots() {
    let app = TestApp::new().await;
    app.small_campaign(256, 4).await;
    let speed = |id: i64| {
        let pool = app.db.pool().clone();
        async move {
            sqlx::query_scalar::<_, Option<f64>>("SELECT speed FROM workers WHERE id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
                .unwrap()
        }
    };
    let (gpu, g) = app.worker("gpu").await;
    let (cpu, c) = app.worker("cpu").await;
    for (w, slots) in [(&g, Some(32)), (&c, Some(1))] {
        let l = w
            .lease_with_slots(Some(60), slots)
            .await
            .unwrap()
            .lease
            .unwrap();
        // Every unit 32 s: the GPU's took a second each of its time, the CPU's 32 s each.
        w.post_batch(tmd_server::bench::empty_batch(&l, 32.0))
            .await
            .unwrap();
    }
    let per_unit = |s: f64| s / 16.0; // units of 2^4 arguments
    let (g, c) = (per_unit(speed(gpu).await), per_unit(speed(cpu).await));
    assert!((g - 1.0).abs() < 1e-9, "gpu {g} units/s");
    assert!((c - 1.0 / 32.0).abs() < 1e-9, "cpu {c} units/s");
}

/// The ETA is the work left over the rate of work since the campaign's first lease (not its
/// creation: an estimate or a queue may keep it waiting), counted over costly arguments.
#[tokio::test]
async fn the_eta_is_the_work_left_over_the_rate_since_the_first_lease() {
    let app = TestApp::new().await;
    let id = app.campaign(two_binades(json!({}))).await["id"]
        .as_i64()
        .unwrap();
    let started = || async {
        let s: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar("SELECT started_at FROM campaigns WHERE id = $1")
                .bind(id)
                .fetch_one(app.db.pool())
                .await
                .unwrap();
        s
    };
    assert_eq!(started().await, None, "no lease yet, no start");
    let (_, w) = app.worker("paced").await;
    let l = w.lease(Some(10)).await.unwrap().lease.unwrap();
    let first = started()
        .await
        .expect("the first lease starts the campaign");
    let units: Vec<i64> = l.units.iter().map(|u| u.unit_id).collect();
    post(&w, &l, &units, false).await;
    let p = app.progress(id).await;
    assert_eq!(p["work"]["eta_basis"], "recent", "{p}");
    let eta = p["work"]["eta_seconds"].as_f64().unwrap();
    assert!(eta.is_finite() && eta > 0.0, "{p}");
    // A second lease leaves the start where it was.
    let _ = w.lease(Some(10)).await.unwrap();
    assert_eq!(started().await, Some(first));
    // A snapshot keeps the costly work done: nothing collapsed here, so it is the work done.
    // (The coordinator's own snapshot may have come before the result, and a campaign takes
    // one in 50 s at most: start from none.)
    sqlx::query("DELETE FROM campaign_snapshots WHERE campaign_id = $1")
        .bind(id)
        .execute(app.db.pool())
        .await
        .unwrap();
    tmd_server::store::tallies::snapshot(app.db.pool())
        .await
        .unwrap();
    let (costly, work): (Option<f64>, f64) = sqlx::query_as(
        "SELECT costly_done, work_done::float8 FROM campaign_snapshots \
         WHERE campaign_id = $1 ORDER BY taken_at DESC LIMIT 1",
    )
    .bind(id)
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    let costly = costly.expect("the snapshot's costly work");
    assert!(
        work > 0.0 && (costly - work).abs() <= 1e-9 * work,
        "{costly} vs {work}"
    );
}
