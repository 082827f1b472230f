//! Campaigns in named formats from end to end: a real `tmd-server` and a real
//! `tmd-worker` daemon on the CPU. exp in binary32 across the overflow threshold, across the
//! point where results round like 0, and on subnormal results; sin in binary16 through zero
//! (subnormal arguments, the exact case at 0, trivial runs where sin rounds like x); sinpi in
//! binary32 where exact cases lie on a lattice and are counted by its rule; sin and tan of
//! binary64 far out, walked along progressions. The
//! campaign's HR-cases and its skipped runs (stored, in the progress, in the csv and wc
//! exports) equal those of `tmd-worker search --format ...` over the same ranges.

use rug::float::Round;
use std::collections::BTreeSet;
use tmd_kernels::numbers::format::{parse_number, Format};
use tmd_test_support::TestDb;
use tmd_tests::{admin, compute_on_one_worker, every_unit_done_once, get, scratch, Server};

/// exp in binary32: [88.5, 89) holds log(2^128) = 88.72 (overflow above), [-105, -104.5)
/// holds log(2^-151) = -104.67 (rounds like 0 below, subnormal above), and the reported
/// [-100, -99.98) has subnormal results only (its -0x1.8feebp+6 is hard on the real grid).
const EXP_RANGES: [(&str, &str); 3] = [
    ("-0x1.a4p+6", "-0x1.a2p+6"),
    ("-0x1.9p+6", "-0x1.8fe8p+6"),
    ("0x1.62p+6", "0x1.64p+6"),
];

/// A campaign's parameters, as `campaign create` and `tmd-worker search` both take them.
struct Spec {
    function: &'static str,
    format: &'static str,
    min_bits: &'static str,
    unit_bits: &'static str,
    ranges: &'static [(&'static str, &'static str)],
}

impl Spec {
    fn args(&self) -> Vec<String> {
        [
            "--function",
            self.function,
            "--format",
            self.format,
            "--min-bits",
            self.min_bits,
            "--unit-bits",
            self.unit_bits,
        ]
        .map(String::from)
        .to_vec()
    }
}

type Run = (String, String, u64, String);

/// What a search found: HR-cases `(x, bits, kind)`, skipped runs, exact cases' arguments.
type Found = (
    BTreeSet<(String, i64, String)>,
    BTreeSet<Run>,
    BTreeSet<String>,
);

/// `tmd-worker search` over one range.
fn local(spec: &Spec, from: &str, to: &str) -> Found {
    // `--from=-0x...`: a negative value in its own word would read as a flag.
    let mut args = spec.args();
    args.extend([format!("--from={from}"), format!("--to={to}")]);
    let v = tmd_tests::search_json(&args);
    let cases = tmd_tests::hr_case_keys(&v);
    let runs = v["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(run_of)
        .collect();
    let exact = v["exact_cases"]
        .as_array()
        .expect("exact_cases")
        .iter()
        .map(|e| e["x"].as_str().unwrap().to_string())
        .collect();
    (cases, runs, exact)
}

fn run_of(s: &serde_json::Value) -> Run {
    (
        s["first"].as_str().unwrap().to_string(),
        s["last"].as_str().unwrap().to_string(),
        s["count"].as_u64().unwrap(),
        s["reason"].as_str().unwrap().to_string(),
    )
}

/// The runs of many units merged as a range's search merges them: runs of one reason that
/// meet (the next number of the format after one's last is the other's first).
fn merged(runs: &BTreeSet<Run>, format: &str) -> BTreeSet<Run> {
    let fmt: Format = format.parse().expect("a format");
    let value = |x: &str| parse_number(x, 64, Round::Nearest).expect("C99 hex");
    let mut v: Vec<&Run> = runs.iter().collect();
    v.sort_by(|a, b| value(&a.0).partial_cmp(&value(&b.0)).expect("finite"));
    let mut out: Vec<Run> = Vec::new();
    for r in v {
        match out.last_mut() {
            Some(l) if l.3 == r.3 && fmt.next_up(&value(&l.1)) == value(&r.0) => {
                l.1 = r.1.clone();
                l.2 += r.2;
            }
            _ => out.push(r.clone()),
        }
    }
    out.into_iter().collect()
}

/// Runs one campaign with a CPU daemon and checks it against the local searches: HR-cases,
/// exact cases, skipped runs. Returns the local searches' findings.
async fn campaign_equals_search(spec: Spec) -> Found {
    let db = TestDb::new().await;
    // One directory per campaign: the tests of this file run at once in one process.
    let dir = scratch(&format!("format-{}-{}", spec.function, spec.format));
    let server = Server::start(db.url(), &dir, &[]);
    let url = server.url();
    let mut args = vec!["campaign".to_string(), "create".to_string()];
    args.extend(spec.args());
    for (from, to) in spec.ranges {
        args.extend([format!("--from={from}"), format!("--to={to}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = admin(&url, &args);
    let campaign = c["id"].as_i64().unwrap();
    let units = c["units_total"].as_i64().unwrap();
    let bare = spec.format.starts_with('p');
    if bare {
        assert!(c["format"].is_null(), "{c}");
    } else {
        assert_eq!(c["format"], spec.format, "{c}");
    }
    let judged = if bare { "unbounded" } else { "subnormal" };
    assert!(c["judged_as"].as_str().unwrap().contains(judged), "{c}");
    let worker = compute_on_one_worker(&url, &dir.join("w"), campaign, units).await;

    let mut want_cases = BTreeSet::new();
    let mut want_runs = BTreeSet::new();
    let mut want_exact = BTreeSet::new();
    for (from, to) in spec.ranges {
        let (c, r, e) = local(&spec, from, to);
        want_cases.extend(c);
        want_runs.extend(r);
        want_exact.extend(e);
    }
    let got_cases = every_unit_done_once(&db, campaign, units).await;
    assert_eq!(got_cases, want_cases, "HR-cases equal a local search's");
    let got_exact: Vec<String> = sqlx::query_scalar(
        "SELECT e.x FROM results r JOIN units u ON u.id = r.unit_id, \
             jsonb_array_elements_text(r.exact_cases) AS e(x) WHERE u.campaign_id = $1",
    )
    .bind(campaign)
    .fetch_all(db.pool())
    .await
    .unwrap();
    assert_eq!(
        got_exact.iter().cloned().collect::<BTreeSet<_>>(),
        want_exact,
        "exact cases equal a local search's"
    );
    assert_eq!(got_exact.len(), want_exact.len(), "each exact case once");
    // An honest result is never implausible by its own counters: where its candidates include
    // exact cases counted by a lattice's rule (sinpi), the coordinator counts them as listed.
    let implausible: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM results r JOIN units u ON u.id = r.unit_id \
         WHERE u.campaign_id = $1 AND r.implausible AND r.expected_cases IS NULL",
    )
    .bind(campaign)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(
        implausible, 0,
        "results whose counters were judged to admit omissions"
    );

    let stored: Vec<(String, String, i64, String)> = sqlx::query_as(
        "SELECT first, last, count, reason FROM skipped_runs WHERE campaign_id = $1",
    )
    .bind(campaign)
    .fetch_all(db.pool())
    .await
    .unwrap();
    // A campaign keeps each unit's runs; a local search merges them across units.
    let got_runs: BTreeSet<Run> = stored
        .into_iter()
        .map(|(f, l, n, r)| (f, l, n as u64, r))
        .collect();
    assert_eq!(
        merged(&got_runs, spec.format),
        want_runs,
        "skipped runs equal a local search's"
    );

    // Shown in the progress, per reason and run by run.
    let progress = get(&url, &format!("/campaigns/{campaign}/progress"))
        .await
        .unwrap();
    let listed: BTreeSet<Run> = progress["skipped_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(run_of)
        .collect();
    assert_eq!(
        listed, want_runs,
        "merged as a range's search merges them: {progress}"
    );
    let total: u64 = want_runs.iter().map(|r| r.2).sum();
    let summed: u64 = progress["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["arguments"].as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(summed, total, "{progress}");
    assert!(progress["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| !s["rule"].as_str().unwrap().is_empty()));

    // In the wc export as comment lines with their reason, merged as in the progress; the csv export is RFC 4180 (no
    // line but its header and its cases) and says the format and the skipped count in its
    // headers.
    let export = |format: &'static str| {
        let url = url.clone();
        async move {
            reqwest::Client::new()
                .get(format!(
                    "{url}/api/v1/campaigns/{campaign}/hr-cases?format={format}"
                ))
                .bearer_auth(tmd_tests::ADMIN_TOKEN)
                .send()
                .await
                .unwrap()
        }
    };
    let wc = export("wc").await.text().await.unwrap();
    for r in &want_runs {
        let line = format!(
            "# skipped [{}, {}] ({} arguments): {}: ",
            r.0, r.1, r.2, r.3
        );
        assert!(wc.contains(&line), "wc: {line} in\n{wc}");
    }
    assert!(wc.contains(&format!("# format {}", spec.format)), "{wc}");
    let csv = export("csv").await;
    let judged = csv.headers()["x-tmd-judged-as"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(judged.starts_with(spec.format), "{judged}");
    assert_eq!(
        csv.headers()["x-tmd-skipped-runs"].to_str().unwrap(),
        want_runs.len().to_string()
    );
    let skipped: u64 = got_runs.iter().map(|r| r.2).sum();
    assert_eq!(
        csv.headers()["x-tmd-skipped-arguments"].to_str().unwrap(),
        skipped.to_string()
    );
    let csv = csv.text().await.unwrap();
    assert!(
        csv.split_terminator("\r\n").all(|l| !l.starts_with('#')),
        "{csv}"
    );
    drop(worker);
    drop(server);
    db.drop_db().await;
    let _ = std::fs::remove_dir_all(&dir);
    (want_cases, want_runs, want_exact)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary32_campaign_judges_on_the_real_grid_and_lists_what_it_skips() {
    let spec = Spec {
        function: "exp",
        format: "binary32",
        min_bits: "12",
        unit_bits: "14",
        ranges: &EXP_RANGES,
    };
    let (cases, _, _) = local(&spec, EXP_RANGES[1].0, EXP_RANGES[1].1);
    assert!(
        cases.iter().any(|c| c.0 == "-0x1.8feebp+6"),
        "the reported subnormal case"
    );
    let (_, runs, _) = campaign_equals_search(spec).await;
    let reasons: BTreeSet<&str> = runs.iter().map(|r| r.3.as_str()).collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["overflow", "underflow"]),
        "the ranges cross both ends"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary16_campaign_through_zero_searches_subnormals_and_lists_trivial_runs() {
    // sin in binary16 on [-2^-6, 2^-6]: normal and subnormal arguments of both signs, zero
    // (an exact case), and near 0 the runs where sin rounds like x.
    let (_, runs, exact) = campaign_equals_search(Spec {
        function: "sin",
        format: "binary16",
        min_bits: "6",
        unit_bits: "8",
        ranges: &[("-0x1p-6", "0x1p-6")],
    })
    .await;
    assert!(runs.iter().any(|r| r.3 == "trivial"), "{runs:?}");
    assert!(exact.contains("0x0p+0"), "{exact:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_precision_campaign_searches_zero_as_a_local_search_does() {
    // exp and cos in p11 (exponent unbounded, no subnormal numbers) on [-2^-1020, 2^-1020):
    // the normal numbers of binades -1022 and -1021 of both signs (trivial runs: both round
    // like 1) and zero, planned as a unit of its own: the exact case exp(0) = cos(0) = 1.
    for function in ["exp", "cos"] {
        let (cases, runs, exact) = campaign_equals_search(Spec {
            function,
            format: "p11",
            min_bits: "6",
            unit_bits: "10",
            ranges: &[("-0x1p-1020", "0x1p-1020")],
        })
        .await;
        assert_eq!(exact, BTreeSet::from(["0x0p+0".to_string()]), "{function}");
        assert!(cases.is_empty(), "{function}: {cases:?}");
        assert!(
            runs.iter().all(|r| r.3 == "trivial"),
            "{function}: {runs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sinpi_campaign_counts_the_exact_cases_of_its_lattice_by_rule() {
    // sinpi in binary32 on [1024, 1040): 32 multiples of 1/2, each exact (0 or ±1), counted by
    // the lattice's rule and listed nowhere; half of them are candidates of polynomial pieces,
    // which the results' counters count.
    let spec = Spec {
        function: "sinpi",
        format: "binary32",
        min_bits: "12",
        unit_bits: "14",
        ranges: &[("0x1p+10", "0x1.04p+10")],
    };
    let mut args = spec.args();
    args.extend(["--from=0x1p+10".to_string(), "--to=0x1.04p+10".to_string()]);
    let v = tmd_tests::search_json(&args);
    let lattice: Vec<u64> = v["exact_lattices"]
        .as_array()
        .expect("exact_lattices")
        .iter()
        .map(|l| l["count"].as_u64().unwrap())
        .collect();
    assert_eq!(lattice, [32], "{}", v["exact_lattices"]);
    let stats = &v["stats"];
    let unlisted = stats["candidates"].as_u64().unwrap()
        - stats["false_positives"].as_u64().unwrap()
        - v["hr_cases"].as_array().unwrap().len() as u64;
    assert!(unlisted > 0, "lattice points among the candidates: {stats}");
    let (cases, _, exact) = campaign_equals_search(spec).await;
    assert!(!cases.is_empty());
    assert!(exact.is_empty(), "{exact:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tanpi_campaign_counts_its_poles_on_the_lattice_and_repeats_its_first_period() {
    // tanpi in binary32 on [1024, 1040): 64 multiples of 1/4, of which 16 poles (k + 1/2),
    // counted by the lattice's rule: no skipped run, in the results or the coordinator's own
    // recomputation. Each unit of 2^16 arguments holds four periods of 2 and searches only
    // its first: the coordinator takes the copies like any case.
    let spec = Spec {
        function: "tanpi",
        format: "binary32",
        min_bits: "10",
        unit_bits: "16",
        ranges: &[("0x1p+10", "0x1.04p+10")],
    };
    let mut args = spec.args();
    args.extend(["--from=0x1p+10".to_string(), "--to=0x1.04p+10".to_string()]);
    let v = tmd_tests::search_json(&args);
    let lattice: Vec<(u64, u64)> = v["exact_lattices"]
        .as_array()
        .expect("exact_lattices")
        .iter()
        .map(|l| (l["count"].as_u64().unwrap(), l["poles"].as_u64().unwrap()))
        .collect();
    assert_eq!(lattice, [(48, 16)], "{}", v["exact_lattices"]);
    assert_eq!(v["skipped_arguments"], 16, "the poles, counted as skipped");
    let periodic = v["stats"]["periodic_arguments"].as_u64().unwrap();
    assert_eq!(periodic, 2 * 3 * (1 << 14), "{}", v["stats"]);
    let (cases, runs, exact) = campaign_equals_search(spec).await;
    assert!(
        cases.len() >= 8,
        "copies of the first period's cases: {cases:?}"
    );
    assert!(runs.is_empty(), "{runs:?}");
    assert!(exact.is_empty(), "{exact:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sin_and_tan_far_out_go_through_the_coordinator() {
    // binary64 units of 2^23 at 2^100 and -2^1000 (sin) and 2^100 (tan): consecutive
    // arguments are periods apart, walked along progressions of the angle; the coordinator
    // proves per binade that no result leaves the range (its recomputed skipped runs: none)
    // and takes the cases.
    const SIN: &[(&str, &str)] = &[
        ("0x1p+100", "0x1.00000008p+100"),
        ("-0x1.00000008p+1000", "-0x1p+1000"),
    ];
    const TAN: &[(&str, &str)] = &[("0x1p+100", "0x1.00000008p+100")];
    for (function, ranges) in [("sin", SIN), ("tan", TAN)] {
        let spec = Spec {
            function,
            format: "binary64",
            min_bits: "12",
            unit_bits: "23",
            ranges,
        };
        let mut args = spec.args();
        args.extend([
            format!("--from={}", ranges[0].0),
            format!("--to={}", ranges[0].1),
        ]);
        let v = tmd_tests::search_json(&args);
        let walked = v["stats"]["progression_arguments"].as_u64().unwrap_or(0);
        assert!(
            walked > 8_000_000,
            "{function}: walked along progressions: {}",
            v["stats"]
        );
        let (cases, runs, exact) = campaign_equals_search(spec).await;
        assert!(
            cases.len() > 2000 * ranges.len(),
            "{function}: {}",
            cases.len()
        );
        assert!(runs.is_empty() && exact.is_empty(), "{runs:?} {exact:?}");
    }
}
