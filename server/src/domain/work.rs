//! Work: what a unit is expected to cost, from a posted cost estimate, and what follows from
//! it without I/O (the estimate's checks, the binades' weights, a lease's budget of work, the
//! rate and ETA of a campaign).
//!
//! A binade's weight is its cost per argument relative to the campaign's mean, so a unit's
//! work is `count * weight` "weighted arguments" and a campaign's total work equals its
//! arguments: without an estimate every weight is 1 and work is counted in arguments, exactly
//! as before. Weights only steer leases and the ETA; nothing a worker says enters
//! them, and no result is judged by them.

use super::{lease_size, Held, LeasePolicy};
use crate::error::{Error, Result};
use tmd_wire::{CostEstimate, COST_ESTIMATE_VERSION};

/// The smallest weight a binade gets: a binade whose sample measured nothing (an exact
/// region) still costs a little, so no claim has to look ahead without bound to fill a lease.
pub const MIN_WEIGHT: f64 = 1e-6;

/// The campaign an estimate must describe.
#[derive(Debug, Clone)]
pub struct EstimateTarget<'a> {
    pub function: &'a str,
    /// The campaign's format as the engine names it (`binary64`, `p24`).
    pub format: &'a str,
    pub min_bits: u32,
    /// Each binade the campaign has units in: sign, exponent, arguments.
    pub binades: &'a [(bool, i32, u128)],
}

/// One binade's weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BinadeWeight {
    pub negative: bool,
    pub exponent: i32,
    /// Cost per argument over the campaign's mean cost per argument (at least [`MIN_WEIGHT`]).
    pub weight: f64,
    /// The estimate's seconds per argument.
    pub seconds_per_argument: f64,
}

/// What an estimate makes of a campaign.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// One per binade of the campaign, in the target's order.
    pub binades: Vec<BinadeWeight>,
    /// The estimate's seconds per weighted argument (its mean seconds per argument).
    pub seconds_per_work: f64,
    /// The smallest of the weights.
    pub min_weight: f64,
}

/// A binade's seconds per argument: its time (`units * seconds_per_unit`) over its arguments
/// where the estimate says them (a collapsed block costs nothing however wide), else
/// `seconds_per_unit` over the unit size.
fn seconds_per_argument(b: &tmd_wire::BinadeCost, per_unit: f64) -> Result<f64> {
    let Some(text) = &b.arguments else {
        return Ok(b.seconds_per_unit / per_unit);
    };
    match text.parse::<u128>() {
        Ok(n) if n > 0 => Ok(b.seconds_per_unit * b.units as f64 / n as f64),
        _ => Err(Error::EstimateInvalid(format!(
            "binade {}2^{}: arguments must be a positive whole number, not {text:?}",
            if b.negative { "-" } else { "+" },
            b.exponent
        ))),
    }
}

/// Checks `e` against the campaign and derives the binades' weights. `estimate_format` is
/// the estimate's format as the engine names it (the caller resolves aliases).
///
/// Refused: another schema version, a number that is not finite or is negative, a binade
/// listed twice, a unit size outside 0..=62 (`estimate_invalid`); another function, format or
/// min_bits, or a binade of the campaign the estimate lacks (`estimate_mismatch`). Binades of
/// the estimate beyond the campaign's are ignored (an estimate of a wider range fits).
pub fn weigh(t: &EstimateTarget<'_>, e: &CostEstimate, estimate_format: &str) -> Result<Weights> {
    check_numbers(e)?;
    if e.function != t.function || estimate_format != t.format || e.min_bits != t.min_bits {
        return Err(Error::EstimateMismatch(format!(
            "the estimate is of {} in {} at min_bits {}, the campaign of {} in {} at min_bits {}",
            e.function, e.format, e.min_bits, t.function, t.format, t.min_bits
        )));
    }
    let per_unit = 2f64.powi(e.unit_bits as i32);
    let mut by_binade = std::collections::HashMap::with_capacity(e.binades.len());
    for b in &e.binades {
        if by_binade
            .insert((b.negative, b.exponent), seconds_per_argument(b, per_unit)?)
            .is_some()
        {
            return Err(Error::EstimateInvalid(format!(
                "binade {}2^{} is listed twice",
                if b.negative { "-" } else { "+" },
                b.exponent
            )));
        }
    }
    let mut missing = Vec::new();
    let mut rows = Vec::with_capacity(t.binades.len());
    let (mut seconds, mut arguments) = (0f64, 0f64);
    for &(negative, exponent, args) in t.binades {
        match by_binade.get(&(negative, exponent)) {
            Some(&spa) => {
                seconds += spa * args as f64;
                arguments += args as f64;
                rows.push((negative, exponent, spa));
            }
            None => missing.push(format!("{}2^{exponent}", if negative { "-" } else { "+" })),
        }
    }
    if !missing.is_empty() {
        let shown: Vec<&str> = missing.iter().take(5).map(String::as_str).collect();
        return Err(Error::EstimateMismatch(format!(
            "the estimate lacks {} binade(s) of the campaign ({}{})",
            missing.len(),
            shown.join(", "),
            if missing.len() > 5 { ", ..." } else { "" }
        )));
    }
    let mean = seconds / arguments;
    if !(mean.is_finite() && mean > 0.0) {
        return Err(Error::EstimateInvalid(
            "the estimate puts no cost on the campaign's arguments".into(),
        ));
    }
    let binades: Vec<BinadeWeight> = rows
        .into_iter()
        .map(|(negative, exponent, spa)| BinadeWeight {
            negative,
            exponent,
            weight: (spa / mean).max(MIN_WEIGHT),
            seconds_per_argument: spa,
        })
        .collect();
    let min_weight = binades
        .iter()
        .map(|b| b.weight)
        .fold(f64::INFINITY, f64::min);
    Ok(Weights {
        binades,
        seconds_per_work: mean,
        min_weight: if min_weight.is_finite() {
            min_weight
        } else {
            1.0
        },
    })
}

/// Weights from the engine's plan, before any estimate: each binade's predicted cost per
/// argument (`tmd_kernels::search::prior`) over the campaign's mean, as an estimate's weights
/// are, so that leases hold about the time they are meant to from the first claim and a worker
/// measured on cheap units is not handed thousands of steep ones.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorWeights {
    /// Sign, exponent and weight of each binade (at least [`MIN_WEIGHT`]).
    pub binades: Vec<(bool, i32, f64)>,
    /// The smallest of the weights.
    pub min_weight: f64,
}

/// The plan's weights of binades given as (sign, exponent, arguments, predicted cost per
/// argument). `None` where the plan predicts no cost anywhere, or a cost is not a finite
/// non-negative number: then every weight stays 1, work is counted in arguments.
pub fn prior_weights(binades: &[(bool, i32, u128, f64)]) -> Option<PriorWeights> {
    if binades.iter().any(|b| !(b.3.is_finite() && b.3 >= 0.0)) {
        return None;
    }
    let arguments: f64 = binades.iter().map(|b| b.2 as f64).sum();
    let cost: f64 = binades.iter().map(|b| b.2 as f64 * b.3).sum();
    let mean = cost / arguments;
    if !(mean.is_finite() && mean > 0.0) {
        return None;
    }
    let weighted: Vec<(bool, i32, f64)> = binades
        .iter()
        .map(|&(n, e, _, c)| (n, e, (c / mean).max(MIN_WEIGHT)))
        .collect();
    let min_weight = weighted.iter().map(|b| b.2).fold(f64::INFINITY, f64::min);
    Some(PriorWeights {
        binades: weighted,
        min_weight,
    })
}

/// The estimate's own consistency: version, unit size, every number finite and not negative.
fn check_numbers(e: &CostEstimate) -> Result<()> {
    if e.version != COST_ESTIMATE_VERSION {
        return Err(Error::EstimateInvalid(format!(
            "estimate version {} is not {COST_ESTIMATE_VERSION}, the version this server reads",
            e.version
        )));
    }
    if e.unit_bits > 62 {
        return Err(Error::EstimateInvalid(format!(
            "unit_bits {} is not in 0..=62",
            e.unit_bits
        )));
    }
    let bad = |x: f64| !(x.is_finite() && x >= 0.0);
    if [
        e.total_seconds,
        e.total_seconds_stderr,
        e.total_hr_cases,
        e.total_hr_cases_stderr,
    ]
    .into_iter()
    .any(bad)
    {
        return Err(Error::EstimateInvalid(
            "the estimate's totals must be finite and not negative".into(),
        ));
    }
    if let Some(b) = e.binades.iter().find(|b| {
        [
            b.seconds_per_unit,
            b.seconds_per_unit_stderr,
            b.expected_hr_cases,
            b.expected_hr_cases_stderr,
        ]
        .into_iter()
        .any(bad)
    }) {
        return Err(Error::EstimateInvalid(format!(
            "binade {}2^{}: every number must be finite and not negative",
            if b.negative { "-" } else { "+" },
            b.exponent
        )));
    }
    Ok(())
}

/// A lease's size: at most `max_units` units, and units taken in order while the work before
/// each is below `work` (weighted arguments), so the first is always taken.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseSize {
    pub max_units: u32,
    pub work: f64,
}

/// About `seconds` of work at the worker's measured `speed` (weighted arguments per second),
/// within what keeps its `held` work under `policy.max_held_seconds`. The unit cap lets the
/// claim look as far ahead as the campaign's cheapest binade (`min_weight`) could need, never
/// beyond `policy.max_units`. With every weight 1 it is [`lease_size`]'s count of units. An
/// unmeasured worker gets the `first` units it computes at once (its first results calibrate
/// it).
pub fn lease_work(
    policy: &LeasePolicy,
    seconds: u32,
    speed: Option<f64>,
    unit_bits: u32,
    held: Held,
    min_weight: f64,
    first: u32,
) -> LeaseSize {
    let Some(speed) = speed.filter(|s| s.is_finite() && *s > 0.0) else {
        return LeaseSize {
            max_units: lease_size(policy, seconds, speed, unit_bits, held, first),
            work: f64::INFINITY,
        };
    };
    let per_unit = 2f64.powi(unit_bits as i32);
    let min_weight = if min_weight.is_finite() && min_weight > 0.0 {
        min_weight.min(1.0)
    } else {
        1.0
    };
    let want = f64::from(seconds) * speed;
    let mut room = f64::from(policy.max_held_seconds) * speed - held.arguments;
    if held.units <= 0 {
        room = room.max(per_unit);
    }
    // The cheapest unit must fit, as a full unit had to before weights.
    if room < per_unit * min_weight {
        return LeaseSize {
            max_units: 0,
            work: 0.0,
        };
    }
    let work = want.min(room).max(f64::MIN_POSITIVE);
    let max_units = (work / (per_unit * min_weight))
        .floor()
        .clamp(1.0, f64::from(policy.max_units.max(1)));
    LeaseSize {
        max_units: max_units as u32,
        work,
    }
}

/// A rate from two readings of a counter: `(done_now - done_then) / seconds`, 0 when nothing
/// was done or no time passed.
pub fn rate(done_now: f64, done_then: f64, seconds: f64) -> f64 {
    let d = done_now - done_then;
    if d > 0.0 && seconds > 0.0 && d.is_finite() {
        d / seconds.max(1.0)
    } else {
        0.0
    }
}

/// Seconds to do `left` at `rate`; absent without a rate (nothing done in the window).
pub fn eta(left: f64, rate: f64) -> Option<f64> {
    (rate > 0.0).then(|| left.max(0.0) / rate)
}

/// What keeps units from being leased, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitCounts {
    /// Pending units with a result that wait for the next replica.
    pub awaiting_replica: i64,
    /// Quarantined units.
    pub held: i64,
    /// Pending units of paused campaigns.
    pub paused: i64,
}

/// Why units wait, for people: `campaign` (id, replication, distinct owners) when the counts
/// are one campaign's, `None` when they add up several.
pub fn waiting(n: WaitCounts, campaign: Option<(i64, u32, bool)>) -> Vec<tmd_wire::Waiting> {
    let units = |n: i64| {
        if n == 1 {
            "1 unit".to_string()
        } else {
            format!("{n} units")
        }
    };
    let mut out = Vec::new();
    if n.awaiting_replica > 0 {
        let message = match campaign {
            Some((_, r, distinct)) => {
                let who = if distinct { "owner" } else { "worker" };
                let nth = if r == 2 { "a second" } else { "another" };
                format!(
                    "{} wait for {nth} {who} (replication {r}{}): each has a result, and only a \
                     worker of another {who}, or of a trusted token (`token create --trusted`), \
                     can settle it",
                    units(n.awaiting_replica),
                    if distinct { ", distinct owners" } else { "" }
                )
            }
            None => format!(
                "{} wait for a replica from another worker or owner (their campaigns' \
                 replication): a worker of a trusted token settles one alone",
                units(n.awaiting_replica)
            ),
        };
        out.push(tmd_wire::Waiting {
            reason: "replica".into(),
            units: n.awaiting_replica,
            message,
        });
    }
    if n.held > 0 {
        let requeue = match campaign {
            Some((id, ..)) => format!("`tmd-server campaign requeue {id}`"),
            None => "`tmd-server campaign requeue ID`".into(),
        };
        out.push(tmd_wire::Waiting {
            reason: "held".into(),
            units: n.held,
            message: format!(
                "{} {} held (quarantined after repeated failures or expiries, or kept for an \
                 admin): {requeue} puts them back",
                units(n.held),
                if n.held == 1 { "is" } else { "are" }
            ),
        });
    }
    if n.paused > 0 {
        let message = match campaign {
            Some((id, ..)) => format!(
                "the campaign is paused: its {} pending are not handed out until \
                 `tmd-server campaign resume {id}`",
                units(n.paused)
            ),
            None => format!("{} pending belong to paused campaigns", units(n.paused)),
        };
        out.push(tmd_wire::Waiting {
            reason: "paused".into(),
            units: n.paused,
            message,
        });
    }
    out
}

/// A campaign's work counters and the rate's base, as storage read them.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    pub total: f64,
    pub done: f64,
    pub leased: f64,
    pub pending: f64,
    pub quarantined: f64,
    /// The done work at the start of the rate's window, and the window's seconds.
    pub base: Option<(f64, f64)>,
    /// The estimate's seconds per weighted argument (absent without an estimate).
    pub seconds_per_work: Option<f64>,
    pub backend: Option<String>,
    /// Whether the binades are weighed by the engine's plan (no estimate posted yet).
    pub plan_weights: bool,
    /// The done work at the start of the recent window ([`RECENT_SECONDS`]), and the
    /// window's seconds.
    pub recent: Option<(f64, f64)>,
    /// The campaign's binades as their counters read, for their work over costly arguments
    /// ([`super::eta`]); empty when not read.
    pub binades: Vec<super::eta::BinadeWork>,
    /// Arguments per unit of the campaign.
    pub unit_args: f64,
    /// The costly work done at the start of the recent window (absent where the snapshot
    /// predates that reading); now, it is the binades' sum.
    pub recent_costly: Option<f64>,
    /// Accepted base results whose derived cases are not stored yet.
    pub derivations_pending: i64,
}

/// The window of the pace the ETA rests on, in seconds: long enough to hold one of the
/// snapshots taken 50-60 s apart, short enough to see a GPU join or die within two minutes.
pub const RECENT_SECONDS: f64 = 90.0;

/// The note a campaign without an estimate shows: its work is its arguments.
pub const NO_ESTIMATE: &str = "work: unknown, counted in units (no cost estimate posted; \
     every argument weighs the same)";

/// The note of a campaign weighed by its plan, before an estimate.
pub const PLAN_WEIGHTS: &str = "work: weighted by the engine's plan (each binade's predicted \
     cost per argument; no cost estimate posted, so time is unknown and the ETA rough)";

/// The ETA and what it rests on: `recent`, the work left over the rate of work in the recent
/// window, both over the arguments that cost time where the binades are read
/// ([`super::eta`]), else over all arguments; else `last_hour`; else none. Without a cost
/// estimate (`rough`) the weights are the plan's, or arguments.
pub fn eta_of(r: &Readings, left: f64, rate_hour: f64) -> (Option<f64>, &'static str) {
    if left <= 0.0 {
        // With derived cases still to store the campaign is not done, and no rate of the
        // units says how long the derivation takes.
        return match r.derivations_pending {
            0 => (Some(0.0), "done"),
            _ => (None, "deriving"),
        };
    }
    if let (Some(then), Some((_, window)), false) =
        (r.recent_costly, r.recent, r.binades.is_empty())
    {
        let work = super::eta::costly_work(&r.binades, r.unit_args);
        if let Some(e) = super::eta::eta(work, then, window) {
            return (Some(e), "recent");
        }
    }
    let recent = r
        .recent
        .map_or(0.0, |(then, secs)| rate(r.done, then, secs));
    if let Some(e) = eta(left, recent) {
        return (Some(e), "recent");
    }
    match eta(left, rate_hour) {
        Some(e) => (Some(e), "last_hour"),
        None => (None, "none"),
    }
}

/// Progress by work: percent done, the rate over the window, the ETA of the pending and
/// leased work (quarantined work waits on an admin), and the estimate's seconds.
pub fn progress(r: &Readings) -> tmd_wire::WorkProgress {
    // The counters add and subtract weighted arguments in floating point: a state emptied again
    // may read a fraction of an argument below zero (-0.125 of 2^53 seen), which is zero.
    let (leased, pending, quarantined) = (
        r.leased.max(0.0),
        r.pending.max(0.0),
        r.quarantined.max(0.0),
    );
    let rate = r.base.map_or(0.0, |(then, secs)| rate(r.done, then, secs));
    let left = pending + leased;
    let percent_done = if r.total > 0.0 {
        (r.done * 100.0 / r.total).clamp(0.0, 100.0)
    } else {
        100.0
    };
    let (eta_seconds, eta_basis) = eta_of(r, left, rate);
    let (basis, note) = match (&r.seconds_per_work, &r.backend) {
        (Some(_), backend) => (
            "estimate",
            format!(
                "work weighted by the cost estimate of {}",
                backend.as_deref().unwrap_or("an unnamed back end")
            ),
        ),
        (None, _) if r.plan_weights => ("plan", PLAN_WEIGHTS.to_string()),
        (None, _) => ("arguments", NO_ESTIMATE.to_string()),
    };
    tmd_wire::WorkProgress {
        basis: basis.into(),
        note,
        total: r.total,
        done: r.done,
        leased,
        pending,
        quarantined,
        percent_done,
        per_second_last_hour: rate,
        eta_seconds,
        eta_basis: eta_basis.into(),
        rough: r.seconds_per_work.is_none(),
        estimated_seconds_total: r.seconds_per_work.map(|s| s * r.total),
        estimated_seconds_left: r.seconds_per_work.map(|s| s * left),
        backend: r.backend.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_units_say_why() {
        let n = WaitCounts {
            awaiting_replica: 8,
            held: 1,
            paused: 0,
        };
        let w = waiting(n, Some((4, 2, true)));
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].reason.as_str(), w[0].units), ("replica", 8));
        assert!(
            w[0].message
                .starts_with("8 units wait for a second owner (replication 2, distinct owners)"),
            "{}",
            w[0].message
        );
        assert!(
            w[1].message.starts_with("1 unit is held"),
            "{}",
            w[1].message
        );
        assert!(
            w[1].message.contains("campaign requeue 4"),
            "{}",
            w[1].message
        );
        let paused = waiting(
            WaitCounts {
                paused: 3,
                ..WaitCounts::default()
            },
            Some((4, 1, false)),
        );
        assert!(
            paused[0].message.contains("campaign resume 4"),
            "{:?}",
            paused
        );
        assert!(waiting(WaitCounts::default(), None).is_empty());
        let all = waiting(
            WaitCounts {
                awaiting_replica: 2,
                ..WaitCounts::default()
            },
            None,
        );
        assert!(all[0].message.contains("trusted token"), "{:?}", all);
    }
    use proptest::prelude::*;

    proptest! {
        /// With every weight 1 a lease holds what it held before weights: `lease_size` units.
        #[test]
        fn uniform_weights_size_leases_as_before(
            seconds in 1u32..100_000,
            speed in proptest::option::of(1e-3f64..1e15),
            unit_bits in 0u32..50,
            units in 0i64..300,
            held in 0f64..1e18,
        ) {
            let policy = LeasePolicy::default();
            let held = Held { units, arguments: if units == 0 { 0.0 } else { held } };
            let before = lease_size(&policy, seconds, speed, unit_bits, held, 1);
            let now = lease_work(&policy, seconds, speed, unit_bits, held, 1.0, 1);
            prop_assert_eq!(now.max_units, before);
            // Full units of weight 1 taken while the work before each is below the budget:
            // exactly `max_units` of them fit.
            if speed.is_some() && before > 0 {
                let per_unit = 2f64.powi(unit_bits as i32);
                let fit = (now.work / per_unit).ceil().max(1.0);
                prop_assert!(fit >= f64::from(before), "{fit} < {before}");
            }
        }
    }

    fn target(binades: &[(bool, i32, u128)]) -> EstimateTarget<'_> {
        EstimateTarget {
            function: "exp",
            format: "binary32",
            min_bits: 12,
            binades,
        }
    }

    fn estimate(spu: &[(bool, i32, f64)]) -> CostEstimate {
        CostEstimate {
            version: COST_ESTIMATE_VERSION,
            function: "exp".into(),
            format: "binary32".into(),
            min_bits: 12,
            unit_bits: 10,
            backend: "test".into(),
            seed: 0,
            binades: spu
                .iter()
                .map(|&(negative, exponent, s)| tmd_wire::BinadeCost {
                    negative,
                    exponent,
                    units: 1,
                    sampled: 1,
                    seconds_per_unit: s,
                    seconds_per_unit_stderr: 0.0,
                    expected_hr_cases: 0.0,
                    expected_hr_cases_stderr: 0.0,
                    arguments: None,
                })
                .collect(),
            total_seconds: 0.0,
            total_seconds_stderr: 0.0,
            total_hr_cases: 0.0,
            total_hr_cases_stderr: 0.0,
        }
    }

    #[test]
    fn weights_average_one_over_the_campaigns_arguments() {
        let binades = [(false, 0, 3 << 20), (false, 1, 1 << 20), (true, 0, 4 << 20)];
        let e = estimate(&[
            (false, 0, 1.0),
            (false, 1, 5.0),
            (true, 0, 0.0),
            (true, 9, 7.0),
        ]);
        let w = weigh(&target(&binades), &e, "binary32").unwrap();
        let mean: f64 = w
            .binades
            .iter()
            .zip(&binades)
            .map(|(b, t)| b.weight * t.2 as f64)
            .sum::<f64>()
            / (8u64 << 20) as f64;
        // The zero-cost binade weighs MIN_WEIGHT, a hair above its share of nothing.
        assert!((mean - 1.0).abs() < 1e-5, "{mean}");
        assert!((w.binades[1].weight / w.binades[0].weight - 5.0).abs() < 1e-12);
        assert_eq!(w.min_weight, MIN_WEIGHT);
        // Seconds per weighted argument: (3 * 1 + 1 * 5) / 8 seconds per 2^10 arguments.
        assert!((w.seconds_per_work - 1.0 / 1024.0).abs() < 1e-15);
    }

    /// A binade partly collapsed (a block of many units' worth that costs nothing, as exp's
    /// overflow in [512, 1024)) weighs its time over all its arguments where the estimate
    /// says them; without them, per unit as before; a bad count is refused.
    #[test]
    fn a_partly_collapsed_binade_weighs_its_time_over_all_its_arguments() {
        // Units of 2^10: binade 0 is 4 units searched (1 s each) and a block of 12 units'
        // worth, 5 units in the plan; binade 1 is 4 units searched.
        let binades = [(false, 0, 16u128 << 10), (false, 1, 4 << 10)];
        let mut e = estimate(&[(false, 0, 0.8), (false, 1, 1.0)]);
        for (b, (units, args)) in e.binades.iter_mut().zip([(5, 16u128 << 10), (4, 4 << 10)]) {
            b.units = units;
            b.arguments = Some(args.to_string());
        }
        let spa = |e: &CostEstimate| -> Vec<f64> {
            weigh(&target(&binades), e, "binary32")
                .unwrap()
                .binades
                .iter()
                .map(|b| b.seconds_per_argument * 1024.0)
                .collect()
        };
        let got = spa(&e);
        assert!(
            (got[0] - 0.25).abs() < 1e-12 && (got[1] - 1.0).abs() < 1e-12,
            "{got:?}"
        );
        e.binades[0].arguments = None;
        assert!((spa(&e)[0] - 0.8).abs() < 1e-12);
        for bad in ["0", "-3", "many"] {
            e.binades[0].arguments = Some(bad.into());
            assert!(matches!(
                weigh(&target(&binades), &e, "binary32"),
                Err(Error::EstimateInvalid(_))
            ));
        }
    }

    #[test]
    fn estimates_of_another_campaign_are_refused() {
        let binades = [(false, 0, 1u128 << 20)];
        let ok = estimate(&[(false, 0, 1.0)]);
        assert!(weigh(&target(&binades), &ok, "binary32").is_ok());
        assert!(matches!(
            weigh(&target(&binades), &ok, "binary64"),
            Err(Error::EstimateMismatch(_))
        ));
        let lacking = estimate(&[(false, 1, 1.0)]);
        assert!(matches!(
            weigh(&target(&binades), &lacking, "binary32"),
            Err(Error::EstimateMismatch(_))
        ));
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let e = estimate(&[(false, 0, bad)]);
            assert!(matches!(
                weigh(&target(&binades), &e, "binary32"),
                Err(Error::EstimateInvalid(_))
            ));
        }
        let mut future = ok.clone();
        future.version += 1;
        assert!(matches!(
            weigh(&target(&binades), &future, "binary32"),
            Err(Error::EstimateInvalid(_))
        ));
    }

    #[test]
    fn a_lease_in_a_dear_binade_holds_fewer_units() {
        let policy = LeasePolicy::default();
        let held = Held::default();
        // A worker doing one mean unit (2^10 weighted arguments) a second, asking for 60 s.
        let l = lease_work(&policy, 60, Some(1024.0), 10, held, 0.01, 1);
        assert_eq!(l.work, 60.0 * 1024.0);
        // It may look 6,000 units ahead (all at the cheapest weight, 0.01).
        assert_eq!(l.max_units, 6000);
        // Rates and ETAs.
        assert_eq!(rate(10.0, 4.0, 3.0), 2.0);
        assert_eq!(rate(4.0, 10.0, 3.0), 0.0);
        assert_eq!(eta(10.0, 2.0), Some(5.0));
        assert_eq!(eta(10.0, 0.0), None);
        // A state emptied again in floating point reads zero, not a fraction below it.
        let r = Readings {
            total: 8.0,
            done: 8.0,
            leased: -0.125,
            pending: -0.125,
            quarantined: -0.0,
            base: Some((0.0, 10.0)),
            seconds_per_work: None,
            backend: None,
            ..Readings::default()
        };
        let p = progress(&r);
        assert_eq!((p.leased, p.pending, p.quarantined), (0.0, 0.0, 0.0));
        assert_eq!(p.eta_seconds.unwrap_or(0.0), 0.0);
    }

    /// The ETA follows the recent rate: a second GPU doubles it within minutes, where the
    /// last hour's rate would take an hour to see it; with nothing done recently, the last
    /// hour's; without an estimate it is marked rough.
    #[test]
    fn the_eta_follows_the_recent_rate() {
        let mut r = Readings {
            total: 1000.0,
            done: 100.0,
            pending: 900.0,
            base: Some((0.0, 100.0)),
            seconds_per_work: Some(1e-3),
            recent: Some((70.0, 10.0)),
            ..Readings::default()
        };
        let one = progress(&r);
        assert_eq!(
            (one.eta_seconds, one.eta_basis.as_str()),
            (Some(300.0), "recent")
        );
        assert!(!one.rough);
        r.recent = Some((40.0, 10.0));
        assert_eq!(progress(&r).eta_seconds, Some(150.0));
        r.recent = Some((100.0, 60.0));
        let idle = progress(&r);
        assert_eq!(
            (idle.eta_seconds, idle.eta_basis.as_str()),
            (Some(900.0), "last_hour")
        );
        r.recent = None;
        r.base = None;
        assert_eq!(progress(&r).eta_seconds, None);
        r.seconds_per_work = None;
        assert!(progress(&r).rough);
        r.pending = 0.0;
        assert_eq!(progress(&r).eta_basis, "done");
        r.derivations_pending = 3;
        let deriving = progress(&r);
        assert_eq!(
            (deriving.eta_seconds, deriving.eta_basis.as_str()),
            (None, "deriving")
        );
    }

    /// With the binades read, the ETA counts work over costly arguments: a binade's collapsed
    /// block still pending weighs one unit, not its arguments' share of the binade's time.
    #[test]
    fn the_eta_counts_a_collapsed_block_as_one_unit() {
        use super::super::eta::BinadeWork;
        // One binade of 10 units of 10 arguments: 1 searched unit left and a collapsed block
        // of 5 units' worth; 4 units done in the 10-s window; weight 1 over all 100
        // arguments, so each of its 6 costly units weighs 100 / 6 arguments' worth.
        let mut r = Readings {
            total: 100.0,
            done: 40.0,
            pending: 60.0,
            base: Some((0.0, 100.0)),
            seconds_per_work: Some(1e-3),
            recent: Some((0.0, 10.0)),
            binades: vec![BinadeWork {
                left: 60.0,
                done: 40.0,
                units_left: 2.0,
                units_done: 4.0,
                weight: 1.0,
            }],
            unit_args: 10.0,
            recent_costly: Some(0.0),
            ..Readings::default()
        };
        let p = progress(&r);
        assert_eq!(p.eta_basis, "recent");
        // Two costly units left at four units per 10 s.
        assert!((p.eta_seconds.unwrap() - 5.0).abs() < 1e-9, "{p:?}");
        // A snapshot older than the costly counter: the rate of all work, the block priced
        // at its arguments (60 left at 40 per 10 s).
        r.recent_costly = None;
        let p = progress(&r);
        assert_eq!(p.eta_basis, "recent");
        assert!((p.eta_seconds.unwrap() - 15.0).abs() < 1e-9, "{p:?}");
    }
}
