//! A unit cut into parts: trivial runs by `trivial.rs`'s rule at 0, and, asking `monotone.rs`
//! about each piece, trivial runs far from 0 (tanh near ±1, expm1 near -1, ...) and clear
//! pieces (no HR-case, proven by enclosures) in the bands just beyond trivial regions; the rest
//! is searched as usual. The search and the coordinator's check cut a unit here, alike.

use crate::numbers::format::Format;
use crate::oracle::function::Function;
use crate::plan::UnitSpec;
use crate::regions::monotone::{asymptote, judge, Decision, Reference};
use crate::regions::runs::TrivialRun;
use crate::regions::trivial::{Like, Rule};

/// How one part of a unit is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Searched as usual (phases 1-3 or MPFR).
    Search,
    /// A trivial run: every argument an HR-case by a proven rule (listed, with the rule).
    Trivial(TrivialRun),
    /// No HR-case and no exact case, proven by enclosures (`monotone.rs`): searched by that
    /// proof, not argument by argument; counted in `Stats::clear_arguments`.
    Clear,
}

/// `unit` cut into consecutive parts, in significand order, each wholly a trivial run (with
/// its rule), wholly clear, or searched as usual. The search and the coordinator's check of a
/// worker's skipped runs (`skip.rs`) both cut a unit here, so their trivial runs are equal as
/// lists. A piece is split (`split`, the search's cut) while the argument of it nearest 0
/// (zero aside) is trivial by the rule at 0 but the whole piece is not (`judge` is monotonic
/// in the piece's largest `|x|`), or while `monotone::judge` says halves may be decided (its
/// values a few breakpoints wide, meeting a gap or a run): O(log count) pieces per edge of a
/// region, never argument by argument, and a unit no reference applies to is one part.
pub fn partition(
    f: Function,
    fmt: Format,
    min_bits: u32,
    unit: UnitSpec,
    split: fn(UnitSpec) -> (UnitSpec, UnitSpec),
) -> Vec<(UnitSpec, Part)> {
    let rule = Rule::for_unit(f, fmt.precision, unit);
    // What f is compared with beyond the rule at 0: g itself near 0 (the bands just beyond
    // the rule's region), the horizontal asymptote of the unit's side far from 0.
    let mut references = Vec::new();
    if let Some(r) = &rule {
        references.push(match &r.like {
            Like::X { negative } => Reference::Residual {
                negative: *negative,
            },
            Like::Constant(a) => Reference::Flat {
                c: Some(a.clone()),
                known: false,
            },
        });
    }
    references.extend(asymptote(f, unit.negative));
    if rule.is_none() && references.is_empty() {
        return vec![(unit, Part::Search)];
    }
    let mut out: Vec<(UnitSpec, Part)> = Vec::new();
    let mut stack = vec![unit];
    // Depth-first, left to right: pieces come out in significand order.
    'pieces: while let Some(piece) = stack.pop() {
        if let Some(t) = rule.as_ref().and_then(|r| r.judge(fmt, min_bits, piece)) {
            out.push((piece, Part::Trivial(t)));
            continue;
        }
        let mut halve = false;
        for reference in &references {
            match judge(f, fmt, min_bits, piece, reference) {
                Decision::Trivial(t) => {
                    out.push((piece, Part::Trivial(t)));
                    continue 'pieces;
                }
                Decision::Clear => {
                    push_merged(&mut out, piece, Part::Clear);
                    continue 'pieces;
                }
                Decision::Undecided { split } => halve |= split,
            }
        }
        if let Some(r) = &rule {
            let near = if piece.first == 0 { 1 } else { 0 };
            let near_piece = UnitSpec {
                first: piece.first + near,
                count: 1,
                ..piece
            };
            halve |= piece.count > 1 && r.judge(fmt, min_bits, near_piece).is_some();
        }
        if halve && piece.count > 1 {
            let (left, right) = split(piece);
            stack.push(right);
            stack.push(left);
            continue;
        }
        // Not decided: joined to a searched neighbour on its left.
        push_merged(&mut out, piece, Part::Search);
    }
    out
}

/// Appends `piece`, joined to the last part when adjacent and of the same kind (searched or
/// clear; trivial runs are merged later, with their bits, by `runs::Runs`).
fn push_merged(out: &mut Vec<(UnitSpec, Part)>, piece: UnitSpec, part: Part) {
    match out.last_mut() {
        Some((last, p)) if *p == part && last.first + last.count == piece.first => {
            last.count += piece.count
        }
        _ => out.push((piece, part)),
    }
}
