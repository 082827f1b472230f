//! Periodic functions on coarse grids: sinpi, cospi and tanpi repeat with period 2 (tanpi's
//! signed zeros too: `tanpi(n)` is `+0` or `-0` by the parity of `n`), so where a piece's
//! arguments are spaced `2^s` with `s` close to 0 the value, hence the verdict, of an argument
//! depends only on its significand modulo `2^(1 - s)`. An exhaustive piece holding several
//! periods then judges each class once with MPFR and copies the verdict to every argument of
//! it (`docs/error-analysis.md` §11): sinpi in binary32 on `[2^19, 2^21)` walked 16.7 million
//! arguments through MPFR where 96 values occur.

use crate::numbers::format::Format;
use crate::oracle::function::Function;
use crate::oracle::verify::{classify_in, ExactCase, HrCase, Verdict, VerifyError};
use crate::plan::UnitSpec;
use crate::regions::lattice::Lattice;
use rayon::prelude::*;

/// The most classes judged this way (`2^(1 - s)`, so `s >= -12`). Up to there half a period
/// holds at most `4 EXHAUSTIVE_MAX` arguments, so pieces between two zeros of `f` (which the
/// polynomial path needs) are few and small: the search judges such pieces by classes at once.
pub const MAX_CLASSES: u64 = 1 << 13;

/// The number `L` of classes of `piece`'s arguments for `f` (arguments `o` and `o + L` have
/// the same value): `2^(1 - s)` for sinpi, cospi and tanpi when that is at most half the piece
/// (two periods at least, else nothing is saved) and at most [`MAX_CLASSES`]; `None` otherwise.
pub fn classes(f: Function, fmt: Format, piece: UnitSpec) -> Option<u64> {
    if !matches!(f, Function::Sinpi | Function::Cospi | Function::Tanpi) {
        return None;
    }
    // x = ±m 2^s with m = first + o (subnormal numbers included, at emin's spacing).
    let s = piece.exponent - fmt.precision.bits() as i32 + 1;
    let shift = 1 - s;
    if !(0..=13).contains(&shift) {
        return None;
    }
    let l = 1u64 << shift;
    (l <= MAX_CLASSES && 2 * l <= piece.count).then_some(l)
}

/// The verdict of every argument of `piece` that is not [`Verdict::NotHard`], by offset in
/// significand order, from `l` MPFR verdicts: the argument at offset `o` is `±(first + o) 2^s`,
/// and `x ± 2 = ±(first + o + l) 2^s` with `f(x ± 2) = f(x)` exactly (signed zeros included),
/// so offset `o` has the value, the hardness, the kind and the rounding of offset `o mod l`;
/// only the argument's own text changes. Exact cases on the binade's lattice (`lattice.rs`)
/// are left out: the unit counts them by their rule. Only the classes worth listing are
/// copied, so the cost is that of the list, not of the piece (`2^44` arguments near `2^45`).
pub fn verdicts(
    f: Function,
    fmt: Format,
    min_bits: u32,
    piece: UnitSpec,
    l: u64,
) -> Result<Vec<(u64, Verdict)>, VerifyError> {
    let p = fmt.precision;
    let judged: Vec<Verdict> = (0..l.min(piece.count))
        .into_par_iter()
        .map(|o| classify_in(f, fmt, &piece.argument(o), min_bits))
        .collect::<Result<_, _>>()?;
    let x = |o: u64| piece.argument(o).to_hex(p);
    // The lattice's modulus divides l (2^(-1-s) or 2^(-2-s) against 2^(1-s)), so a class is
    // on it or off it as a whole.
    let lattice = Lattice::of(f, fmt, piece);
    let mut out = Vec::new();
    for (c, v) in (0u64..).zip(&judged) {
        match v {
            Verdict::NotHard { .. } => continue,
            Verdict::Exact(_) if lattice.is_some_and(|t| t.holds(piece.first + c)) => continue,
            _ => {}
        }
        for o in (c..piece.count).step_by(l as usize) {
            let copy = match v {
                Verdict::Hard(h) => Verdict::Hard(HrCase {
                    x: x(o),
                    ..h.clone()
                }),
                Verdict::Exact(e) => Verdict::Exact(ExactCase {
                    x: x(o),
                    ..e.clone()
                }),
                other => other.clone(),
            };
            out.push((o, copy));
        }
    }
    out.sort_unstable_by_key(|&(o, _)| o);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copied verdicts equal MPFR's on every argument: sinpi, cospi, tanpi in binary32 and
    /// binary16 (where the classes are few), at a threshold with HR-cases, exact cases and
    /// tanpi's poles and signed zeros, on both signs.
    #[test]
    fn copied_verdicts_equal_mpfr_argument_by_argument() {
        let b32 = Format::named("binary32").unwrap();
        let b16 = Format::named("binary16").unwrap();
        let (mut shared, mut lattices) = (0, 0);
        for f in [Function::Sinpi, Function::Cospi, Function::Tanpi] {
            for (fmt, exponent, first, count, k) in [
                (b32, 19, 0x80_1234, 4096, 4),
                (b32, 14, 0xab_0000, 1 << 11, 6),
                (b16, 7, 0x400, 1 << 10, 3),
                (b16, 9, 0x7f0, 16, 1),
            ] {
                for negative in [false, true] {
                    let piece = UnitSpec {
                        negative,
                        exponent,
                        first,
                        count,
                    };
                    let Some(l) = classes(f, fmt, piece) else {
                        assert!(count < 32, "{f} {piece:?}");
                        continue;
                    };
                    let mut got = verdicts(f, fmt, k, piece, l).unwrap().into_iter();
                    let lattice = Lattice::of(f, fmt, piece);
                    for o in 0..count {
                        let truth = classify_in(f, fmt, &piece.argument(o), k).unwrap();
                        if matches!(truth, Verdict::NotHard { .. }) {
                            continue;
                        }
                        if lattice.is_some_and(|t| t.holds(first + o)) {
                            assert!(matches!(truth, Verdict::Exact(_)), "{f} {piece:?} {o}");
                            lattices += 1;
                            continue;
                        }
                        assert_eq!(got.next(), Some((o, truth)), "{f} {piece:?} offset {o}");
                    }
                    assert_eq!(got.next(), None, "{f} {piece:?}");
                    shared += 1;
                }
            }
        }
        assert_eq!(shared, 24);
        assert!(lattices > 100, "{lattices} lattice points left out");
        // The search's skipped runs (tanpi's poles, from copied verdicts) are the ones the
        // coordinator recomputes argument by argument.
        use crate::search::{search_unit, Cpu, SearchConfig};
        let unit = UnitSpec {
            negative: true,
            exponent: 19,
            first: 0x80_1230,
            count: 4096,
        };
        let cfg = SearchConfig::in_format(Function::Tanpi, b32, 8);
        let searched = search_unit(&cfg, unit, &Cpu).unwrap();
        assert_eq!(searched.skipped.len(), 256);
        let recomputed = crate::regions::skip::skipped_runs(Function::Tanpi, b32, 8, unit).unwrap();
        assert_eq!(searched.skipped, recomputed);
        // Sin is not periodic on a dyadic grid; fine grids have too many classes.
        let piece = UnitSpec {
            negative: false,
            exponent: 0,
            first: 1 << 23,
            count: 1 << 20,
        };
        assert_eq!(classes(Function::Sin, b32, piece), None);
        assert_eq!(classes(Function::Sinpi, b32, piece), None);
    }
}
