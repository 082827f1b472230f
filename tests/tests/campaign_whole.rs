//! A whole function as a campaign: `campaign create --whole` with a real
//! `tmd-server` and a CPU `tmd-worker` daemon. The coordinator accepts every unit, the
//! collapsed ones (a block whose every argument is skipped, larger than a unit) included, and
//! the campaign's HR-cases and skipped arguments equal those of `tmd-worker search --whole`;
//! likewise a range whose plan merges the units it skips whole.
//! A campaign of a function with a reduction (cbrt, exp2) derives most binades from a base
//! region, and its cases equal those of a search of every binade.

use std::path::PathBuf;
use tmd_test_support::TestDb;
use tmd_tests::{admin, compute_on_one_worker, every_unit_done_once, scratch, Server};

const ARGS: [&str; 8] = [
    "--function",
    "exp",
    "--format",
    "binary16",
    "--min-bits",
    "8",
    "--unit-bits",
    "5",
];

/// A campaign computed by one CPU daemon on a fresh coordinator.
struct Computed {
    db: TestDb,
    dir: PathBuf,
    server: Server,
    /// The campaign as created.
    campaign: serde_json::Value,
    id: i64,
    units: i64,
}

/// Creates the campaign `create` (arguments of `campaign create`) on a fresh coordinator
/// (`serve`: more arguments of `tmd-server serve`) and has one CPU daemon compute every unit.
async fn computed(name: &str, create: &[&str], serve: &[&str]) -> Computed {
    let db = TestDb::new().await;
    let dir = scratch(name);
    let server = Server::start(db.url(), &dir, serve);
    let url = server.url();
    let mut args = vec!["campaign", "create"];
    args.extend(create);
    let campaign = admin(&url, &args);
    let id = campaign["id"].as_i64().unwrap();
    let units = campaign["units_total"].as_i64().unwrap();
    compute_on_one_worker(&url, &dir.join("w"), id, units).await;
    Computed {
        db,
        dir,
        server,
        campaign,
        id,
        units,
    }
}

/// What [`run_against_search`] found: the campaign as created, and how many of its units wider
/// than a unit (merged or collapsed blocks, every argument skipped) were done.
struct Run {
    campaign: serde_json::Value,
    wide_done: i64,
}

/// Computes the campaign `create` and checks it against `tmd-worker search` with `search`:
/// every unit done once, the same HR-cases (some), the same skipped arguments. `unit_size`:
/// its arguments per unit.
async fn run_against_search(name: &str, create: &[&str], search: &[&str], unit_size: i64) -> Run {
    let c = computed(name, create, &[]).await;
    let got = every_unit_done_once(&c.db, c.id, c.units).await;
    let v = tmd_tests::search_json(search);
    assert!(!got.is_empty());
    assert_eq!(
        got,
        tmd_tests::hr_case_keys(&v),
        "HR-cases equal the search's"
    );
    let stored: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(count), 0)::bigint FROM skipped_runs WHERE campaign_id = $1",
    )
    .bind(c.id)
    .fetch_one(c.db.pool())
    .await
    .unwrap();
    assert_eq!(
        stored as u64,
        v["skipped_arguments"].as_u64().unwrap(),
        "skipped arguments equal the search's"
    );
    let wide_done: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM units WHERE campaign_id = $1 AND count > $2 AND state = 'done'",
    )
    .bind(c.id)
    .bind(unit_size)
    .fetch_one(c.db.pool())
    .await
    .unwrap();
    Run {
        campaign: c.campaign,
        wide_done,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_whole_campaign_equals_a_whole_search() {
    let mut whole = vec!["--whole"];
    whole.extend(ARGS);
    let run = run_against_search("campaign-whole", &whole, &whole, 32).await;
    // Its one range is the format's: [-max, 2^16).
    let c = &run.campaign;
    assert_eq!(c["ranges"][0]["from"], "-0x1.ffcp+15", "{c}");
    // Collapsed units (more than 2^5 arguments) were planned, and accepted.
    assert!(run.wide_done > 0, "no collapsed unit");
}

/// What a computed campaign that may derive holds once complete: its HR-cases, how many of
/// them were derived, and its `wc` export.
async fn derived_cases(c: &Computed) -> (Keys, i64, String) {
    let got = every_unit_done_once(&c.db, c.id, c.units).await;
    let derived: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hr_cases WHERE campaign_id = $1 AND derived_from IS NOT NULL",
    )
    .bind(c.id)
    .fetch_one(c.db.pool())
    .await
    .unwrap();
    let wc = tmd_tests::get_text(
        &c.server.url(),
        &format!("/campaigns/{}/hr-cases?format=wc", c.id),
    )
    .await;
    (got, derived, wc)
}

/// A campaign of `create` computed by one CPU daemon on a fresh coordinator: the campaign as
/// created, its HR-cases, how many of them were derived, and its `wc` export.
async fn derived_campaign(name: &str, create: &[&str]) -> (serde_json::Value, Keys, i64, String) {
    let c = computed(name, create, &[]).await;
    let (got, derived, wc) = derived_cases(&c).await;
    (c.campaign, got, derived, wc)
}

type Keys = std::collections::BTreeSet<(String, i64, String)>;

/// cbrt in binary16, whole: the campaign searches `[1, 8)`, `(-8, -1]` and a few subnormal
/// units and derives the rest, as a local search does; its HR-cases equal those of a search of
/// every binade, and so do those of the campaign created with `--no-reduction`, which searches
/// every binade. The export names the derived runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_that_derives_equals_a_search_of_every_binade() {
    let args = [
        "--whole",
        "--function",
        "cbrt",
        "--format",
        "binary16",
        "--min-bits",
        "6",
        "--unit-bits",
        "7",
    ];
    let mut every = args.to_vec();
    every.push("--no-reduction");
    let truth = tmd_tests::hr_case_keys(&tmd_tests::search_json(&every));
    assert!(truth.len() > 100, "{} HR-cases", truth.len());
    // A coordinator that derives nothing (`--derive-tasks 0`) takes every result and queues
    // the base ones: the campaign stays incomplete, and says so, until one that derives
    // starts on the same database.
    let mut c = computed("campaign-derives-cbrt", &args, &["--derive-tasks", "0"]).await;
    let url = c.server.url();
    let p = tmd_tests::get(&url, &format!("/campaigns/{}/progress", c.id))
        .await
        .unwrap();
    assert_eq!(p["done"]["units"].as_i64(), Some(c.units), "{p}");
    assert_eq!(p["complete"], false, "{p}");
    assert!(p["derivations_pending"].as_i64().unwrap() > 0, "{p}");
    assert_eq!(p["hr_cases_derived"], 0, "{p}");
    // Not "done" with an ETA of 0 while the derivation waits: no ETA, and why.
    assert_eq!(p["work"]["eta_basis"], "deriving", "{p}");
    assert!(p["eta_seconds"].is_null(), "{p}");
    let partial =
        tmd_tests::get_text(&url, &format!("/campaigns/{}/hr-cases?format=wc", c.id)).await;
    assert!(
        partial.contains("\n# not complete (campaign active)"),
        "{partial}"
    );
    c.server.kill();
    c.server = Server::start(c.db.url(), &c.dir, &[]);
    let url = c.server.url();
    let (got, derived, wc) = derived_cases(&c).await;
    assert!(!wc.contains("# not complete"), "{wc}");
    let reduced = c.campaign.clone();
    let runs = reduced["derived"].as_array().expect("derived runs listed");
    assert_eq!(runs.len(), 4, "two runs per sign: {runs:?}");
    assert!(runs[0]["rule"].as_str().unwrap().contains("cbrt(8x)"));
    assert_eq!(got, truth, "HR-cases of the campaign that derives");
    assert!(
        derived as usize > got.len() / 2,
        "{derived} of {} HR-cases derived",
        got.len()
    );
    assert_eq!(wc.matches("\n# derived [").count(), 4, "{wc}");
    // A known case of a derived binade (a lab's list covers every binade) is loaded as its
    // base case, in the base unit, whose result holds it: nothing reopens.
    let (copy, from): (String, String) = sqlx::query_as(
        "SELECT x, derived_from FROM hr_cases WHERE campaign_id = $1 \
         AND derived_from IS NOT NULL ORDER BY id DESC LIMIT 1",
    )
    .bind(c.id)
    .fetch_one(c.db.pool())
    .await
    .unwrap();
    let loaded = tmd_tests::post_json(
        &url,
        &format!("/campaigns/{}/known-cases", c.id),
        &serde_json::json!({ "lines": [copy] }),
    )
    .await;
    assert_eq!(loaded["loaded"], 1, "{loaded}");
    assert_eq!(loaded["derived_to_base"], 1, "{loaded}");
    assert_eq!(loaded["units_reopened"], 0, "{loaded}");
    let known: String = sqlx::query_scalar("SELECT x FROM known_cases WHERE campaign_id = $1")
        .bind(c.id)
        .fetch_one(c.db.pool())
        .await
        .unwrap();
    assert_eq!(known, from, "{copy} loaded as its base case");
    // A base case removed by an admin takes its derived copies with it.
    let (base, copies): (String, i64) = sqlx::query_as(
        "SELECT derived_from, count(*) FROM hr_cases WHERE campaign_id = $1 \
         AND derived_from IS NOT NULL GROUP BY derived_from ORDER BY derived_from LIMIT 1",
    )
    .bind(c.id)
    .fetch_one(c.db.pool())
    .await
    .unwrap();
    assert!(copies > 1, "{base}: {copies} derived copies");
    let removed = tmd_tests::post_json(
        &url,
        &format!("/campaigns/{}/cases/remove", c.id),
        &serde_json::json!({"xs": [base], "reason": "test: a base case goes"}),
    )
    .await;
    assert_eq!(removed["removed"].as_i64(), Some(copies + 1), "{removed}");
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hr_cases WHERE campaign_id = $1 AND (x = $2 OR derived_from = $2)",
    )
    .bind(c.id)
    .bind(&base)
    .fetch_one(c.db.pool())
    .await
    .unwrap();
    assert_eq!(left, 0, "{base} and its copies removed");
    let (searched, every_got, none, _) = derived_campaign("campaign-every-cbrt", &every).await;
    assert!(searched.get("derived").is_none(), "{searched}");
    assert_eq!(none, 0);
    assert_eq!(every_got, truth, "HR-cases of the campaign of every binade");
    let units = |c: &serde_json::Value| c["units_total"].as_i64().unwrap();
    assert!(
        units(&reduced) * 3 < units(&searched),
        "{} units derive, {} search every binade",
        units(&reduced),
        units(&searched)
    );
}

/// exp2 in binary16 on [1, 16): a range's plan derives [2, 16) from [1, 2) (each case of
/// [1, 2) on the coarser grids of the binades above it), with the same HR-cases as a search of
/// the range.
#[tokio::test(flavor = "multi_thread")]
async fn a_range_that_derives_equals_its_search() {
    let args = [
        "--function",
        "exp2",
        "--format",
        "binary16",
        "--min-bits",
        "5",
        "--unit-bits",
        "6",
        "--from",
        "1",
        "--to",
        "16",
    ];
    let mut every = args.to_vec();
    every.push("--no-reduction");
    let truth = tmd_tests::hr_case_keys(&tmd_tests::search_json(&every));
    let (c, got, derived, _) = derived_campaign("campaign-derives-exp2", &args).await;
    assert!(
        c["derived"].as_array().is_some_and(|r| !r.is_empty()),
        "{c}"
    );
    // Four binades of 16 units: [1, 2) searched, and of the rest at most the units whose
    // results overflow near 16.
    assert!(c["units_total"].as_i64().unwrap() < 32, "{c}");
    assert!(derived > 0 && !truth.is_empty());
    assert_eq!(got, truth, "HR-cases of the range that derives");
}

/// log2 in binary16, whole: the campaign searches [1/2, 2), one binade per binade of results
/// (2^1, 2^2, 2^4, 2^8) and the subnormal arguments below 2^-16, derives the rest, each run
/// naming its base, and its HR-cases equal those of a search of every binade.
#[tokio::test(flavor = "multi_thread")]
async fn a_log2_campaign_derives_from_one_binade_per_binade_of_results() {
    let args = [
        "--function",
        "log2",
        "--format",
        "binary16",
        "--min-bits",
        "5",
        "--unit-bits",
        "6",
        "--whole",
    ];
    let mut every = args.to_vec();
    every.push("--no-reduction");
    let truth = tmd_tests::hr_case_keys(&tmd_tests::search_json(&every));
    let computed = computed("campaign-derives-log2", &args, &[]).await;
    let (got, derived, wc) = derived_cases(&computed).await;
    // The derivation counts its cases on tally shards of its own (32 and up), apart from the
    // posts' and the claims'.
    let on_own_shards: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(hr_cases), 0)::bigint FROM campaign_tallies \
         WHERE campaign_id = $1 AND shard >= 32",
    )
    .bind(computed.id)
    .fetch_one(computed.db.pool())
    .await
    .unwrap();
    assert_eq!(
        on_own_shards, derived,
        "derived cases counted on the derivation's shards"
    );
    let c = computed.campaign;
    let runs = c["derived"].as_array().expect("derived runs");
    let bases: std::collections::BTreeSet<&str> =
        runs.iter().filter_map(|r| r["base"].as_str()).collect();
    assert_eq!(
        bases.into_iter().collect::<Vec<_>>(),
        [
            "[0x1p+1, 0x1p+2)",
            "[0x1p+2, 0x1p+3)",
            "[0x1p+4, 0x1p+5)",
            "[0x1p+8, 0x1p+9)"
        ],
        "{c}"
    );
    // 2^10 arguments a binade, 16 units each: 6 binades and the subnormals below 2^-16.
    assert!(c["units_total"].as_i64().unwrap() < 8 * 16, "{c}");
    assert!(derived > 0 && !truth.is_empty());
    assert_eq!(got, truth, "HR-cases of whole log2 that derives");
    assert!(wc.contains("log2(2^j m) = j + log2(m)"), "{wc}");
}

/// A range across exp's overflow (binary16 overflows from about 11.09): its plan merges the
/// units past it into one per binade, the daemon's results for them are accepted, and the
/// campaign's HR-cases and skipped arguments equal those of `tmd-worker search` of the range.
#[tokio::test(flavor = "multi_thread")]
async fn a_range_with_merged_units_equals_its_search() {
    let range = [
        "--function",
        "exp",
        "--format",
        "binary16",
        "--min-bits",
        "6",
        "--unit-bits",
        "5",
        "--from",
        "4",
        "--to",
        "0x1p+15",
    ];
    let run = run_against_search("campaign-range-merged", &range, &range, 32).await;
    // 13 binades of 2^10 arguments, 32 units each when cut: [4, 8) and most of [8, 16) searched.
    let units = run.campaign["units_total"].as_i64().unwrap();
    assert!(units < 13 * 32 / 4, "{units} units: nothing merged");
    assert!(run.wide_done >= 12, "{} merged units done", run.wide_done);
}
