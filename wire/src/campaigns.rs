//! Campaigns: their creation, their state and stored form, and their progress as the dashboard
//! and `campaign watch` show it.

use crate::leases::UnitSpec;
use crate::results::{HrKind, SkippedRun};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::CostEstimate;
#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// A half-open argument range `[from, to)`, each end a C99 hexadecimal or decimal number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ArgRange {
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^\\s*[A-Za-z0-9.+_-]{1,100}\\s*$")
    )]
    pub from: String,
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^\\s*[A-Za-z0-9.+_-]{1,100}\\s*$")
    )]
    pub to: String,
}

/// `POST /api/v1/campaigns`: a new campaign. Exactly one of `format` and `precision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateCampaign {
    /// A label for people; defaults to `"{function}-{format}"`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 200))]
    pub name: Option<String>,
    /// The function's name, e.g. `exp`.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 100))]
    pub function: String,
    /// A named format with its exponent range (`binary16`, `bfloat16`, `binary32`,
    /// `binary64`, `binary80`: subnormal results judged on the subnormal grid, overflowing and
    /// underflowing results skipped and listed), or a bare precision (`p24`, `24`: exponent
    /// unbounded).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 100))]
    pub format: Option<String>,
    /// The precision in bits (8..=64).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 8, maximum = 64))]
    pub precision: Option<u32>,
    /// Report arguments with at least this many identical bits after the rounding bit (the
    /// engine takes at most 60).
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 60))]
    pub min_bits: u32,
    /// The argument ranges, each half-open; at least one, unless `whole`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 1024))]
    pub ranges: Vec<ArgRange>,
    /// The whole function: every finite argument of `format` (a named format) where the
    /// function is defined, instead of `ranges` (which must then be empty). Overflow,
    /// underflow, poles, trivial, far and exact regions are skipped runs as for a range, and a
    /// block where every argument is skipped is one unit. Refused where the whole function is
    /// out of reach (sin, cos, tan of binary64 and binary80), naming the range that is not.
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole: Option<bool>,
    /// log2 of the arguments per unit; the engine's default when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(maximum = 62))]
    pub unit_bits: Option<u32>,
    /// How many agreeing results each unit needs from workers not trusted, from different
    /// workers; default 2 (1 with `trust_all_workers`, and only then). A disagreement takes
    /// more replicas and the majority of the results no verified case refutes wins. A trusted
    /// token's worker settles a unit alone.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 16))]
    pub replication: Option<u32>,
    /// Every worker's result settles a unit alone (replication 1): for a farm of machines the
    /// operator controls, never for volunteers. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_all_workers: Option<bool>,
    /// Replicas of a unit must also come from different owners (enrollment tokens' owners);
    /// default true when replication is 2 or more.
    #[serde(default)]
    pub distinct_owners: Option<bool>,
    /// Adaptive replication: a worker with `trust_after` agreed results in a row is replicated
    /// only at `audit_rate`; its first outvoted result ends that. Needs replication >= 2;
    /// default false.
    #[serde(default)]
    pub adaptive: Option<bool>,
    /// Probability in (0, 1] that a trusted worker's result is replicated anyway; default 0.1.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0.0, maximum = 1.0))]
    pub audit_rate: Option<f64>,
    /// Agreed results in a row after which a worker is trusted; default 20.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1000000))]
    pub trust_after: Option<u32>,
    /// Higher first; default 0.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = -1000000, maximum = 1000000))]
    pub priority: Option<i32>,
    /// Derive the binades that the function's reduction covers instead of searching them
    /// (exp2: `|x| >= 2` from `[1, 2)`; cbrt: binades 3 apart; sqrt, rsqrt: 2 apart): the
    /// campaign searches the base binades, and each HR-case of a base unit brings the cases it
    /// stands for, each judged again by MPFR and listed as an HR-case of its own. Default true;
    /// false searches every binade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduction: Option<bool>,
}

/// A campaign's lifecycle state. `active` campaigns hand out work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CampaignState {
    Active,
    Paused,
    Cancelled,
    /// Every unit is done and every derivation recorded (set by the server, never by a
    /// request).
    Complete,
}

impl CampaignState {
    pub fn as_str(self) -> &'static str {
        match self {
            CampaignState::Active => "active",
            CampaignState::Paused => "paused",
            CampaignState::Cancelled => "cancelled",
            CampaignState::Complete => "complete",
        }
    }

    pub fn parse(s: &str) -> Option<CampaignState> {
        match s {
            "active" => Some(CampaignState::Active),
            "paused" => Some(CampaignState::Paused),
            "cancelled" => Some(CampaignState::Cancelled),
            "complete" => Some(CampaignState::Complete),
            _ => None,
        }
    }
}

/// A campaign as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Campaign {
    pub id: i64,
    pub name: String,
    pub function: String,
    pub precision: u32,
    /// The named format whose real grid judges results (`binary32`: subnormal results on the
    /// subnormal grid, overflow and underflow skipped and listed); absent for a bare precision,
    /// whose exponent is unbounded.
    #[serde(default)]
    pub format: Option<String>,
    /// How results are judged, for people (the format's precision and exponent range, or
    /// "exponent unbounded").
    #[serde(default)]
    pub judged_as: String,
    pub min_bits: u32,
    pub ranges: Vec<ArgRange>,
    pub unit_bits: u32,
    /// Agreeing results a unit needs from workers not trusted.
    pub replication: u32,
    /// Any one worker's result settles a unit (the operator said so at creation).
    #[serde(default)]
    pub trust_all_workers: bool,
    pub distinct_owners: bool,
    pub adaptive: bool,
    pub audit_rate: f64,
    pub trust_after: u32,
    pub priority: i32,
    pub state: CampaignState,
    pub created_at: DateTime<Utc>,
    /// When the last unit was done (state `complete`); absent before.
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
    pub units_total: i64,
    /// Decimal string: a whole binary64 campaign has 2^64 arguments. The arguments its units
    /// search; those it derives are in `derived`.
    pub arguments_total: String,
    /// The runs of arguments derived from the base binades instead of searched (the
    /// function's reduction), in value order; empty where nothing is derived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derived: Vec<DerivedRun>,
}

/// A run of arguments a campaign derives instead of searching: their HR-cases are those of
/// the base region's cases carried over by the rule, each judged again by MPFR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DerivedRun {
    /// The smallest and largest argument of the run by value, C99 hex (both included).
    pub first: String,
    pub last: String,
    /// Decimal string, as other argument counts.
    pub arguments: String,
    /// The base region, `[1, 2)` say.
    pub base: String,
    /// The identity that carries the base cases over.
    pub rule: String,
}

/// Counts of one unit state: units and the arguments they hold (decimal string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StateCount {
    pub units: i64,
    pub arguments: String,
}

/// The skipped arguments of a campaign's done units for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SkippedSummary {
    pub reason: String,
    pub rule: String,
    pub runs: i64,
    /// Decimal string, as other argument counts.
    pub arguments: String,
}

/// A recorded hard-to-round case, as verified by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StoredHrCase {
    pub x: String,
    pub bits: u32,
    pub neg_log2_d: f64,
    pub kind: HrKind,
    pub rounded: String,
    pub unit_id: i64,
    pub found_at: DateTime<Utc>,
    /// The base case it was derived from (a derived binade's case, found by the unit of its
    /// base case); absent for a case the search found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<String>,
}

/// A unit the server stopped handing out after too many failures or expiries, or whose
/// replicas disagreed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct QuarantinedUnit {
    pub unit_id: i64,
    pub spec: UnitSpec,
    pub attempts: i32,
}

/// `GET /api/v1/campaigns/{id}/progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CampaignProgress {
    pub campaign_id: i64,
    pub state: CampaignState,
    pub total: StateCount,
    pub done: StateCount,
    pub leased: StateCount,
    pub pending: StateCount,
    pub quarantined: StateCount,
    /// Arguments done over arguments total, in percent.
    pub percent_done: f64,
    /// Arguments finished per second over the last hour.
    pub arguments_per_second_last_hour: f64,
    /// Seconds to finish the pending and leased arguments at last hour's rate; absent when
    /// nothing was finished in the last hour.
    pub eta_seconds: Option<f64>,
    /// Every unit is done, and every derivation of a campaign that derives is recorded.
    pub complete: bool,
    /// When the last unit was done; absent while units remain.
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
    pub hr_cases: i64,
    /// Of `hr_cases`, those derived from a base unit's cases (the function's reduction).
    #[serde(default)]
    pub hr_cases_derived: i64,
    /// The runs of arguments derived instead of searched, as the campaign lists them; their
    /// cases come with the base units' results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derived: Vec<DerivedRun>,
    /// Base units' results whose cases the coordinator has yet to derive (in the background,
    /// a few seconds behind the results): the campaign is not complete while any remains.
    #[serde(default)]
    pub derivations_pending: i64,
    /// Of `derivations_pending`, those whose derivation failed (a fault of the coordinator,
    /// in its log; tried again when it restarts).
    #[serde(default)]
    pub derivations_failed: i64,
    /// Arguments of done units that were not judged (overflow, underflow, pole), per reason;
    /// never silent.
    #[serde(default)]
    pub skipped: Vec<SkippedSummary>,
    /// The skipped runs themselves, by argument (at most 100; the export lists them all).
    #[serde(default)]
    pub skipped_runs: Vec<SkippedRun>,
    /// The hardest cases so far, most identical bits first (at most 10).
    pub hardest: Vec<StoredHrCase>,
    /// Quarantined units (at most 100).
    pub quarantined_units: Vec<QuarantinedUnit>,
    /// What replication cost and caught.
    pub replication: ReplicationReport,
    /// Progress by expected work: `percent_done` and `eta_seconds` above are the work's.
    #[serde(default)]
    pub work: WorkProgress,
    /// Why units wait instead of being leased (units waiting for another owner's replica,
    /// held units, a paused campaign); empty when none do.
    #[serde(default)]
    pub waiting: Vec<Waiting>,
}

/// Units that wait instead of being leased, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Waiting {
    /// `replica`: each has a result and waits for the next from another worker or owner (the
    /// campaign's replication); `held`: quarantined (repeated failures, or kept for an
    /// admin); `paused`: the campaign is paused.
    pub reason: String,
    pub units: i64,
    /// The same for people, with what would move them.
    pub message: String,
}

/// `POST /api/v1/campaigns/{id}/estimate` (admin): what the coordinator made of a cost
/// estimate it accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EstimateApplied {
    pub campaign_id: i64,
    /// Binades of the campaign weighed by the estimate (all of them).
    pub binades: u64,
    /// The estimate's mean seconds per argument over the campaign: the seconds of one
    /// weighted argument on the estimate's back end.
    pub seconds_per_work: f64,
    /// The cheapest binade's weight, the dearest's, relative to the mean.
    pub min_weight: f64,
    pub max_weight: f64,
    /// The campaign's projected seconds on the estimate's back end.
    pub estimated_seconds_total: f64,
}

/// A campaign's progress by expected work rather than by units: a unit's work is
/// its arguments times its binade's weight, the binade's cost per argument relative to the
/// campaign's mean (from a posted [`CostEstimate`], else from the engine's plan of each
/// binade), so the campaign's total work equals its arguments. Where the plan predicts no cost
/// (and no estimate is posted) every weight is 1: work is counted in arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkProgress {
    /// `estimate` (weights from a posted estimate), `plan` (weights the engine's plan
    /// predicts, no estimate yet) or `arguments` (uniform weights).
    pub basis: String,
    /// For people: where the weights come from, or "work: unknown, counted in units" when
    /// there is no estimate.
    pub note: String,
    /// Weighted arguments in all, and per state of their units.
    pub total: f64,
    pub done: f64,
    pub leased: f64,
    pub pending: f64,
    pub quarantined: f64,
    /// Work done over work total, in percent.
    pub percent_done: f64,
    /// Weighted arguments done per second over the last hour (or the campaign's life, when
    /// younger).
    pub per_second_last_hour: f64,
    /// Seconds to finish the pending and leased work: the work left over the rate of work of
    /// the last few minutes, both counted over the arguments that cost time (a block of many
    /// units' worth that the plan settles without a search weighs one unit); else the last
    /// hour's rate; absent without any.
    #[serde(default)]
    pub eta_seconds: Option<f64>,
    /// What the ETA rests on: `recent` (the rate of work of the last few minutes),
    /// `last_hour` (nothing finished recently), `done`, `deriving` (every unit done, derived
    /// cases still being stored: no ETA), or `none`.
    #[serde(default)]
    pub eta_basis: String,
    /// No cost estimate is posted: a worker's speed on one binade says little of another's, so
    /// the ETA is rough.
    #[serde(default)]
    pub rough: bool,
    /// The estimate's projected seconds on its back end, in all and for the work left.
    #[serde(default)]
    pub estimated_seconds_total: Option<f64>,
    #[serde(default)]
    pub estimated_seconds_left: Option<f64>,
    /// The back end that ran the estimate's sample.
    #[serde(default)]
    pub backend: Option<String>,
}

/// The work a campaign spent on replication, and what it caught.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ReplicationReport {
    /// Results recorded (every replica, void ones included).
    pub results: i64,
    /// Results of quarantined workers, which count for nothing.
    pub void: i64,
    /// Results the majority outvoted.
    pub outvoted: i64,
    /// Results accepted without a replica (trusted workers, unaudited adaptive ones, or any
    /// worker of a campaign that trusts all).
    pub alone: i64,
    /// Done units that rest on one result of a worker whose token is not trusted.
    #[serde(default)]
    pub single_untrusted: i64,
    /// Results that left out an HR-case the server verified in their unit.
    #[serde(default)]
    pub refuted: i64,
    /// Arguments computed over all results divided by the arguments of the done units: 1.0
    /// means no replica was spent; 2.0 means every unit was computed twice.
    pub work_factor: f64,
}
