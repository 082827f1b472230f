//! A campaign's projected cost, as `tmd-worker estimate` measures it on a sample of units and
//! as the coordinator takes it to weigh units by work instead of counting them.
//!
//! The estimate is per binade (one sign, one exponent of the argument): within a binade the
//! engine's cost per unit is close to uniform, while from one binade to the next it varies by
//! orders of magnitude (exp in binary64 at 44 bits: 3.6 ms per unit in [1, 2), about 2 s above
//! 512 on one H100).

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// The schema version of [`CostEstimate`]; a reader refuses another.
pub const COST_ESTIMATE_VERSION: u32 = 1;

/// A campaign's projected cost on one machine's back end, from a seeded random sample of its
/// units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CostEstimate {
    /// [`COST_ESTIMATE_VERSION`].
    pub version: u32,
    pub function: String,
    /// The format as the engine names it (`binary64`, `p24`, ...).
    pub format: String,
    pub min_bits: u32,
    /// log2 of the arguments per unit the sample was cut into.
    pub unit_bits: u32,
    /// The back end that ran the sample, as it names itself (`cuda (1 device: NVIDIA H100 ...)`,
    /// `cpu (16 threads, AVX-512)`).
    pub backend: String,
    /// The sample's seed: the same seed, plan and back end sample the same units.
    pub seed: u64,
    /// One entry per binade the plan touches, in argument order.
    pub binades: Vec<BinadeCost>,
    /// Sum over the binades of `units * seconds_per_unit`.
    pub total_seconds: f64,
    /// Standard error of `total_seconds` (the binades' errors added in quadrature).
    pub total_seconds_stderr: f64,
    /// Sum over the binades of `expected_hr_cases`.
    pub total_hr_cases: f64,
    /// Standard error of `total_hr_cases`.
    pub total_hr_cases_stderr: f64,
}

/// The projected cost of the units of one binade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct BinadeCost {
    /// The sign of the binade's arguments.
    pub negative: bool,
    /// The binade's exponent `e`: its arguments have magnitude in `[2^e, 2^(e+1))` (the
    /// format's subnormal numbers and zero are in its binade `emin`, as the plan puts them).
    pub exponent: i32,
    /// Units of the plan in this binade (units at the binade's edges may hold fewer arguments).
    pub units: u64,
    /// Units of this binade the sample ran.
    pub sampled: u64,
    /// Mean engine seconds per full unit (`2^unit_bits` arguments) on this back end.
    pub seconds_per_unit: f64,
    /// Standard error of `seconds_per_unit` (0 when every unit was run or one was sampled).
    pub seconds_per_unit_stderr: f64,
    /// HR-cases expected in the binade's units (the sample's count scaled to the binade).
    pub expected_hr_cases: f64,
    /// Standard error of `expected_hr_cases`.
    pub expected_hr_cases_stderr: f64,
    /// The binade's arguments in the estimate's plan (decimal), collapsed blocks included: the
    /// binade's time per argument is `units * seconds_per_unit` over it. A block the plan
    /// collapsed is one unit that costs nothing however many arguments it holds (exp's
    /// `[512, 1024)` in binary64: 104 units of `2^44` searched and one block of the 152 units'
    /// worth that overflow), so `seconds_per_unit / 2^unit_bits`, what the coordinator takes
    /// where this is absent, overstates such a binade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}
