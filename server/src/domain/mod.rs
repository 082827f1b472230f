//! Domain rules with no I/O: validating requests, sizing leases, and judging a posted result
//! against its lease and unit. Storage calls these under its row locks.

pub mod audit;
pub mod budget;
pub mod engine;
pub mod eta;
pub mod known;
pub mod sample;
pub mod sizing;
pub mod trust;
pub mod work;

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
    /// Largest share of a campaign's units that the untrusted workers of one enrollment token,
    /// or of one owner, may hold in their active leases together: ten identities of one
    /// volunteer cannot take a campaign from everyone else. Trusted (lab) workers are exempt.
    pub max_owner_share: f64,
    /// Largest share of a campaign's pending units one lease takes (never fewer than
    /// [`LEASE_CAP_FLOOR`]): a worker measured fast on cheap units cannot take most of a
    /// campaign in one lease, and near the end the last units go out in small leases, so no
    /// worker idles while another holds a backlog.
    pub max_pending_share: f64,
    /// Claim lanes a campaign without replicas is cut into at its first claim (fewer for a
    /// small campaign): each a stripe of its units with its own cursor and turn, so that
    /// that many claims of one campaign run at once.
    pub claim_lanes: u32,
    /// Fewest fresh units a trusted worker's claim leaves to be marked leased after it has
    /// answered (`store::deferred`); 0: every claim marks its units itself.
    pub defer_marking_min: u32,
}

/// The fewest units the pending-share cap ([`LeasePolicy::max_pending_share`]) leaves a lease:
/// a fraction of a second of a GPU's work, so the end of a campaign is not a storm of claims.
pub const LEASE_CAP_FLOOR: i64 = 32;

/// The most units one lease may take of a campaign with `pending` units pending.
pub fn pending_cap(pending: i64, share: f64) -> i64 {
    let share = if share.is_finite() {
        share.clamp(0.0, 1.0)
    } else {
        1.0
    };
    ((pending.max(0) as f64 * share).ceil() as i64).max(LEASE_CAP_FLOOR)
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
            max_owner_share: 0.25,
            max_pending_share: 0.05,
            claim_lanes: 8,
            // Deferring saves a claim of thousands of units most of its time (2.5 times
            // faster at 18,000 units), but costs the database a second transaction a claim: on a
            // farm of hundreds of GPUs, whose claims are of hundreds of units, it bought no
            // latency and cost 7 to 23% more of the database's CPU per result.
            defer_marking_min: 1024,
        }
    }
}

/// What a worker holds in its active leases.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    pub units: i64,
    pub arguments: f64,
}

/// Rounds of the units a worker computes at once that its leases hold before it is measured:
/// with one round, its cores idled while the second lease was asked for, answered and started
/// (a tenth of a 2-second campaign on 16 cores); with four, still for about 0.07 s at
/// the end of the first lease, as the first results' post (the binade's first verification,
/// 0.1-0.15 s) and the lease after it took longer than four rounds of 25 ms units. Eight cover
/// it; the unmeasured cap (`--max-units-per-worker`, 128) bounds what a worker's claim gets.
pub const FIRST_LEASE_ROUNDS: u32 = 8;

/// The units leased to a worker not yet measured, from the units it says it computes at once
/// (`units_in_flight`, checked to be in 1..=4096): [`FIRST_LEASE_ROUNDS`] rounds of them; one
/// unit when it says nothing.
pub fn first_lease_units(units_in_flight: Option<u32>) -> u32 {
    units_in_flight.map_or(1, |n| n.max(1).saturating_mul(FIRST_LEASE_ROUNDS))
}

/// How many units of `2^unit_bits` arguments to lease: about `seconds` of work at the worker's
/// measured `speed` (arguments per second), at least one, at most `policy.max_units`, and no
/// more than what keeps the worker's `held` work within `policy.max_held_seconds` (one unit
/// when it holds nothing, however slow it is). A worker never measured gets `first` units
/// ([`first_lease_units`]: its first results calibrate it), within `policy.max_units` and what
/// keeps it under `policy.max_units_per_worker`. 0: it holds its share already.
pub fn lease_size(
    policy: &LeasePolicy,
    seconds: u32,
    speed: Option<f64>,
    unit_bits: u32,
    held: Held,
    first: u32,
) -> u32 {
    let Some(speed) = speed.filter(|s| s.is_finite() && *s > 0.0) else {
        // A claimed count is no more than the worker could take one unit at a time anyway.
        let room = i64::from(policy.max_units_per_worker) - held.units;
        return first
            .max(1)
            .min(policy.max_units.max(1))
            .min(room.clamp(0, i64::from(u32::MAX)) as u32);
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
    if let Some(c) = v.chars().find(|&c| invisible(c)) {
        return Err(Error::BadRequest(format!(
            "{field} must not contain invisible or direction-changing characters (U+{:04X})",
            c as u32
        )));
    }
    Ok(v)
}

/// Characters that show as nothing, or reorder what follows, where people read names: bidi
/// controls, zero-width characters, tag characters, variation selectors, fillers and the other
/// invisible format characters. `hon\u{200b}est` would show as "honest" in a worker list.
pub fn invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x17B4 | 0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0000..=0xE0FFF)
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
    speed_sample_work(count as f64, elapsed, wall)
}

/// [`speed_sample`] of `work` weighted arguments (the arguments times their binades' weights,
/// `domain::work`): the speed leases are sized by.
pub fn speed_sample_work(work: f64, elapsed: f64, wall: f64) -> Option<f64> {
    if !(elapsed > 0.0 && elapsed.is_finite() && work > 0.0 && work.is_finite()) {
        return None;
    }
    let wall = if wall.is_finite() { wall } else { 0.0 };
    let seconds = elapsed.max(wall).max(MIN_ELAPSED_SECONDS);
    Some(work / seconds)
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
    /// Every finite argument of the format (`ranges` is empty): `tmd_kernels::plan::whole`.
    pub whole: bool,
    pub unit_bits: Option<u32>,
    pub replication: u32,
    pub distinct_owners: bool,
    pub adaptive: bool,
    pub audit_rate: f64,
    pub trust_after: u32,
    /// Any one worker's result settles a unit (the operator said so).
    pub trust_all_workers: bool,
    pub priority: i32,
    /// Derive what the function's reduction covers instead of searching it.
    pub reduction: bool,
}

/// Whether a worker's features header (comma-separated names) lists `feature`.
pub fn declares_feature(header: Option<&str>, feature: &str) -> bool {
    header.is_some_and(|h| h.split(',').any(|f| f.trim().eq_ignore_ascii_case(feature)))
}

/// Checks the fields of a campaign request that do not need the engine.
pub fn validate_campaign(req: &CreateCampaign) -> Result<NewCampaign> {
    let bad = |m: String| Err(Error::BadRequest(m));
    if !is_number_text(req.function.trim()) {
        return bad("function must be a name of letters, digits and `_`".into());
    }
    if req.format.as_deref().is_some_and(|f| !is_number_text(f)) {
        return bad("format must be a name such as binary32, binary80 or p24".into());
    }
    match (&req.format, req.precision) {
        (Some(_), Some(_)) => return bad("give either format or precision, not both".into()),
        (None, None) => {
            return bad(
                "give format (binary16, bfloat16, binary32, binary64, binary80) or precision"
                    .into(),
            )
        }
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
    let whole = req.whole.unwrap_or(false);
    if whole && !req.ranges.is_empty() {
        return bad("give either ranges or whole, not both".into());
    }
    if !whole && req.ranges.is_empty() {
        return bad("ranges must hold at least one range (or give whole: true)".into());
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
    // A volunteer's word never stands alone unless the operator says every worker is trusted;
    // trusted (lab) tokens settle units alone under any policy.
    let trust_all_workers = req.trust_all_workers.unwrap_or(false);
    let replication = req
        .replication
        .unwrap_or(if trust_all_workers { 1 } else { 2 });
    if !(1..=16).contains(&replication) {
        return bad(format!("replication must be in 1..=16, got {replication}"));
    }
    if trust_all_workers && replication != 1 {
        return bad(format!(
            "trust_all_workers settles each unit on one result; it contradicts replication \
             {replication}"
        ));
    }
    if !trust_all_workers && replication < 2 {
        return bad(
            "replication 1 lets one untrusted worker's result settle a unit alone: give \
             trust_all_workers: true for a farm of machines you control, or register those \
             machines with a trusted enrollment token"
                .into(),
        );
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
        whole,
        unit_bits: req.unit_bits,
        replication,
        // Replicas from one owner prove little: by default they come from different owners.
        distinct_owners: req.distinct_owners.unwrap_or(replication > 1),
        adaptive,
        audit_rate,
        trust_after,
        trust_all_workers,
        priority,
        reduction: req.reduction.unwrap_or(true),
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

/// A worker's engine version (absent: 0, workers older than versions) against the versions the
/// coordinator serves: results of different versions count different domains and are never
/// compared, so a version it does not serve gets no work and its results are refused.
pub fn check_engine(accepted: &[u32], engine: Option<u32>) -> Result<()> {
    let v = tmd_wire::engine_version(engine);
    if accepted.contains(&v) {
        return Ok(());
    }
    let list = accepted
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::EngineVersion(format!(
        "this worker runs engine version {v}{}; this coordinator serves engine version {list}: \
         install the tmd-worker of the coordinator's release (`tmd-worker --version` names its \
         engine version), or have the admin add {v} to --accept-engine while workers upgrade",
        if engine.is_none() {
            " (it does not say)"
        } else {
            ""
        }
    )))
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
    if r.skipped.len() > engine::MAX_SKIPPED_RUNS {
        return bad(format!("at most {} skipped runs", engine::MAX_SKIPPED_RUNS));
    }
    for s in &r.skipped {
        let code = !s.reason.is_empty()
            && s.reason.len() <= 64
            && s.reason
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if s.first.len() > 64
            || s.last.len() > 64
            || !is_number_text(&s.first)
            || !is_number_text(&s.last)
            || s.count == 0
            || !code
            || s.rule.len() > 1000
        {
            return bad(
                "each skipped run needs first and last (C99 hex, 1 to 64 characters), a count \
                 above 0 and a reason code of lowercase letters, digits and `_`"
                    .into(),
            );
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
    /// The seqs of a lease that is not one contiguous run (sorted); `None`: the run
    /// `[first_seq, first_seq + unit_count)`.
    pub seqs: Option<Vec<i32>>,
    pub state: String,
    /// `expires_at <= now()` on the database clock.
    pub expired: bool,
    /// Whether its claim left its fresh units to be marked (`store::deferred`): until then
    /// they read pending and never fenced.
    pub deferred: bool,
}

impl LeaseRow {
    /// Whether the unit at `seq` of the lease's campaign is one of its units.
    pub fn holds_seq(&self, seq: i32) -> bool {
        match &self.seqs {
            Some(seqs) => seqs.binary_search(&seq).is_ok(),
            None => {
                seq >= self.first_seq
                    && i64::from(seq) < i64::from(self.first_seq) + i64::from(self.unit_count)
            }
        }
    }
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

/// The fencing rule: `lease` exists, is `worker_id`'s, and `fencing_token` is its token (a
/// worker that lost the lease to expiry holds an older one). Every lease operation, posts
/// included, starts here.
pub fn lease_holder(
    lease: Option<&LeaseRow>,
    worker_id: i64,
    fencing_token: i64,
) -> Result<&LeaseRow> {
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
    Ok(lease)
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
    let lease = lease_holder(lease, worker_id, fencing_token)?;
    let unit = match unit {
        Some(u) if u.campaign_id == lease.campaign_id && lease.holds_seq(u.seq) => u,
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
    let held = unit.state == "leased" && unit.lease_id == Some(lease.id)
        // A unit its claim left to be marked: among the lease's seqs (checked above), never
        // fenced, so no other lease ever had it (no claim reaches a fresh unit behind its
        // lane's cursor).
        || lease.deferred
            && unit.state == "pending"
            && unit.lease_id.is_none()
            && unit.fence.is_none();
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

/// A worker's state from its last contact (see [`tmd_wire::WorkerState`]), for a lease
/// lifetime of `ttl_seconds`. A working worker heartbeats every `ttl / 3` seconds (100 s by
/// default) and an idle one asks for work every `retry_after` seconds (10 s); `last_seen` is
/// written at most every 10 s and tokens are cached 10 s more, so it lags a contact by up to
/// 20 s. Active: heard from within `ttl / 3 + 60` seconds (160 s by default): a heartbeat's
/// interval and a minute of slack. Offline: silent for `2 × ttl` (600 s), when every lease it
/// held has expired; stale between the two. A revoked worker cannot be heard from: offline.
pub fn worker_state(
    last_seen: Option<chrono::DateTime<chrono::Utc>>,
    revoked: bool,
    now: chrono::DateTime<chrono::Utc>,
    ttl_seconds: u32,
) -> tmd_wire::WorkerState {
    use tmd_wire::WorkerState;
    let Some(seen) = last_seen.filter(|_| !revoked) else {
        return WorkerState::Offline;
    };
    let silent = (now - seen).num_milliseconds() as f64 / 1000.0;
    let ttl = f64::from(ttl_seconds.max(1));
    if silent < ttl / 3.0 + 60.0 {
        WorkerState::Active
    } else if silent < 2.0 * ttl {
        WorkerState::Stale
    } else {
        WorkerState::Offline
    }
}

#[cfg(test)]
mod tests;
