//! A whole function as a campaign: `campaign create --whole` with a real
//! `tmd-server` and a CPU `tmd-worker` daemon. The coordinator accepts every unit, the
//! collapsed ones (a block whose every argument is skipped, larger than a unit) included, and
//! the campaign's HR-cases and skipped arguments equal those of `tmd-worker search --whole`;
//! likewise a range whose plan merges the units it skips whole.
//! A campaign searches every binade: for a function with a reduction (cbrt) its cases equal
//! those of a whole search that derives most binades from a base region.

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

/// cbrt in binary16: the campaign searches every binade, the local search only `[1, 8)` and
/// `(-8, -1]` with a few subnormal units, deriving the rest; the same HR-cases.
#[tokio::test(flavor = "multi_thread")]
async fn a_campaign_of_every_binade_equals_a_reduced_search() {
    let args = [
        "--function",
        "cbrt",
        "--format",
        "binary16",
        "--min-bits",
        "6",
        "--unit-bits",
        "7",
    ];
    let db = TestDb::new().await;
    let dir = scratch("campaign-whole-cbrt");
    let server = Server::start(db.url(), &dir, &[]);
    let url = server.url();
    let mut create = vec!["campaign", "create", "--whole"];
    create.extend(args);
    let c = admin(&url, &create);
    let campaign = c["id"].as_i64().unwrap();
    let units = c["units_total"].as_i64().unwrap();
    compute_on_one_worker(&url, &dir.join("w"), campaign, units).await;
    let got = every_unit_done_once(&db, campaign, units).await;
    let mut local = vec!["--whole"];
    local.extend(args);
    let v = tmd_tests::search_json(&local);
    let derived = v["derived"].as_array().expect("derived runs listed");
    assert_eq!(derived.len(), 4, "two runs per sign: {derived:?}");
    assert!(
        v["derived_arguments"].as_u64().unwrap() > v["arguments"].as_u64().unwrap(),
        "most arguments derived: {} searched",
        v["arguments"]
    );
    assert!(got.len() > 100, "{} HR-cases", got.len());
    assert_eq!(
        got,
        tmd_tests::hr_case_keys(&v),
        "HR-cases equal a reduced whole search's"
    );
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
