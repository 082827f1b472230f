//! Domain rules with no I/O: validating requests, sizing leases, and judging a posted result
//! against its lease and unit. Storage calls these under its row locks.

pub mod engine;
pub mod trust;

use crate::error::{Error, Result};
use tmd_wire::{CampaignState, CreateCampaign, UnitResult};

/// Server-side limits of the lease protocol.
#[derive(Debug, Clone)]
pub struct LeasePolicy {
    /// Lifetime of a lease, and of each heartbeat's extension.
    pub ttl_seconds: u32,
    /// Work asked for when the request gives no `seconds`.
    pub default_seconds: u32,
    /// Most units in one lease, whatever the worker's speed: it bounds one claim statement and
    /// one answer (about 100 bytes of JSON per unit).
    pub max_units: u32,
    /// Failures or expiries after which a unit is quarantined.
    pub max_attempts: u32,
    /// Longest life of a lease, heartbeats included: a worker cannot sit on units forever.
    pub max_lease_seconds: u32,
    /// Most units a worker whose speed is not measured yet may hold in its active leases
    /// together (each of its leases holds one unit until its first result measures it).
    pub max_units_per_worker: u32,
    /// Most work a measured worker may hold in its active leases together, in seconds at its
    /// measured speed: room for the lease it computes and the next one it asks for early, not
    /// for hoarding. A fast GPU gets thousands of units; a slow CPU one or two.
    pub max_held_seconds: u32,
}

impl Default for LeasePolicy {
    fn default() -> Self {
        LeasePolicy {
            ttl_seconds: 300,
            // A minute of work: long enough that lease requests are rare (one a minute per
            // device), short enough that a lost worker loses a minute.
            default_seconds: 60,
            max_units: 20_000,
            max_attempts: 5,
            max_lease_seconds: 6 * 3600,
            max_units_per_worker: 128,
            max_held_seconds: 600,
        }
    }
}

/// What a worker holds in its active leases.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    pub units: i64,
    pub arguments: f64,
}

/// How many units of `2^unit_bits` arguments to lease: about `seconds` of work at the worker's
/// measured `speed` (arguments per second), at least one, at most `policy.max_units`, and no
/// more than what keeps the worker's `held` work within `policy.max_held_seconds` (one unit
/// when it holds nothing, however slow it is). A worker never measured gets one unit (its first
/// result calibrates it) while it holds fewer than `policy.max_units_per_worker`. 0: it holds
/// its share already.
pub fn lease_size(
    policy: &LeasePolicy,
    seconds: u32,
    speed: Option<f64>,
    unit_bits: u32,
    held: Held,
) -> u32 {
    let Some(speed) = speed.filter(|s| s.is_finite() && *s > 0.0) else {
        return u32::from(held.units < i64::from(policy.max_units_per_worker));
    };
    let per_unit = 2f64.powi(unit_bits as i32);
    let want = (f64::from(seconds) * speed / per_unit)
        .floor()
        .clamp(1.0, f64::from(policy.max_units.max(1)));
    let mut room = ((f64::from(policy.max_held_seconds) * speed - held.arguments) / per_unit)
        .floor()
        .min(f64::from(policy.max_units.max(1)));
    if held.units <= 0 {
        room = room.max(1.0);
    }
    if room < 1.0 {
        0
    } else {
        want.min(room) as u32
    }
}

/// HR-cases a unit of `2^unit_bits` arguments is expected to hold at `min_bits`: an argument
/// has `min_bits` identical bits after the rounding bit with probability about `2^-min_bits`,
/// next to a floating-point number or a midpoint, so twice that.
pub fn expected_cases_per_unit(unit_bits: u32, min_bits: u32) -> f64 {
    2f64.powi(unit_bits as i32 + 1 - min_bits as i32)
}

/// Refuses a campaign whose units would expect more than half of `max_cases` HR-cases each:
/// their results could exceed the per-result limit, and such a campaign could never finish.
pub fn check_cases_fit(unit_bits: u32, min_bits: u32, max_cases: usize) -> Result<()> {
    let expected = expected_cases_per_unit(unit_bits, min_bits);
    if expected > max_cases as f64 / 2.0 {
        return Err(Error::BadRequest(format!(
            "units of 2^{unit_bits} arguments expect about {expected:.0} HR-cases each at \
             min_bits {min_bits}, more than half the server's limit of {max_cases} per result: \
             raise min_bits or lower unit_bits"
        )));
    }
    Ok(())
}

/// Checks a text for people (a name, note, owner or reason): 1 to `max` bytes after trimming,
/// and no control character (NUL cannot be stored; escapes and newlines would rewrite a
/// terminal or forge log lines). Returns it trimmed.
pub fn check_text<'a>(field: &str, value: &'a str, max: usize) -> Result<&'a str> {
    let v = value.trim();
    if v.is_empty() || v.len() > max {
        return Err(Error::BadRequest(format!(
            "{field} must be 1 to {max} bytes"
        )));
    }
    if v.chars().any(char::is_control) {
        return Err(Error::BadRequest(format!(
            "{field} must not contain control characters"
        )));
    }
    Ok(v)
}

/// Whether `s` is a number as the engine spells one (C99 hex or decimal, `inf`, `nan`): ASCII
/// letters, digits, `.`, `+`, `-` and `_`, 1 to 100 bytes. Anything else cannot be a number,
/// and is refused before it reaches MPFR, a log line or the database.
pub fn is_number_text(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-' | b'_'))
}

/// The shortest time a unit is believed to take, in seconds: no `elapsed` below it (1e-9, or
/// 5e-324 which would make the speed infinite) inflates a worker's speed.
pub const MIN_ELAPSED_SECONDS: f64 = 1e-3;

/// A speed measurement (arguments per second) from one result: `count` arguments in the
/// worker's `elapsed`, but never faster than the server's own clock allows, `wall` seconds
/// since the worker's previous result or its lease (whichever is later). `None` when the
/// worker measured nothing (`elapsed` 0) or sent nonsense.
pub fn speed_sample(count: i64, elapsed: f64, wall: f64) -> Option<f64> {
    if !(elapsed > 0.0 && elapsed.is_finite()) || count <= 0 {
        return None;
    }
    let wall = if wall.is_finite() { wall } else { 0.0 };
    let seconds = elapsed.max(wall).max(MIN_ELAPSED_SECONDS);
    Some(count as f64 / seconds)
}

/// The campaign fields left after validation (the engine checks function, precision and
/// ranges when it splits them).
#[derive(Debug, Clone)]
pub struct NewCampaign {
    pub name: String,
    pub function: String,
    pub format: Option<String>,
    pub precision: Option<u32>,
    pub min_bits: u32,
    pub ranges: Vec<tmd_wire::ArgRange>,
    pub unit_bits: Option<u32>,
    pub replication: u32,
    pub distinct_owners: bool,
    pub adaptive: bool,
    pub audit_rate: f64,
    pub trust_after: u32,
    pub priority: i32,
}

/// Checks the fields of a campaign request that do not need the engine.
pub fn validate_campaign(req: &CreateCampaign) -> Result<NewCampaign> {
    let bad = |m: String| Err(Error::BadRequest(m));
    if !is_number_text(req.function.trim()) {
        return bad("function must be a name of letters, digits and `_`".into());
    }
    if req.format.as_deref().is_some_and(|f| !is_number_text(f)) {
        return bad("format must be a name such as binary32 or binary64".into());
    }
    match (&req.format, req.precision) {
        (Some(_), Some(_)) => return bad("give either format or precision, not both".into()),
        (None, None) => return bad("give format (binary32, binary64) or precision".into()),
        _ => {}
    }
    if let Some(p) = req.precision {
        if !(8..=64).contains(&p) {
            return bad(format!("precision must be in 8..=64, got {p}"));
        }
    }
    if !(1..=tmd_kernels::search::MAX_MIN_BITS).contains(&req.min_bits) {
        return bad(format!(
            "min_bits must be in 1..={}, got {}",
            tmd_kernels::search::MAX_MIN_BITS,
            req.min_bits
        ));
    }
    if req.ranges.is_empty() {
        return bad("ranges must hold at least one range".into());
    }
    if req.ranges.len() > 1024 {
        return bad("at most 1024 ranges".into());
    }
    for r in &req.ranges {
        if !is_number_text(r.from.trim()) || !is_number_text(r.to.trim()) {
            return bad(
                "each range needs `from` and `to`: numbers (C99 hex or decimal) of at most 100 characters".into(),
            );
        }
    }
    if let Some(u) = req.unit_bits {
        if u > 62 {
            return bad(format!("unit_bits must be in 0..=62, got {u}"));
        }
    }
    let replication = req.replication.unwrap_or(1);
    if !(1..=16).contains(&replication) {
        return bad(format!("replication must be in 1..=16, got {replication}"));
    }
    let adaptive = req.adaptive.unwrap_or(false);
    if adaptive && replication < 2 {
        return bad(
            "adaptive replication needs replication >= 2 (with 1 nothing is replicated anyway)"
                .into(),
        );
    }
    let audit_rate = req.audit_rate.unwrap_or(0.1);
    if !(audit_rate > 0.0 && audit_rate <= 1.0) {
        return bad(format!(
            "audit_rate must be in (0, 1], got {audit_rate}: 0 would never check a trusted worker again"
        ));
    }
    let trust_after = req.trust_after.unwrap_or(20);
    if !(1..=1_000_000).contains(&trust_after) {
        return bad(format!(
            "trust_after must be in 1..=1000000, got {trust_after}"
        ));
    }
    let priority = req.priority.unwrap_or(0);
    if !(-1_000_000..=1_000_000).contains(&priority) {
        return bad("priority must be in -1000000..=1000000".into());
    }
    let name = match &req.name {
        Some(n) => check_text("name", n, 200)?.to_string(),
        None => {
            let fmt = req
                .format
                .clone()
                .or(req.precision.map(|p| format!("p{p}")))
                .unwrap_or_default();
            format!("{}-{}", req.function, fmt)
        }
    };
    Ok(NewCampaign {
        name,
        function: req.function.trim().to_string(),
        format: req.format.clone(),
        precision: req.precision,
        min_bits: req.min_bits,
        ranges: req.ranges.clone(),
        unit_bits: req.unit_bits,
        replication,
        // Replicas from one owner prove little: by default they come from different owners.
        distinct_owners: req.distinct_owners.unwrap_or(replication > 1),
        adaptive,
        audit_rate,
        trust_after,
        priority,
    })
}

/// Whether a campaign may go from `from` to `to`.
pub fn transition_allowed(from: CampaignState, to: CampaignState) -> bool {
    use CampaignState::*;
    matches!(
        (from, to),
        (Active, Paused) | (Paused, Active) | (Active, Cancelled) | (Paused, Cancelled)
    )
}

/// Checks the parts of a result the engine does not: sizes, digest shape, finite numbers.
pub fn validate_result(r: &UnitResult, max_cases: usize) -> Result<()> {
    let bad = |m: String| Err(Error::BadRequest(m));
    if r.digest.len() != 64 || !r.digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return bad("digest must be 64 hexadecimal digits (SHA-256)".into());
    }
    if !r.elapsed.is_finite() || !(0.0..=1e9).contains(&r.elapsed) {
        return bad("elapsed must be a number of seconds in [0, 1e9]".into());
    }
    if r.hr_cases.len() + r.exact_cases.len() > max_cases {
        return bad(format!(
            "at most {max_cases} hr_cases and exact_cases together"
        ));
    }
    for c in &r.hr_cases {
        if c.x.len() > 64
            || c.rounded.len() > 64
            || !is_number_text(&c.x)
            || !is_number_text(&c.rounded)
        {
            return bad(
                "each HR-case needs x and rounded: numbers (C99 hex) of 1 to 64 characters".into(),
            );
        }
        if !c.neg_log2_d.is_finite() {
            return bad("neg_log2_d must be finite".into());
        }
    }
    for x in &r.exact_cases {
        if x.len() > 64 || !is_number_text(x) {
            return bad("each exact case must be a number (C99 hex) of 1 to 64 characters".into());
        }
    }
    Ok(())
}

/// A lease as the judge sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LeaseRow {
    pub id: i64,
    pub worker_id: i64,
    pub campaign_id: i64,
    pub fencing_token: i64,
    pub first_seq: i32,
    pub unit_count: i32,
    pub state: String,
    /// `expires_at <= now()` on the database clock.
    pub expired: bool,
}

/// A unit as the judge sees it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UnitRow {
    pub id: i64,
    pub campaign_id: i64,
    pub seq: i32,
    pub state: String,
    pub lease_id: Option<i64>,
    pub fence: Option<i64>,
    pub count: i64,
    pub negative: bool,
    pub exponent: i32,
    pub first: String,
}

/// A result already recorded for the same (unit, lease).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PriorResult {
    pub id: i64,
    pub digest: String,
    pub hr_count: i32,
}

/// What to do with a posted result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Record it.
    Accept,
    /// The same post was recorded before: answer as then.
    Replay { result_id: i64, hr_cases: u32 },
}

/// Decides whether `worker` may record a result with `digest` for `unit` under `lease`.
/// The order of the checks is the contract: a retry of an accepted post is recognised
/// before the lease's later fate (finished, expired) can refuse it.
pub fn judge_post(
    worker_id: i64,
    fencing_token: i64,
    lease: Option<&LeaseRow>,
    unit: Option<&UnitRow>,
    prior: Option<&PriorResult>,
    digest: &str,
) -> Result<Judgement> {
    let lease = lease.ok_or_else(|| Error::NotFound("no such lease".into()))?;
    if lease.worker_id != worker_id {
        return Err(Error::Forbidden(
            "the lease belongs to another worker".into(),
        ));
    }
    if lease.fencing_token != fencing_token {
        return Err(Error::StaleToken(
            "the fencing token is not this lease's".into(),
        ));
    }
    let unit = match unit {
        Some(u)
            if u.campaign_id == lease.campaign_id
                && u.seq >= lease.first_seq
                && i64::from(u.seq) < i64::from(lease.first_seq) + i64::from(lease.unit_count) =>
        {
            u
        }
        _ => {
            return Err(Error::LeaseMismatch(
                "the unit is not part of this lease".into(),
            ))
        }
    };
    if let Some(p) = prior {
        return if p.digest.eq_ignore_ascii_case(digest) {
            Ok(Judgement::Replay {
                result_id: p.id,
                hr_cases: p.hr_count.max(0) as u32,
            })
        } else {
            Err(Error::Conflict(
                "a different result was already recorded for this unit and lease".into(),
            ))
        };
    }
    if unit.state == "done" {
        return Err(Error::UnitDone(
            "another lease already finished this unit".into(),
        ));
    }
    if unit.fence.is_some_and(|f| f > lease.fencing_token) {
        return Err(Error::StaleToken(
            "the unit was leased again with a newer fencing token".into(),
        ));
    }
    // A result is taken while no other lease can have the unit: it is still bound to this
    // lease (even past its expiry, before the sweeper reclaims it), or it went back to the pool
    // when this lease expired (not when the worker released it, nor when the server revoked it
    // from a quarantined worker) and nobody leased it since. So a worker that was cut off from
    // the server and spooled its results loses nothing it computed.
    let held = unit.state == "leased" && unit.lease_id == Some(lease.id);
    let untouched_since = lease.state == "expired"
        && unit.state == "pending"
        && unit.lease_id.is_none()
        && unit.fence == Some(lease.fencing_token);
    if !(held || untouched_since) {
        return Err(Error::LeaseExpired(
            "the lease expired or was released and its units went back to the pool".into(),
        ));
    }
    Ok(Judgement::Accept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lease() -> LeaseRow {
        LeaseRow {
            id: 10,
            worker_id: 1,
            campaign_id: 5,
            fencing_token: 100,
            first_seq: 3,
            unit_count: 2,
            state: "active".into(),
            expired: false,
        }
    }

    fn unit() -> UnitRow {
        UnitRow {
            id: 77,
            campaign_id: 5,
            seq: 4,
            state: "leased".into(),
            lease_id: Some(10),
            fence: Some(100),
            count: 16,
            negative: false,
            exponent: 0,
            first: "8388608".into(),
        }
    }

    fn code(r: Result<Judgement>) -> &'static str {
        match r {
            Ok(_) => "ok",
            Err(e) => e.code(),
        }
    }

    #[test]
    fn the_judge_accepts_the_holder_and_refuses_everyone_else_with_a_clear_code() {
        let (l, u) = (lease(), unit());
        let d = "a".repeat(64);
        assert_eq!(
            judge_post(1, 100, Some(&l), Some(&u), None, &d).unwrap(),
            Judgement::Accept
        );
        assert_eq!(
            code(judge_post(1, 100, None, Some(&u), None, &d)),
            "not_found"
        );
        assert_eq!(
            code(judge_post(2, 100, Some(&l), Some(&u), None, &d)),
            "forbidden"
        );
        assert_eq!(
            code(judge_post(1, 99, Some(&l), Some(&u), None, &d)),
            "stale_token"
        );
        let outside = UnitRow { seq: 5, ..unit() };
        assert_eq!(
            code(judge_post(1, 100, Some(&l), Some(&outside), None, &d)),
            "lease_mismatch"
        );
        let other_campaign = UnitRow {
            campaign_id: 6,
            ..unit()
        };
        assert_eq!(
            code(judge_post(
                1,
                100,
                Some(&l),
                Some(&other_campaign),
                None,
                &d
            )),
            "lease_mismatch"
        );
        let done = UnitRow {
            state: "done".into(),
            lease_id: None,
            ..unit()
        };
        assert_eq!(
            code(judge_post(1, 100, Some(&l), Some(&done), None, &d)),
            "unit_done"
        );
        let releasedto = UnitRow {
            lease_id: Some(11),
            fence: Some(101),
            ..unit()
        };
        assert_eq!(
            code(judge_post(1, 100, Some(&l), Some(&releasedto), None, &d)),
            "stale_token"
        );
        // Back in the pool from this very lease, leased by nobody since: a late (spooled)
        // result is still taken; quarantined or taken by a newer lease, it is not.
        let expired = LeaseRow {
            state: "expired".into(),
            expired: true,
            ..lease()
        };
        let back_in_pool = UnitRow {
            state: "pending".into(),
            lease_id: None,
            ..unit()
        };
        assert_eq!(
            judge_post(1, 100, Some(&expired), Some(&back_in_pool), None, &d).unwrap(),
            Judgement::Accept
        );
        let quarantined = UnitRow {
            state: "quarantined".into(),
            lease_id: None,
            ..unit()
        };
        assert_eq!(
            code(judge_post(
                1,
                100,
                Some(&expired),
                Some(&quarantined),
                None,
                &d
            )),
            "lease_expired"
        );
        for ended in ["released", "revoked"] {
            let ended = LeaseRow {
                state: ended.into(),
                ..lease()
            };
            assert_eq!(
                code(judge_post(
                    1,
                    100,
                    Some(&ended),
                    Some(&back_in_pool),
                    None,
                    &d
                )),
                "lease_expired"
            );
        }
        let leased_again = UnitRow {
            lease_id: Some(12),
            fence: Some(100),
            ..unit()
        };
        assert_eq!(
            code(judge_post(1, 100, Some(&l), Some(&leased_again), None, &d)),
            "lease_expired"
        );
        // Past its expiry but not yet reclaimed, the unit is still this lease's.
        let overdue = LeaseRow {
            expired: true,
            ..lease()
        };
        assert_eq!(
            judge_post(1, 100, Some(&overdue), Some(&u), None, &d).unwrap(),
            Judgement::Accept
        );
    }

    #[test]
    fn a_retry_gets_the_same_answer_even_after_the_lease_ended() {
        let l = LeaseRow {
            state: "finished".into(),
            ..lease()
        };
        let u = UnitRow {
            state: "done".into(),
            lease_id: None,
            ..unit()
        };
        let prior = PriorResult {
            id: 9,
            digest: "AB".repeat(32),
            hr_count: 2,
        };
        assert_eq!(
            judge_post(1, 100, Some(&l), Some(&u), Some(&prior), &"ab".repeat(32)).unwrap(),
            Judgement::Replay {
                result_id: 9,
                hr_cases: 2
            }
        );
        assert_eq!(
            code(judge_post(
                1,
                100,
                Some(&l),
                Some(&u),
                Some(&prior),
                &"cd".repeat(32)
            )),
            "conflict"
        );
    }

    proptest! {
        /// However a worker lies about `elapsed`, the speed it earns is finite and no faster
        /// than the server's clock (or the minimum time) allows.
        #[test]
        fn speeds_are_bounded_by_the_servers_clock(
            count in 1i64..(1 << 40),
            elapsed in proptest::num::f64::ANY,
            wall in 0.0f64..1e6,
        ) {
            if let Some(v) = speed_sample(count, elapsed, wall) {
                prop_assert!(v.is_finite() && v > 0.0);
                prop_assert!(v <= count as f64 / wall.max(MIN_ELAPSED_SECONDS) * (1.0 + 1e-12));
                let p = LeasePolicy { max_units: 64, ..LeasePolicy::default() };
                let n = lease_size(&p, 600, Some(v), 10, Held::default());
                prop_assert!((1..=64).contains(&n));
            }
        }
    }

    #[test]
    fn campaigns_whose_units_overflow_a_result_are_refused() {
        assert!(check_cases_fit(10, 8, 10_000).is_ok());
        assert!(check_cases_fit(36, 36, 10_000).is_ok());
        assert!(check_cases_fit(20, 1, 10_000).is_err());
        assert!(check_cases_fit(14, 2, 10_000).is_err());
        assert!(
            check_cases_fit(12, 1, 10_000).is_ok(),
            "2^12 expected cases fit"
        );
    }

    #[test]
    fn lies_about_elapsed_do_not_buy_speed() {
        assert_eq!(
            speed_sample(1024, 1e-9, 0.0),
            Some(1024.0 / MIN_ELAPSED_SECONDS)
        );
        assert_eq!(speed_sample(1024, 5e-324, 2.0), Some(512.0));
        assert_eq!(speed_sample(1024, 0.0, 2.0), None);
        assert_eq!(speed_sample(1024, f64::NAN, 2.0), None);
        assert_eq!(speed_sample(1024, 4.0, 2.0), Some(256.0));
    }

    #[test]
    fn lease_size_follows_speed_within_bounds() {
        let p = LeasePolicy {
            max_units: 64,
            max_held_seconds: 100_000,
            ..LeasePolicy::default()
        };
        let none = Held::default();
        assert_eq!(lease_size(&p, 600, None, 20, none), 1);
        assert_eq!(lease_size(&p, 600, Some(0.0), 20, none), 1);
        // 2^20 arguments per unit at 2^20 per second: 600 s is 600 units, capped at 64.
        assert_eq!(lease_size(&p, 600, Some(1048576.0), 20, none), 64);
        assert_eq!(lease_size(&p, 10, Some(1048576.0), 20, none), 10);
        assert_eq!(lease_size(&p, 1, Some(1.0), 20, none), 1);
        // An unmeasured worker holding its share gets nothing more.
        let full = Held {
            units: 128,
            arguments: 0.0,
        };
        assert_eq!(lease_size(&p, 600, None, 20, full), 0);
    }

    #[test]
    fn an_h100_gets_a_minute_of_units_and_no_more_than_its_share() {
        let p = LeasePolicy::default();
        // One H100: about 90 units of 2^40 arguments per second.
        let h100 = Some(90.0 * 2f64.powi(40));
        assert_eq!(lease_size(&p, 60, h100, 40, Held::default()), 5400);
        // Holding one minute, it may take the next minute early ...
        let one = Held {
            units: 5400,
            arguments: 5400.0 * 2f64.powi(40),
        };
        assert_eq!(lease_size(&p, 60, h100, 40, one), 5400);
        // ... but not more than ten minutes in all.
        let nine = Held {
            units: 9 * 5400 + 10,
            arguments: (9.0 * 5400.0 + 10.0) * 2f64.powi(40),
        };
        assert_eq!(lease_size(&p, 60, h100, 40, nine), 5390);
        let ten = Held {
            units: 10 * 5400,
            arguments: 10.0 * 5400.0 * 2f64.powi(40),
        };
        assert_eq!(lease_size(&p, 60, h100, 40, ten), 0);
        // A slow CPU still gets one unit of 2^44 when it holds nothing.
        assert_eq!(lease_size(&p, 60, Some(1e9), 44, Held::default()), 1);
    }

    proptest! {
        /// A lease is at least one unit when the worker holds nothing, never more than the
        /// per-lease cap, about the asked seconds (never more than one unit over), and it never
        /// takes a measured worker's holding past its share (except the one unit of a worker
        /// holding nothing).
        #[test]
        fn lease_sizes_respect_time_and_share(
            seconds in 1u32..=21_600,
            speed in proptest::option::of(1e-3f64..1e15),
            unit_bits in 0u32..=62,
            held_units in 0i64..100_000,
            held_fraction in 0.0f64..2.0,
            max_units in 1u32..=100_000,
            max_held_seconds in 1u32..=86_400,
            max_per_worker in 1u32..=1000,
        ) {
            let p = LeasePolicy {
                max_units,
                max_held_seconds,
                max_units_per_worker: max_per_worker,
                ..LeasePolicy::default()
            };
            let per_unit = 2f64.powi(unit_bits as i32);
            let share = speed.map_or(0.0, |v| v * f64::from(max_held_seconds));
            let held = Held {
                units: held_units,
                arguments: if held_units == 0 { 0.0 } else { share * held_fraction },
            };
            let n = lease_size(&p, seconds, speed, unit_bits, held);
            prop_assert!(n <= max_units);
            match speed {
                None => prop_assert_eq!(n, u32::from(held_units < i64::from(max_per_worker))),
                Some(v) => {
                    if held_units == 0 {
                        prop_assert!(n >= 1);
                    }
                    let asked = f64::from(seconds) * v;
                    prop_assert!(n <= 1 || f64::from(n) * per_unit <= asked * (1.0 + 1e-9));
                    let after = held.arguments + f64::from(n) * per_unit;
                    prop_assert!(
                        (held_units == 0 && n == 1) || n == 0 || after <= share * (1.0 + 1e-9)
                    );
                    // Faster workers never get fewer units.
                    let faster = lease_size(&p, seconds, Some(v * 2.0), unit_bits, Held {
                        units: held_units,
                        arguments: held.arguments,
                    });
                    prop_assert!(faster >= n);
                }
            }
        }
    }

    #[test]
    fn campaign_validation_names_the_bad_field() {
        let ok = CreateCampaign {
            name: None,
            function: "exp".into(),
            format: Some("binary32".into()),
            precision: None,
            min_bits: 16,
            ranges: vec![tmd_wire::ArgRange {
                from: "1".into(),
                to: "2".into(),
            }],
            ..Default::default()
        };
        let v = validate_campaign(&ok).unwrap();
        assert_eq!(v.name, "exp-binary32");
        assert_eq!(v.replication, 1);
        let msg = |c: CreateCampaign| validate_campaign(&c).unwrap_err().to_string();
        assert!(msg(CreateCampaign {
            precision: Some(24),
            ..ok.clone()
        })
        .contains("not both"));
        assert!(msg(CreateCampaign {
            format: None,
            ..ok.clone()
        })
        .contains("format"));
        assert!(msg(CreateCampaign {
            ranges: vec![],
            ..ok.clone()
        })
        .contains("ranges"));
        assert!(msg(CreateCampaign {
            min_bits: 0,
            ..ok.clone()
        })
        .contains("min_bits"));
        assert!(msg(CreateCampaign {
            replication: Some(0),
            ..ok.clone()
        })
        .contains("replication"));
        assert!(msg(CreateCampaign {
            unit_bits: Some(63),
            ..ok.clone()
        })
        .contains("unit_bits"));
        assert!(msg(CreateCampaign {
            adaptive: Some(true),
            ..ok.clone()
        })
        .contains("replication >= 2"));
        assert!(msg(CreateCampaign {
            replication: Some(2),
            adaptive: Some(true),
            audit_rate: Some(0.0),
            ..ok.clone()
        })
        .contains("audit_rate"));
        assert!(msg(CreateCampaign {
            trust_after: Some(0),
            ..ok.clone()
        })
        .contains("trust_after"));
        let v = validate_campaign(&CreateCampaign {
            replication: Some(2),
            adaptive: Some(true),
            ..ok.clone()
        })
        .unwrap();
        assert!(v.adaptive && v.audit_rate == 0.1 && v.trust_after == 20);
    }

    #[test]
    fn only_sensible_campaign_transitions() {
        use CampaignState::*;
        assert!(transition_allowed(Active, Paused));
        assert!(transition_allowed(Paused, Active));
        assert!(transition_allowed(Paused, Cancelled));
        assert!(!transition_allowed(Cancelled, Active));
        assert!(!transition_allowed(Active, Active));
    }

    /// Issue 14 item 5: the engine's threshold is at most 60 bits (phase 3 keeps 64 bits of
    /// each fraction); the server refused only above 256.
    #[test]
    fn min_bits_above_the_engines_limit_is_refused() {
        let c = CreateCampaign {
            function: "exp".into(),
            format: Some("binary64".into()),
            min_bits: 61,
            ranges: vec![tmd_wire::ArgRange {
                from: "1".into(),
                to: "2".into(),
            }],
            ..Default::default()
        };
        let e = validate_campaign(&c).unwrap_err().to_string();
        assert!(e.contains("min_bits") && e.contains("60"), "{e}");
        assert!(validate_campaign(&CreateCampaign { min_bits: 60, ..c }).is_ok());
    }
}
