//! The wire types' serde contracts: what old and new peers read and write.

use super::*;

#[test]
fn error_envelope_has_code_and_message() {
    let e = ApiError {
        code: "lease_expired".into(),
        message: "the lease expired; ask for new work".into(),
    };
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["code"], "lease_expired");
    let back: ApiError = serde_json::from_value(json).unwrap();
    assert_eq!(back, e);
}

#[test]
fn unit_result_round_trips_and_rejects_unknown_fields() {
    let text = r#"{"fencing_token":7,"stats":{"units":1,"domains":2,"phase1_failures":0,
        "subdomains":0,"phase2_failures":0,"phase3_arguments":0,"candidates":1,
        "false_positives":0},"hr_cases":[{"x":"0x1.8p+0","bits":20,"neg_log2_d":45.5,
        "kind":"mid","rounded":"0x1.2p+2"}],"elapsed":1.5,"digest":"ab"}"#;
    let r: UnitResult = serde_json::from_str(text).unwrap();
    assert_eq!(r.hr_cases[0].kind, HrKind::Mid);
    assert!(r.exact_cases.is_empty());
    let again: UnitResult = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(again, r);
    let extra = text.replacen("{\"fencing_token\"", "{\"bogus\":1,\"fencing_token\"", 1);
    assert!(serde_json::from_str::<UnitResult>(&extra).is_err());
}

#[test]
fn formats_and_skipped_runs_are_optional_on_the_wire() {
    // A result from before skipped runs reads with none; none are not written.
    let r: UnitResult = serde_json::from_str(
        r#"{"fencing_token":1,"stats":{"units":1,"domains":0,"phase1_failures":0,
        "subdomains":0,"phase2_failures":0,"phase3_arguments":0,"candidates":0,
        "false_positives":0},"hr_cases":[],"elapsed":0.5,"digest":"ab"}"#,
    )
    .unwrap();
    assert!(r.skipped.is_empty());
    assert!(serde_json::to_value(&r).unwrap().get("skipped").is_none());
    // A bare precision's task has no format field: what older servers sent.
    let mut task = LeaseTask {
        campaign_id: 1,
        function: "exp".into(),
        precision: 24,
        min_bits: 12,
        format: None,
    };
    assert!(serde_json::to_value(&task).unwrap().get("format").is_none());
    task.format = Some("binary32".into());
    let v = serde_json::to_value(&task).unwrap();
    assert_eq!(v["format"], "binary32");
    assert_eq!(serde_json::from_value::<LeaseTask>(v).unwrap(), task);
    let run = SkippedRun {
        first: "0x1.63p+3".into(),
        last: "0x1.ffcp+3".into(),
        count: 628,
        reason: "overflow".into(),
        rule: String::new(),
    };
    let posted: SkippedRun = serde_json::from_str(
        r#"{"first":"0x1.63p+3","last":"0x1.ffcp+3","count":628,"reason":"overflow"}"#,
    )
    .unwrap();
    assert_eq!(posted, run, "the rule is the server's to add");
}

#[test]
fn leased_unit_is_flat_and_holds_a_full_u64() {
    let u = LeasedUnit {
        unit_id: 3,
        spec: UnitSpec {
            negative: true,
            exponent: -2,
            first: u64::MAX,
            count: 1,
        },
    };
    let json = serde_json::to_value(&u).unwrap();
    assert_eq!(json["first"], serde_json::json!(u64::MAX));
    assert_eq!(json["negative"], true);
    assert_eq!(serde_json::from_value::<LeasedUnit>(json).unwrap(), u);
}
