//! A range's units that the search would skip whole, merged into one unit per run, as a whole
//! plan collapses them: such a unit costs nothing, and a coordinator weighs a unit wider than
//! the unit size as nothing (its lease sizes, ETA and plan weights).

use crate::numbers::format::Format;
use crate::oracle::function::Function;
use crate::plan::whole::MAX_COLLAPSED_BITS;
use crate::plan::UnitSpec;
use crate::regions::skip::{skipped_whole, skips, Skips};

/// `units` (in argument order, as `plan::split_range_in` cuts a range) with every run of two
/// or more adjacent units of one binade whose arguments the search would all skip, in one
/// skipped run, merged into one unit (at most `2^MAX_COLLAPSED_BITS` arguments). The rest
/// unchanged. Found by halving: a run of units is asked as a whole first (`skipped_runs` of
/// its span), so a binade that skips nothing costs one question. A function with poles is left
/// as cut (a pole is one argument, and finding one over a wide span costs a bisection).
pub fn collapse_skipped(
    f: Function,
    fmt: Format,
    min_bits: u32,
    units: Vec<UnitSpec>,
) -> Vec<UnitSpec> {
    if f.has_poles() {
        return units;
    }
    let p = fmt.precision.bits();
    let mut placed = Vec::with_capacity(units.len());
    for run in units.chunk_by(|a, b| adjacent(a, b, p)) {
        place(f, fmt, min_bits, run, &mut placed);
    }
    // Halving leaves a run as several merged pieces, and a unit of it alone, where the run
    // starts off a half's middle: a merged piece is joined to its neighbour where their union
    // is still one skipped run.
    let mut out: Vec<(UnitSpec, bool)> = Vec::with_capacity(placed.len());
    for (u, merged) in placed {
        if let Some((last, last_merged)) = out.last_mut() {
            let union =
                span(&[*last, u]).filter(|_| (merged || *last_merged) && adjacent(last, &u, p));
            if let Some(union) = union {
                if let Ok(Skips::Everything) = skips(f, fmt, min_bits, union) {
                    (*last, *last_merged) = (union, true);
                    continue;
                }
            }
        }
        out.push((u, merged));
    }
    out.into_iter().map(|(u, _)| u).collect()
}

/// Whether `b` follows `a` in one binade, both subnormal or both normal.
fn adjacent(a: &UnitSpec, b: &UnitSpec, p: u32) -> bool {
    a.negative == b.negative
        && a.exponent == b.exponent
        && a.first.checked_add(a.count) == Some(b.first)
        && a.first >> (p - 1) == b.first >> (p - 1)
}

/// The unit covering the adjacent units `us`, if its count fits.
fn span(us: &[UnitSpec]) -> Option<UnitSpec> {
    let (a, z) = (us.first()?, us.last()?);
    let count = (z.first - a.first).checked_add(z.count)?;
    (count <= 1u64 << MAX_COLLAPSED_BITS).then_some(UnitSpec { count, ..*a })
}

/// Plans the adjacent units `us`: all kept, one merged unit, or each half on its own. Each
/// unit placed says whether it is skipped whole (a single unit is not asked).
fn place(
    f: Function,
    fmt: Format,
    min_bits: u32,
    us: &[UnitSpec],
    out: &mut Vec<(UnitSpec, bool)>,
) {
    if us.len() == 1 {
        out.push((us[0], false));
        return;
    }
    let whole = span(us);
    // A span too wide to be one unit, or one the skipped runs cannot tell: halved as a part.
    let asked = whole.map(|s| (s, skips(f, fmt, min_bits, s)));
    match asked {
        Some((_, Ok(Skips::Nothing))) => out.extend(us.iter().map(|u| (*u, false))),
        Some((s, Ok(Skips::Everything))) => out.push((s, true)),
        _ => {
            let mid = us.len() / 2;
            place(f, fmt, min_bits, &us[..mid], out);
            place(f, fmt, min_bits, &us[mid..], out);
        }
    }
}

/// For each of `units` (in argument order, as a range's plan cuts them), whether the search
/// would list it as one skipped run and run nothing: [`skipped_whole`] of each, found by the
/// halving of [`collapse_skipped`] (a run of adjacent units is asked as a whole first: all
/// skipped in one run, or none skipped, answers every unit of it), so a plan of millions of
/// units costs a few questions a binade instead of one a unit. Never for a function with poles.
pub fn skipped_whole_each(
    f: Function,
    fmt: Format,
    min_bits: u32,
    units: &[UnitSpec],
) -> Vec<bool> {
    if f.has_poles() {
        return vec![false; units.len()];
    }
    let p = fmt.precision.bits();
    let mut out = Vec::with_capacity(units.len());
    for run in units.chunk_by(|a, b| adjacent(a, b, p)) {
        mark(f, fmt, min_bits, run, &mut out);
    }
    out
}

/// Appends to `out` whether each of the adjacent units `us` is skipped whole, halving as
/// [`place`]. A span skipped in one run holds units each skipped in one run (the same reason
/// throughout); a span with nothing skipped holds none.
fn mark(f: Function, fmt: Format, min_bits: u32, us: &[UnitSpec], out: &mut Vec<bool>) {
    if us.len() == 1 {
        out.push(skipped_whole(f, fmt, min_bits, us[0]));
        return;
    }
    match span(us).map(|s| skips(f, fmt, min_bits, s)) {
        Some(Ok(Skips::Nothing)) => out.extend(std::iter::repeat_n(false, us.len())),
        Some(Ok(Skips::Everything)) => out.extend(std::iter::repeat_n(true, us.len())),
        _ => {
            let mid = us.len() / 2;
            mark(f, fmt, min_bits, &us[..mid], out);
            mark(f, fmt, min_bits, &us[mid..], out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::split_range_in;
    use crate::plan::whole::split_whole;
    use crate::regions::skip::skipped_whole;

    fn args(units: &[UnitSpec]) -> u128 {
        units.iter().map(|u| u128::from(u.count)).sum()
    }

    /// Each unit's verdict by halving is its own verdict, asked alone: exp past its overflow
    /// and below its underflow in binary64 (runs straddled by a unit), exp in binary16 whole
    /// (overflow, underflow, trivial and exact regions at small units), and a function with
    /// poles (never).
    #[test]
    fn each_unit_s_verdict_by_halving_is_its_own() {
        let b64 = Format::named("binary64").unwrap();
        let b16 = Format::named("binary16").unwrap();
        let cases: Vec<(Function, Format, u32, Vec<UnitSpec>)> = vec![
            (
                Function::Exp,
                b64,
                44,
                split_range_in(Function::Exp, b64, "512", "1024", Some(44)).unwrap(),
            ),
            (
                Function::Exp,
                b64,
                44,
                split_range_in(Function::Exp, b64, "-1024", "-512", Some(44)).unwrap(),
            ),
            (
                Function::Exp,
                b16,
                12,
                split_range_in(Function::Exp, b16, "-65504", "65504", Some(4)).unwrap(),
            ),
            (
                Function::Log,
                b16,
                12,
                split_range_in(Function::Log, b16, "0x1p-14", "65504", Some(4)).unwrap(),
            ),
            (
                Function::Tan,
                b16,
                12,
                split_range_in(Function::Tan, b16, "1", "65504", Some(4)).unwrap(),
            ),
        ];
        for (f, fmt, k, units) in cases {
            let each = skipped_whole_each(f, fmt, k, &units);
            let alone: Vec<bool> = units.iter().map(|u| skipped_whole(f, fmt, k, *u)).collect();
            assert_eq!(each, alone, "{f:?} {fmt:?}");
            if f == Function::Exp {
                assert!(
                    each.iter().any(|&b| b) && each.iter().any(|&b| !b),
                    "{f:?} {fmt:?}"
                );
            }
        }
    }

    /// exp on [512, 1024) in binary64, units of 2^44: the units past exp's overflow threshold
    /// become one, those below it stay as cut, every argument still covered once, and the
    /// merged unit is one skipped run of the search, every unit it skips whole.
    #[test]
    fn exp_past_its_overflow_is_one_unit() {
        let fmt = Format::named("binary64").unwrap();
        let cut = split_range_in(Function::Exp, fmt, "512", "1024", Some(44)).unwrap();
        assert_eq!(cut.len(), 256);
        let merged = collapse_skipped(Function::Exp, fmt, 44, cut.clone());
        assert_eq!(args(&merged), args(&cut));
        assert!(merged
            .windows(2)
            .all(|w| w[0].first + w[0].count == w[1].first));
        let wide: Vec<&UnitSpec> = merged.iter().filter(|u| u.count > 1 << 44).collect();
        assert_eq!(wide.len(), 1, "{merged:?}");
        assert_eq!(merged.len(), 256 - wide[0].count as usize / (1 << 44) + 1);
        assert!(skipped_whole(Function::Exp, fmt, 44, *wide[0]));
        // Every unit left as cut runs something (the last one straddles the threshold).
        for u in merged.iter().filter(|u| u.count <= 1 << 44) {
            assert!(!skipped_whole(Function::Exp, fmt, 44, *u), "{u:?}");
        }
        // It is every unit that the search skips whole.
        let skipped: Vec<UnitSpec> = cut
            .iter()
            .filter(|u| skipped_whole(Function::Exp, fmt, 44, **u))
            .copied()
            .collect();
        assert_eq!(u128::from(wide[0].count), args(&skipped));
        // The whole plan collapses as much, but for one unit it leaves alone at the edge.
        let whole = split_whole(Function::Exp, fmt, 44, Some(44)).unwrap();
        let collapsed: u128 = whole
            .iter()
            .filter(|u| !u.negative && u.exponent == 9 && u.count > 1 << 44)
            .map(|u| u128::from(u.count))
            .sum();
        assert_eq!(u128::from(wide[0].count), collapsed + (1 << 44));
    }

    /// A range that skips nothing is left as cut; one that crosses binades merges within
    /// each binade only; subnormal and normal arguments are never merged together.
    #[test]
    fn only_runs_within_a_binade_merge() {
        let fmt = Format::named("binary32").unwrap();
        let cut = split_range_in(Function::Exp, fmt, "1", "4", Some(16)).unwrap();
        assert_eq!(collapse_skipped(Function::Exp, fmt, 20, cut.clone()), cut);
        // exp of binary32 overflows from about 88.72: [64, 256) holds two binades.
        let cut = split_range_in(Function::Exp, fmt, "64", "256", Some(16)).unwrap();
        let merged = collapse_skipped(Function::Exp, fmt, 20, cut.clone());
        assert_eq!(args(&merged), args(&cut));
        let wide: Vec<(i32, u64)> = merged
            .iter()
            .filter(|u| u.count > 1 << 16)
            .map(|u| (u.exponent, u.count))
            .collect();
        // Part of [64, 128) and all of [128, 256), as two units.
        assert_eq!(wide.len(), 2, "{wide:?}");
        assert_eq!(wide[1], (7, 1 << 23));
        // Tiny arguments of exp are trivial, subnormal ones too: a binade each, and the
        // subnormal arguments apart from the normal ones of the binade -126.
        let cut = split_range_in(Function::Exp, fmt, "0", "0x1p-124", Some(16)).unwrap();
        let merged = collapse_skipped(Function::Exp, fmt, 20, cut.clone());
        assert_eq!(args(&merged), args(&cut));
        assert!(
            merged.len() < cut.len() / 16,
            "{} of {}",
            merged.len(),
            cut.len()
        );
        assert!(merged
            .iter()
            .all(|u| (u.first >> 23) == ((u.first + u.count - 1) >> 23)));
        // tan has poles: left as cut.
        let cut = split_range_in(Function::Tan, fmt, "1", "2", Some(16)).unwrap();
        assert_eq!(collapse_skipped(Function::Tan, fmt, 20, cut.clone()), cut);
    }
}
