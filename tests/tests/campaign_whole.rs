//! A whole function as a campaign: `campaign create --whole` with a real
//! `tmd-server` and a CPU `tmd-worker` daemon. The coordinator accepts every unit, the
//! collapsed ones (a block whose every argument is skipped, larger than a unit) included, and
//! the campaign's HR-cases and skipped arguments equal those of `tmd-worker search --whole`;
//! likewise a range whose plan merges the units it skips whole.
//! A campaign of a function with a reduction (cbrt, exp2) derives most binades from a base
//! region, and its cases equal those of a search of every binade.

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

/// What [`run_against_search`] found: the campaign as created, and how many of its units wider
/// than a unit (merged or collapsed blocks, every argument skipped) were done.
struct Run {
    campaign: serde_json::Value,
    wide_done: i64,
}

/// Creates the campaign `create` (arguments of `campaign create`) on a real coordinator, has one
/// CPU daemon compute it, and checks it against `tmd-worker search` with `search`: every unit
/// done once, the same HR-cases (some), the same skipped arguments. `unit_size`: its
/// arguments per unit.
async fn run_against_search(name: &str, create: &[&str], search: &[&str], unit_size: i64) -> Run {
    let db = TestDb::new().await;
    let dir = scratch(name);
    let server = Server::start(db.url(), &dir, &[]);
    let url = server.url();
    let mut args = vec!["campaign", "create"];
    args.extend(create);
    let c = admin(&url, &args);
    let campaign = c["id"].as_i64().unwrap();
    let units = c["units_total"].as_i64().unwrap();
    compute_on_one_worker(&url, &dir.join("w"), campaign, units).await;
    let got = every_unit_done_once(&db, campaign, units).await;
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
    .bind(campaign)
    .fetch_one(db.pool())
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
    .bind(campaign)
    .bind(unit_size)
    .fetch_one(db.pool())
    .await
    .unwrap();
    Run {
        campaign: c,
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

/// A campaign of `create` (arguments of `campaign create`) computed by one CPU daemon on a
/// fresh coordinator: the campaign as created, its HR-cases, how many of them were derived, and
/// its `wc` export.
async fn derived_campaign(name: &str, create: &[&str]) -> (serde_json::Value, Keys, i64, String) {
    let db = TestDb::new().await;
    let dir = scratch(name);
    let server = Server::start(db.url(), &dir, &[]);
    let url = server.url();
    let mut args = vec!["campaign", "create"];
    args.extend(create);
    let c = admin(&url, &args);
    let campaign = c["id"].as_i64().unwrap();
    let units = c["units_total"].as_i64().unwrap();
    compute_on_one_worker(&url, &dir.join("w"), campaign, units).await;
    let got = every_unit_done_once(&db, campaign, units).await;
    let derived: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM hr_cases WHERE campaign_id = $1 AND derived_from IS NOT NULL",
    )
    .bind(campaign)
    .fetch_one(db.pool())
    .await
    .unwrap();
    let wc = reqwest::Client::new()
        .get(format!(
            "{url}/api/v1/campaigns/{campaign}/hr-cases?format=wc"
        ))
        .bearer_auth(tmd_tests::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    (c, got, derived, wc)
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
    let (reduced, got, derived, wc) = derived_campaign("campaign-derives-cbrt", &args).await;
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
