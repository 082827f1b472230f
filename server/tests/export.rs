//! Views of a campaign over real HTTP against a real PostgreSQL: the HR-case export in its
//! three formats (which must list the same cases), its filters, order and bad input; a large
//! export streamed; coverage and the hardness histogram; and the `campaign export` and
//! `campaign watch` commands as real processes.

mod common;

use common::seed::{hex_value, seeded_campaign, Seeded};
use common::{assert_refused, tmd, work_through, TestApp, ADMIN};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tmd_server::bench::empty_result;
use tmd_wire::{ExportedHrCase, HrKind};

async fn get(app: &TestApp, path: &str) -> reqwest::Response {
    app.http
        .get(app.url(path))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
}

async fn text(app: &TestApp, path: &str) -> String {
    let resp = get(app, path).await;
    assert_eq!(resp.status(), StatusCode::OK, "{path}");
    resp.text().await.unwrap()
}

async fn json_export(app: &TestApp, id: i64, query: &str) -> Vec<ExportedHrCase> {
    let resp = get(app, &format!("/api/v1/campaigns/{id}/hr-cases?{query}")).await;
    assert_eq!(resp.status(), StatusCode::OK, "{query}");
    assert_eq!(resp.headers()["content-type"], "application/json");
    resp.json().await.unwrap()
}

/// The (x, bits, neg_log2_d, kind, rounded) of each CSV row, header checked: RFC 4180, every
/// line a record ending in CRLF, none a comment.
fn parse_csv(text: &str) -> Vec<(String, u32, f64, HrKind, String)> {
    assert!(text.is_empty() || text.ends_with("\r\n"), "{text:?}");
    let mut lines = text.split_terminator("\r\n");
    assert_eq!(lines.next(), Some("x,bits,neg_log2_d,kind,rounded"));
    lines
        .map(|l| {
            assert!(!l.contains(['\n', '\r']), "{l:?}");
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 5, "{l}");
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                HrKind::parse(f[3]).unwrap(),
                f[4].to_string(),
            )
        })
        .collect()
}

fn wc_arguments(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn as_csv_rows(cases: &[ExportedHrCase]) -> Vec<(String, u32, f64, HrKind, String)> {
    cases
        .iter()
        .map(|c| (c.x.clone(), c.bits, c.neg_log2_d, c.kind, c.rounded.clone()))
        .collect()
}

#[tokio::test]
async fn the_three_formats_list_the_same_cases_in_value_order() {
    let app = TestApp::new().await;
    let Seeded { id, cases, .. } = seeded_campaign(&app).await;

    let json = json_export(&app, id, "format=json").await;
    assert_eq!(json.len(), cases.len());
    // Exactly the cases MPFR found, as the server recorded them.
    let mut expected: Vec<(String, u32, f64, HrKind, String)> = cases
        .iter()
        .map(|c| (c.x.clone(), c.bits, c.neg_log2_d, c.kind, c.rounded.clone()))
        .collect();
    // The order is the arguments' value order (checked against an independent parser).
    expected.sort_by(|a, b| hex_value(&a.0).total_cmp(&hex_value(&b.0)));
    assert_eq!(as_csv_rows(&json), expected);
    let (lo, hi) = (&json[0].x, &json.last().unwrap().x);
    assert!(hex_value(lo) < 0.0 && hex_value(hi) > 0.0, "{lo} .. {hi}");
    // The default format is JSON too.
    assert_eq!(json_export(&app, id, "").await, json);
    // shape=object: the same cases, filtered alike, with the campaign and its skipped runs.
    let resp = get(
        &app,
        &format!("/api/v1/campaigns/{id}/hr-cases?shape=object&sort=hardness&limit=7"),
    )
    .await;
    assert_eq!(resp.headers()["content-type"], "application/json");
    let doc: tmd_wire::HrCasesDocument = resp.json().await.unwrap();
    assert_eq!((doc.version, doc.campaign_id), (1, id));
    assert_eq!((doc.function.as_str(), doc.precision), ("exp", 24));
    assert_eq!(doc.format.as_deref(), Some("binary32"));
    assert!(doc.skipped_runs.is_empty(), "{doc:?}");
    assert_eq!(
        doc.cases,
        json_export(&app, id, "format=json&shape=array&sort=hardness&limit=7").await
    );

    let resp = get(&app, &format!("/api/v1/campaigns/{id}/hr-cases?format=csv")).await;
    assert_eq!(resp.headers()["content-type"], "text/csv; charset=utf-8");
    assert_eq!(parse_csv(&resp.text().await.unwrap()), as_csv_rows(&json));

    let resp = get(&app, &format!("/api/v1/campaigns/{id}/hr-cases?format=wc")).await;
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    let wc = resp.text().await.unwrap();
    let header: Vec<&str> = wc.lines().take_while(|l| l.starts_with('#')).collect();
    assert!(header.len() >= 3, "{wc}");
    let header = header.join("\n");
    assert!(
        header.contains("exp") && header.contains("binary32"),
        "{header}"
    );
    assert!(header.contains(&format!("campaign {id} ")), "{header}");
    assert!(header.contains("sorted by argument"), "{header}");
    assert_eq!(
        wc_arguments(&wc),
        json.iter().map(|c| c.x.clone()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn filters_order_and_limit() {
    let app = TestApp::new().await;
    let Seeded { id, cases, .. } = seeded_campaign(&app).await;
    let all = json_export(&app, id, "format=json").await;
    let count = |f: &dyn Fn(&ExportedHrCase) -> bool| all.iter().filter(|c| f(c)).count();

    for kind in [HrKind::Fp, HrKind::Mid] {
        let k = kind.as_str();
        let only = json_export(&app, id, &format!("kind={k}")).await;
        assert!(!only.is_empty() && only.iter().all(|c| c.kind == kind));
        assert_eq!(only.len(), count(&|c| c.kind == kind));
        let csv = text(
            &app,
            &format!("/api/v1/campaigns/{id}/hr-cases?format=csv&kind={k}"),
        )
        .await;
        assert_eq!(parse_csv(&csv), as_csv_rows(&only));
        let wc = text(
            &app,
            &format!("/api/v1/campaigns/{id}/hr-cases?format=wc&kind={k}"),
        )
        .await;
        assert!(wc.contains(&format!("kind {k}")), "{wc}");
        assert_eq!(wc_arguments(&wc).len(), only.len());
    }

    let hardest = cases.iter().map(|c| c.bits).max().unwrap();
    let threshold = hardest - 2;
    let hard = json_export(&app, id, &format!("min_bits={threshold}&format=json")).await;
    assert_eq!(hard.len(), count(&|c| c.bits >= threshold));
    assert!(!hard.is_empty() && hard.len() < all.len());
    let both = json_export(&app, id, &format!("min_bits={threshold}&kind=mid")).await;
    assert_eq!(
        both.len(),
        count(&|c| c.bits >= threshold && c.kind == HrKind::Mid)
    );
    assert!(json_export(&app, id, "min_bits=200").await.is_empty());
    // A blank filter is no filter.
    assert_eq!(
        json_export(&app, id, "min_bits=&kind=&format=json").await,
        all
    );

    let by_hardness = json_export(&app, id, "sort=hardness").await;
    assert_eq!(by_hardness.len(), all.len());
    for pair in by_hardness.windows(2) {
        let key = |c: &ExportedHrCase| (c.bits, c.neg_log2_d);
        assert!(
            key(&pair[0]).0 > key(&pair[1]).0
                || (key(&pair[0]).0 == key(&pair[1]).0 && key(&pair[0]).1 >= key(&pair[1]).1),
            "{pair:?}"
        );
    }
    assert_eq!(by_hardness[0].bits, hardest);
    let top = json_export(&app, id, "sort=hardness&limit=3").await;
    assert_eq!(top, by_hardness[..3].to_vec());
    let wc = text(
        &app,
        &format!("/api/v1/campaigns/{id}/hr-cases?format=wc&sort=hardness&limit=3"),
    )
    .await;
    assert!(
        wc.contains("sorted by hardness") && wc.contains("at most 3"),
        "{wc}"
    );
    assert_eq!(
        wc_arguments(&wc),
        top.iter().map(|c| c.x.clone()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn bad_exports_get_the_error_envelope() {
    let app = TestApp::new().await;
    let c = app.small_campaign(2, 4).await;
    let id = c["id"].as_i64().unwrap();
    assert_eq!(
        json_export(&app, id, "").await,
        vec![],
        "no case yet: an empty array"
    );
    let resp = get(&app, &format!("/api/v1/campaigns/{id}/hr-cases?format=csv")).await;
    let headers = resp.headers().clone();
    let csv = resp.text().await.unwrap();
    assert_eq!(
        csv, "x,bits,neg_log2_d,kind,rounded\r\n",
        "no case: the header row alone"
    );
    // What the rows are judged as travels in the headers, not in the rows.
    let judged = headers["x-tmd-judged-as"].to_str().unwrap();
    assert!(
        judged.starts_with("binary32: ") && judged.contains("subnormal"),
        "{judged}"
    );
    assert_eq!(headers["x-tmd-skipped-runs"], "0");
    assert_eq!(headers["x-tmd-skipped-arguments"], "0");
    let empty = text(
        &app,
        &format!("/api/v1/campaigns/{id}/hr-cases?shape=object"),
    )
    .await;
    let doc: tmd_wire::HrCasesDocument = serde_json::from_str(&empty).unwrap();
    assert!(
        doc.cases.is_empty() && doc.skipped_runs.is_empty(),
        "{empty}"
    );

    for (query, needle) in [
        ("format=xml", "format"),
        ("format=CSV", "format"),
        ("kind=both", "kind"),
        ("min_bits=abc", "min_bits"),
        ("min_bits=-1", "min_bits"),
        ("min_bits=1000", "min_bits"),
        ("sort=random", "sort"),
        ("limit=0", "limit"),
        ("limit=many", "limit"),
        ("minbits=3", "minbits"),
        ("shape=list", "shape"),
        ("format=csv&shape=object", "shape"),
    ] {
        let v = assert_refused!(
            app.admin(
                Method::GET,
                &format!("/api/v1/campaigns/{id}/hr-cases?{query}"),
                None
            )
            .await,
            BAD_REQUEST,
            "bad_request",
            "{query}"
        );
        assert!(
            v["message"].as_str().unwrap().contains(needle),
            "{query}: {v}"
        );
    }
    for path in ["hr-cases?format=csv", "coverage", "hardness"] {
        assert_refused!(
            app.admin(
                Method::GET,
                &format!("/api/v1/campaigns/999999/{path}"),
                None
            )
            .await,
            NOT_FOUND,
            "not_found",
            "{path}"
        );
        assert_refused!(
            app.admin(Method::GET, &format!("/api/v1/campaigns/abc/{path}"), None)
                .await,
            BAD_REQUEST,
            "bad_request"
        );
        assert_refused!(
            app.call(
                Method::GET,
                &format!("/api/v1/campaigns/{id}/{path}"),
                None,
                None
            )
            .await,
            UNAUTHORIZED,
            "unauthorized"
        );
    }
}

#[tokio::test]
async fn a_large_export_is_streamed_in_value_order() {
    let app = TestApp::new().await;
    let c = app.small_campaign(1, 4).await;
    let id = c["id"].as_i64().unwrap();
    let (_, w) = app.worker("w").await;
    let lease = w.lease(None).await.unwrap().lease.unwrap();
    let unit = lease.units[0].unit_id;
    let accepted = w
        .post(
            lease.lease_id,
            unit,
            &empty_result(lease.fencing_token, unit, 1.0),
        )
        .await
        .unwrap();
    // 200k cases straight into the table (the verifier would take long to find them), spread
    // over both signs and several binades, inserted in an order unrelated to their value. The
    // fractions are odd, so each text is canonical (no trailing zero) like the engine's.
    const N: i64 = 200_000;
    sqlx::query(
        "INSERT INTO hr_cases (campaign_id, unit_id, result_id, x, bits, neg_log2_d, kind, rounded) \
         SELECT $1, $2, $3, \
                CASE WHEN i % 2 = 0 THEN '-' ELSE '' END || '0x1.' || lpad(to_hex((i * 7919) % 4194304 * 2 + 1), 6, '0') \
                  || 'p' || CASE WHEN i % 5 < 2 THEN '-' ELSE '+' END || (i % 5)::text, \
                12 + i % 20, 30.5, CASE WHEN i % 3 = 0 THEN 'fp' ELSE 'mid' END, '0x1p+0' \
         FROM generate_series(1, $4) AS i ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(unit)
    .bind(accepted.result_id)
    .bind(N)
    .execute(app.db.pool())
    .await
    .unwrap();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM hr_cases WHERE campaign_id = $1")
        .bind(id)
        .fetch_one(app.db.pool())
        .await
        .unwrap();
    assert!(stored > N / 2, "{stored}");

    let started = Instant::now();
    let mut resp = get(&app, &format!("/api/v1/campaigns/{id}/hr-cases?format=csv")).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers().get("content-length").is_none(),
        "streamed, not buffered: {:?}",
        resp.headers()
    );
    let (mut chunks, mut body) = (0, Vec::new());
    while let Some(chunk) = resp.chunk().await.unwrap() {
        chunks += 1;
        body.extend_from_slice(&chunk);
    }
    assert!(chunks > 10, "{chunks} chunks");
    let rows = parse_csv(std::str::from_utf8(&body).unwrap());
    assert_eq!(rows.len() as i64, stored);
    let values: Vec<f64> = rows.iter().map(|r| hex_value(&r.0)).collect();
    if let Some(i) = values.windows(2).position(|p| p[0] >= p[1]) {
        panic!("not in value order: {:?} then {:?}", rows[i], rows[i + 1]);
    }
    eprintln!(
        "exported {} rows ({} bytes) in {:?}",
        rows.len(),
        body.len(),
        started.elapsed()
    );
    // A client that stops reading early does not disturb the server.
    let mut resp = get(
        &app,
        &format!("/api/v1/campaigns/{id}/hr-cases?format=json"),
    )
    .await;
    resp.chunk().await.unwrap();
    drop(resp);
    let again = json_export(&app, id, "limit=5&sort=hardness").await;
    assert_eq!(again.len(), 5);
    assert!(again.iter().all(|c| c.bits == 31));

    // The database connection dies in the middle of an export: the body breaks off with an
    // error instead of ending like a complete (shorter) export. JSON is the largest format
    // (about 20 MB here), far more than the channel and the sockets buffer, so the query is
    // still running after the first chunk.
    let mut resp = get(
        &app,
        &format!("/api/v1/campaigns/{id}/hr-cases?format=json"),
    )
    .await;
    let mut received: Vec<u8> = resp.chunk().await.unwrap().unwrap().to_vec();
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' \
           AND query LIKE 'SELECT x, bits, neg_log2_d, kind, rounded, unit_id FROM hr_cases%') t",
    )
    .fetch_one(app.db.pool())
    .await
    .unwrap();
    // (The export abandoned above may still be running too.)
    assert!(killed >= 1, "the export's query was running");
    let broke = loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    assert!(
        broke,
        "the export ended cleanly after {} bytes",
        received.len()
    );
    // What did arrive cannot pass for a complete export.
    assert!(serde_json::from_slice::<serde_json::Value>(&received).is_err());
}

#[tokio::test]
async fn coverage_and_hardness_match_the_campaign() {
    let app = TestApp::new().await;
    let s = seeded_campaign(&app).await;
    let (status, cov) = app
        .admin(
            Method::GET,
            &format!("/api/v1/campaigns/{}/coverage", s.id),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cov}");
    let cov = cov.as_array().unwrap();
    let binades: Vec<(bool, i64)> = cov
        .iter()
        .map(|b| {
            (
                b["negative"].as_bool().unwrap(),
                b["exponent"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        binades,
        vec![(true, 1), (false, -1), (false, 0)],
        "value order"
    );
    let sum = |k: &str| cov.iter().map(|b| b[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!(sum("units_total"), s.units_total);
    assert_eq!(sum("units_done"), s.units_done);
    assert_eq!(sum("units_leased"), 1);
    assert_eq!(sum("units_quarantined"), 0);
    let p = app.progress(s.id).await;
    let args_done: u64 = cov
        .iter()
        .map(|b| {
            b["arguments_done"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(
        args_done.to_string(),
        p["done"]["arguments"].as_str().unwrap()
    );

    let (status, hist) = app
        .admin(
            Method::GET,
            &format!("/api/v1/campaigns/{}/hardness", s.id),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut expected: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    for c in &s.cases {
        let e = expected.entry(c.bits).or_default();
        match c.kind {
            HrKind::Fp => e.0 += 1,
            HrKind::Mid => e.1 += 1,
        }
    }
    let got: BTreeMap<u32, (i64, i64)> = hist
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["bits"].as_u64().unwrap() as u32,
                (b["fp"].as_i64().unwrap(), b["mid"].as_i64().unwrap()),
            )
        })
        .collect();
    assert_eq!(got, expected);
}

fn args(app: &TestApp, words: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = words.iter().map(|s| s.to_string()).collect();
    v.extend(["--server", &app.base, "--admin-token", ADMIN].map(String::from));
    v
}

#[tokio::test]
async fn campaign_export_streams_what_the_api_serves() {
    let app = TestApp::new().await;
    let s = seeded_campaign(&app).await;
    let id = s.id.to_string();

    let (ok, out, err) = tmd(&args(&app, &["campaign", "export", &id, "--output", "csv"])).await;
    assert!(ok, "{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(
        err.contains("--shape object"),
        "where the runs are listed: {err}"
    );
    assert_eq!(
        out,
        text(&app, &format!("/api/v1/campaigns/{id}/hr-cases?format=csv")).await
    );
    // The former spelling still works, with a warning.
    let (ok, old, err) = tmd(&args(&app, &["campaign", "export", &id, "--format", "csv"])).await;
    assert!(ok, "{err}");
    assert_eq!(old, out);
    assert!(
        err.contains("warning") && err.contains("--output csv"),
        "{err}"
    );
    let (ok, out, err) = tmd(&args(&app, &["campaign", "export", &id])).await;
    assert!(ok, "{err}");
    let json: Vec<ExportedHrCase> = serde_json::from_str(&out).unwrap();
    assert_eq!(json.len(), s.cases.len());
    // The object shape carries the skipped runs with the cases.
    let (ok, out, err) = tmd(&args(
        &app,
        &["campaign", "export", &id, "--shape", "object"],
    ))
    .await;
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        doc["cases"].as_array().unwrap().len(),
        s.cases.len(),
        "{doc}"
    );
    assert!(doc["skipped_runs"].is_array(), "{doc}");

    let dir = std::env::temp_dir().join(format!("tmd-export-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("exp.wc");
    let (ok, out, err) = tmd(&args(
        &app,
        &[
            "campaign",
            "export",
            &id,
            "--output",
            "wc",
            "--kind",
            "mid",
            "--min-bits",
            "9",
            "--sort",
            "hardness",
            "-o",
            file.to_str().unwrap(),
        ],
    ))
    .await;
    assert!(ok, "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text(
            &app,
            &format!("/api/v1/campaigns/{id}/hr-cases?format=wc&kind=mid&min_bits=9&sort=hardness")
        )
        .await
    );

    let missing = dir.join("missing.csv");
    let (ok, _, err) = tmd(&args(
        &app,
        &[
            "campaign",
            "export",
            "999999",
            "--output-file",
            missing.to_str().unwrap(),
        ],
    ))
    .await;
    assert!(!ok);
    assert!(err.contains("not_found"), "{err}");
    assert!(!missing.exists(), "no file for a failed export");
    let (ok, _, err) = tmd(&args(&app, &["campaign", "export", &id, "--format", "xml"])).await;
    assert!(!ok && err.contains("xml"), "{err}");
    let (ok, _, err) = tmd(&args(
        &app,
        &[
            "campaign", "export", &id, "--output", "csv", "--shape", "object",
        ],
    ))
    .await;
    assert!(!ok && err.contains("--shape"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn campaign_watch_follows_until_the_end() {
    let app = TestApp::new().await;
    let s = seeded_campaign(&app).await;
    let id = s.id.to_string();
    // Not a terminal here: plain lines, one per change, and a last line saying why it ended.
    let watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_tmd-server"))
        .args(args(&app, &["campaign", "watch", &id, "--interval", "0.2"]))
        .env("TMD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (status, _) = app
        .admin(
            Method::POST,
            &format!("/api/v1/campaigns/{id}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let out = tokio::time::timeout(Duration::from_secs(30), watch.wait_with_output())
        .await
        .expect("watch exits once the campaign is cancelled")
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let first = format!("{}/{} units done", s.units_done, s.units_total);
    assert!(lines[0].contains(&first), "{stdout}");
    assert!(
        lines[0].contains("1 leased, 1 pending, 0 quarantined"),
        "{stdout}"
    );
    assert!(
        lines[0].contains(&format!("{} HR-cases", s.cases.len())),
        "{stdout}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with(&format!("campaign {id} cancelled")),
        "{stdout}"
    );

    // A complete campaign: one look, then it exits.
    let c = app.small_campaign(2, 4).await;
    let (_, w) = app.worker("w2").await;
    work_through(&w).await;
    let cid = c["id"].to_string();
    let (ok, out, err) = tmd(&args(&app, &["campaign", "watch", &cid])).await;
    assert!(ok, "{err}");
    assert!(
        out.lines().last().unwrap().starts_with(&format!(
            "campaign {cid} complete: 2/2 units done (100.00% of planned work)"
        )),
        "{out}"
    );
    // On a terminal it draws bars instead; `script` (util-linux) gives it one.
    if std::path::Path::new("/usr/bin/script").exists() {
        let command = [env!("CARGO_BIN_EXE_tmd-server").to_string()]
            .into_iter()
            .chain(args(&app, &["campaign", "watch", &cid]))
            .collect::<Vec<_>>()
            .join(" ");
        let out = tokio::process::Command::new("/usr/bin/script")
            .args(["-qec", &command, "/dev/null"])
            .env("TMD_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        // Without the colour and cursor escapes.
        let raw = String::from_utf8_lossy(&out.stdout);
        let mut screen = String::new();
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // CSI: ESC [ parameters, ended by a letter.
                for e in chars.by_ref() {
                    if e.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                screen.push(c);
            }
        }
        assert!(out.status.success(), "{screen}");
        assert!(
            screen.contains("2/2 units done (100.00% of planned work)"),
            "{screen}"
        );
        assert!(
            screen.contains("[========================================]"),
            "{screen}"
        );
        assert!(screen.contains("; campaign complete"), "{screen}");
    } else {
        eprintln!("no /usr/bin/script: the terminal view of campaign watch is not checked");
    }
    let (ok, _, err) = tmd(&args(&app, &["campaign", "watch", "999999"])).await;
    assert!(!ok && err.contains("not_found"), "{err}");
}

/// Skipped runs merged wherever a campaign shows them: expm1 in binary32 at 16 bits on
/// [2^-42, 2^-39) is three units, each with one trivial run (expm1(x) rounds like x: the two
/// lower binades whole, the third up to 0x1.6a09e6p-40); adjacent, with one reason and
/// `g(x)`, they read as one run in progress and in every export format, with the fewest bits
/// of the three.
#[tokio::test]
async fn adjacent_skipped_runs_read_as_one_in_progress_and_exports() {
    let app = TestApp::new().await;
    let c = app
        .campaign(
            serde_json::json!({"function": "expm1", "format": "binary32", "min_bits": 16,
            "unit_bits": 23, "ranges": [{"from": "0x1p-42", "to": "0x1p-39"}]}),
        )
        .await;
    let id = c["id"].as_i64().unwrap();
    assert_eq!(c["units_total"], 3, "{c}");
    let (_, w) = app.worker("w").await;
    let mut total = 0;
    while let Some(l) = w.lease(Some(1)).await.unwrap().lease {
        let u = &l.units[0];
        let runs =
            common::engine::honest_runs(tmd_kernels::Function::Expm1, "binary32", 16, &u.spec);
        assert_eq!(runs.len(), 1, "{runs:?}");
        total += runs[0].count;
        let r = common::engine::result(&l, u.unit_id, &[], &runs);
        w.post(l.lease_id, u.unit_id, &r).await.unwrap();
    }
    let p = app.progress(id).await;
    let runs = p["skipped_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{p}");
    assert!(total > 2 << 23, "{total}");
    assert_eq!(runs[0]["count"], total, "{p}");
    assert_eq!(runs[0]["first"], "0x1p-42", "{p}");
    assert_eq!(runs[0]["last"], "0x1.6a09e6p-40", "{p}");
    assert_eq!(runs[0]["reason"], "trivial", "{p}");
    for query in ["format=wc", "format=csv", "format=json&shape=object"] {
        let resp = get(&app, &format!("/api/v1/campaigns/{id}/hr-cases?{query}")).await;
        assert_eq!(resp.status(), StatusCode::OK, "{query}");
        let runs_header = resp.headers().get("x-tmd-skipped-runs").cloned();
        let body = resp.text().await.unwrap();
        assert!(
            !body.contains("0x1p-41"),
            "{query}: one run, not three: {body}"
        );
        if query == "format=csv" {
            // csv carries its runs in the headers only.
            assert_eq!(runs_header.unwrap(), "1", "{query}");
        } else {
            assert_eq!(body.matches("0x1.6a09e6p-40").count(), 1, "{query}: {body}");
        }
    }
}
