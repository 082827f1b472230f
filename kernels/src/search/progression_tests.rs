//! The progression route against MPFR and against its other routes, its pieces' bounds and
//! words.

use super::*;
use crate::numbers::format::Format;

/// The reduced angle is congruent to the argument: its sine and cosine are MPFR's of the
/// argument itself (which reduces on its own), within the ball, at 2^21, 2^100 and 2^1023.
#[test]
fn reduced_angles_are_congruent_modulo_two_pi() {
    for (m, e) in [
        (0x1_2345_6789_abcdu64, 21),
        (0x1f_ffff_ffff_ffff, 100),
        (0x10_0000_0000_0001, 1023),
    ] {
        for negative in [false, true] {
            let mut x = Float::with_val(53, m);
            x <<= e - 52;
            if negative {
                x = -x;
            }
            let theta = reduce(&x, 200);
            assert!(theta.mid.clone().abs() < 3.15, "{x}: {}", theta.mid);
            assert!(
                theta.rad < Float::with_val(64, 1) >> 195u32,
                "{}",
                theta.rad
            );
            let (s, c) = theta.sin_cos();
            let truth_s = Float::with_val(220, x.sin_ref());
            let truth_c = Float::with_val(220, x.cos_ref());
            for (b, t) in [(s, truth_s), (c, truth_c)] {
                let d = Float::with_val(220, &b.mid - &t).abs();
                assert!(d <= Float::with_val(64, 1) >> 190u32, "{x}: off by {d}");
            }
        }
    }
}

/// The convergents of the golden ratio's fractional part have Fibonacci denominators.
#[test]
fn convergent_denominators_follow_the_continued_fraction() {
    let mut phi = (Float::with_val(300, 5).sqrt() - 1u32) / 2u32;
    phi <<= 200u32;
    let num = phi.floor().to_integer().unwrap();
    let q = convergent_denominators(num, 200, 1000);
    assert_eq!(
        q,
        vec![1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987]
    );
}

/// Pieces generated from two numbers (`sincos.rs`) hold their written bound: on the first
/// pieces of units of sin at `2^24`, `2^100` and `2^1000`, cos at `2^500`, tan at `2^100`
/// and `2^1000`, sinpi at `2^22`, cospi at `2^30` and tanpi at `2^22` (binary64, 44 bits,
/// both signs), `|R~(t) - G(t)| <= eps_T + eps_R`
/// at sampled offsets against MPFR at 600 bits; the general route's polynomial of the same
/// piece has a degree within one of theirs and its values are within both bounds of them.
#[test]
fn pieces_from_two_numbers_hold_their_bound() {
    let fmt = Format::named("binary64").unwrap();
    let p = fmt.precision;
    let (mut quick, mut tan_quick) = (0, 0);
    for (f, exponent) in [
        (Function::Sin, 24),
        (Function::Sin, 100),
        (Function::Sin, 1000),
        (Function::Cos, 500),
        (Function::Tan, 100),
        (Function::Tan, 1000),
        (Function::Sinpi, 22),
        (Function::Cospi, 30),
        (Function::Tanpi, 22),
    ] {
        for negative in [false, true] {
            let unit = UnitSpec {
                negative,
                exponent,
                first: 0x5_4321_0fed_cba9,
                count: 1 << 30,
            };
            let cfg = SearchConfig::in_format(f, fmt, 44);
            let gen = GenConfig {
                max_degree: DENSE_MAX_DEGREE,
                ..cfg.gen
            };
            let pr = plan(f, p, unit).expect("the route");
            let bases = unit_bases(&cfg, unit, pr).expect("bases");
            let prec = ALONG_START_PREC + p.bits();
            for i in 0..2 {
                let (r, k) = (i / pr.per_class, i % pr.per_class);
                let len = pr.class_len(unit.count, r);
                let cut = len.div_ceil(pr.per_class).max(1);
                let (j0, n) = (k * cut, cut.min(len - k * cut));
                let offset = |j: u64| r + pr.q * (j0 + j);
                let middle = unit.argument(offset(n / 2)).to_float(p);
                let theta = sincos::angle(f, &line_point(f, &middle, prec), prec);
                let Ok(fx) = sincos::fixed_along(f, p, &gen, n, &theta, &bases) else {
                    continue;
                };
                quick += 1;
                tan_quick += sincos::is_tan(f) as usize;
                let line = |prec: u32| line_of(f, p, unit, pr.q, &middle, prec);
                // tan's series may fail on a piece its two numbers take.
                let general = fixed_polynomial_along(f, p, &gen, n, line).ok();
                assert!(general.is_some() || sincos::is_tan(f), "{f} 2^{exponent}");
                if let Some(g) = &general {
                    assert!(fx.degree <= g.degree + 1, "{f} 2^{exponent}");
                    if !sincos::is_tan(f) {
                        assert!(fx.degree.abs_diff(g.degree) <= 1, "{f} 2^{exponent}");
                    }
                }
                let fb = fx.frac_bits();
                let value = |t: u64| {
                    let x = unit.argument(offset(t)).to_float(p);
                    Float::with_val(600, f.eval(&x, 600).0).abs()
                };
                // G = 2^s |f|: s read off beta_0 ~ G(0) 2^F.
                let g0 = Float::with_val(600, &fx.beta[0]) >> fb;
                let s = Float::with_val(64, &g0 / value(0)).log2().round().to_f64() as i32;
                let bound = Integer::from(&fx.taylor + &fx.rounding) + 1u32;
                let at = |beta: &[Integer], t: u64, shift: u32| -> Integer {
                    let sum: Integer = beta
                        .iter()
                        .enumerate()
                        .map(|(m, b)| b * Integer::from(t).binomial(m as u32))
                        .sum();
                    sum << shift
                };
                for t in (0..n).step_by((n / 40).max(1) as usize).chain([n - 1]) {
                    let mut g = value(t);
                    g <<= s + fb as i32;
                    let truth = g.round().to_integer().unwrap();
                    let r = at(&fx.beta, t, 0);
                    let d = Integer::from(&r - &truth).abs();
                    assert!(
                        d <= bound,
                        "{f} 2^{exponent} piece {i} t={t}: {d} > {bound}"
                    );
                    // Both polynomials at the wider one's fixed point.
                    let Some(general) = &general else { continue };
                    let gbound = Integer::from(&general.taylor + &general.rounding) + 1u32;
                    let gf = general.frac_bits();
                    let (w, a, b) = (fb.max(gf), at(&fx.beta, t, 0), at(&general.beta, t, 0));
                    let a = a << (w - fb);
                    let b = b << (w - gf);
                    let both = (bound.clone() << (w - fb)) + (gbound.clone() << (w - gf));
                    assert!(
                        Integer::from(&a - &b).abs() <= both,
                        "{f} 2^{exponent} t={t}"
                    );
                }
            }
        }
    }
    assert!(quick >= 24, "{quick} pieces from two numbers");
    assert!(tan_quick >= 6, "{tan_quick} pieces of tan from two numbers");
}

/// Every case MPFR finds argument by argument on a unit, and no other: the route against a
/// brute force, for `cut` (a coarser one lets small units walk pieces), with cases found
/// and arguments walked.
fn against_mpfr(f: Function, fmt: Format, k: u32, unit: UnitSpec, cut: Cut) -> (usize, u64) {
    let cfg = SearchConfig::in_format(f, fmt, k);
    let pr = plan_with(f, fmt.precision, unit, cut).expect("progressions");
    let t = std::time::Instant::now();
    let found = search(&cfg, unit, pr, &crate::search::phases::Cpu).unwrap();
    let route_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    // The lattice's exact cases are counted by rule, not listed (sinpi, cospi, tanpi).
    let lattice = Lattice::of(f, fmt, unit);
    let truth: Vec<Verdict> = (0..unit.count)
        .into_par_iter()
        .filter(|&o| !lattice.is_some_and(|l| l.covers(unit.first + o)))
        .map(|o| classify_in(f, fmt, &unit.argument(o), k).unwrap())
        .collect();
    let (mut hard, mut exact) = (Vec::<HrCase>::new(), Vec::<ExactCase>::new());
    for v in truth {
        match v {
            Verdict::Hard(c) => hard.push(c),
            Verdict::Exact(e) => exact.push(e),
            _ => {}
        }
    }
    let what = format!("{f} {} {unit:?} {pr:?}", fmt.name());
    println!(
        "{what}: route {route_s:.3} s, MPFR {:.3} s; {:?} {:?}",
        t.elapsed().as_secs_f64(),
        found.stats,
        found.timings
    );
    assert_eq!(found.hr_cases, hard, "{what}");
    assert_eq!(found.exact_cases, exact, "{what}");
    assert!(found.skipped.is_empty(), "{what}");
    let s = &found.stats;
    assert_eq!(
        s.progression_arguments + s.exhaustive_arguments,
        unit.count,
        "{what}: every argument walked or judged once"
    );
    (hard.len(), s.progression_arguments)
}

fn unit(fmt: Format, negative: bool, exponent: i32, first: u64, bits: u32) -> UnitSpec {
    let p = fmt.precision.bits();
    UnitSpec {
        negative,
        exponent,
        first: (1u64 << (p - 1)) + first,
        count: 1 << bits,
    }
}

/// A generated piece carries its narrowing and its words (planned where it is made, for
/// the GPU's packing): they are `narrow::plan`'s for its own count and its coefficients mod
/// `2^(64 limbs)`; another count or threshold is planned afresh.
#[test]
fn pieces_carry_their_own_narrowing_and_words() {
    let b64 = Format::named("binary64").unwrap();
    let u = unit(b64, false, 1023, 0x3_1415_9265_3589, 32);
    let cfg = SearchConfig::in_format(Function::Sin, b64, 43);
    let pr = plan(Function::Sin, b64.precision, u).expect("the route");
    let pieces = dense_pieces(&cfg, u, pr, 0..2);
    assert!(!pieces.is_empty());
    let mut narrowed = 0;
    for (d, n) in pieces {
        let own = d.narrowing(n);
        assert_eq!(own, crate::search::narrow::plan(d.fx(), d.t(), n));
        narrowed += own.is_some() as usize;
        assert_eq!(
            d.narrowing(n / 2),
            crate::search::narrow::plan(d.fx(), d.t(), n / 2)
        );
        let modulus = Integer::from(1) << (64 * d.fx().limbs as u32);
        for (m, b) in d.fx().beta.iter().enumerate() {
            let (_, r) = <(Integer, Integer)>::from(b.div_rem_euc_ref(&modulus));
            let mut want = r.to_digits::<u64>(rug::integer::Order::Lsf);
            want.resize(d.fx().limbs, 0);
            assert_eq!(d.word_limbs(m), &want[..], "word {m}");
        }
        let wide = d.clone().with_threshold(d.t() * 4);
        assert_eq!(
            wide.narrowing(n),
            crate::search::narrow::plan(d.fx(), d.t() * 4, n)
        );
    }
    assert!(narrowed > 0, "no piece narrowed");
}

/// binary64 units of 2^17 arguments at 2^21, 2^100, 2^500 and 2^1023, sin, cos and tan
/// on both signs, at 12 bits (about 64 cases a unit): the route's cases are MPFR's.
#[test]
fn binary64_units_far_out_match_mpfr_argument_by_argument() {
    let b64 = Format::named("binary64").unwrap();
    let cut = Cut {
        span_bits: 2,
        max_piece: 1 << 14,
        min_piece: 32,
        min_average: 32,
    };
    let mut cases = 0;
    let mut walked = 0;
    for (f, negative, e, first) in [
        (Function::Sin, false, 21, 0x1234_5678_9abc),
        (Function::Cos, true, 100, 0x8_0000_0000_0000),
        (Function::Tan, false, 500, 0xf_ffff_fffe_0000),
        (Function::Sin, true, 1023, 0x3_1415_9265_3589),
        (Function::Cos, false, 1023, 0x7_7777_0000_0000),
    ] {
        let (c, w) = against_mpfr(f, b64, 12, unit(b64, negative, e, first, 17), cut);
        cases += c;
        walked += w;
    }
    assert!(cases > 100, "{cases} cases");
    assert!(walked > 1 << 18, "{walked} walked");
}

/// Where the default cut finds no progression, the coarser one walks: a binary64 unit of
/// `2^21` at `2^100` and a binary32 one at `2^29`, against MPFR.
#[test]
fn the_fallback_cut_walks_what_the_default_leaves_to_mpfr() {
    let b64 = Format::named("binary64").unwrap();
    let b32 = Format::named("binary32").unwrap();
    for (f, fmt, u) in [
        (Function::Sin, b64, unit(b64, false, 100, 0, 21)),
        (Function::Sin, b32, unit(b32, false, 29, 0x20_0000, 21)),
    ] {
        assert_eq!(plan_with(f, fmt.precision, u, Cut::DEFAULT), None);
        assert_eq!(
            plan(f, fmt.precision, u),
            plan_with(f, fmt.precision, u, Cut::FALLBACK)
        );
        let (c, w) = against_mpfr(f, fmt, 12, u, Cut::FALLBACK);
        assert!(
            c > 400 && w > u.count * 9 / 10,
            "{f} {u:?}: {c} cases, {w} walked"
        );
    }
}

/// binary32 far out on units of 2^20 (a coarser cut lets them walk), at 10 bits.
#[test]
fn binary32_units_far_out_match_mpfr_argument_by_argument() {
    let b32 = Format::named("binary32").unwrap();
    let cut = Cut {
        min_average: 64,
        ..Cut::DEFAULT
    };
    for (f, negative, e) in [(Function::Sin, false, 40), (Function::Tan, true, 90)] {
        let (c, w) = against_mpfr(f, b32, 10, unit(b32, negative, e, 0x12_3400, 20), cut);
        assert!(c > 200 && w > 1 << 19, "{f} 2^{e}: {c} cases, {w} walked");
    }
}

/// binary32: whole binades far out (2^23 arguments each), the engine's own cut where it
/// takes the route (about 100 s on two cores: `--long`).
#[test]
#[ignore]
fn binary32_binades_far_out_match_mpfr_argument_by_argument() {
    let b32 = Format::named("binary32").unwrap();
    for (f, negative, e) in [
        (Function::Sin, false, 40),
        (Function::Cos, true, 64),
        (Function::Tan, true, 90),
        (Function::Sin, true, 127),
    ] {
        let u = unit(b32, negative, e, 0, 23);
        // The engine's cut: the default where it finds a progression, else the coarser
        // one (cos at 2^64: the default's pieces would average fewer than 256 arguments).
        let cut = if plan_with(f, b32.precision, u, Cut::DEFAULT).is_some() {
            Cut::DEFAULT
        } else {
            Cut::FALLBACK
        };
        assert_eq!(
            plan(f, b32.precision, u),
            plan_with(f, b32.precision, u, cut)
        );
        let (c, w) = against_mpfr(f, b32, 10, u, cut);
        assert!(c > 1000 && w > 1 << 22, "{f} 2^{e}: {c} cases, {w} walked");
    }
}

/// sinpi, cospi and tanpi walked on their grid (`q = 1`): binary32 units of 2^20 at 2^6
/// and 2^8 (4 and 16 periods, zeros, poles and lattice points inside) and binary64 units
/// of 2^17 at 2^21, 2^27 and 2^30, both signs, at 10 and 12 bits: MPFR's cases.
#[test]
fn functions_of_pi_x_walked_on_their_grid_match_mpfr() {
    let b32 = Format::named("binary32").unwrap();
    for (f, negative, e) in [
        (Function::Sinpi, false, 8),
        (Function::Cospi, true, 6),
        (Function::Tanpi, false, 8),
        (Function::Tanpi, true, 6),
    ] {
        let u = unit(b32, negative, e, 0x1_2340, 20);
        assert_eq!(plan(f, b32.precision, u).map(|pr| pr.q), Some(1));
        let (c, w) = against_mpfr(f, b32, 10, u, Cut::DEFAULT);
        assert!(c > 200 && w > 1 << 19, "{f} 2^{e}: {c} cases, {w} walked");
    }
    let b64 = Format::named("binary64").unwrap();
    let cut = Cut {
        min_average: 32,
        ..Cut::DEFAULT
    };
    for (f, negative, e, first) in [
        (Function::Sinpi, true, 21, 0xf_ffff_fffe_0000),
        (Function::Cospi, false, 30, 0x3_ffff_fff0_0000),
        (Function::Tanpi, true, 27, 0x7_ffff_ffff_0000),
    ] {
        let (c, w) = against_mpfr(f, b64, 12, unit(b64, negative, e, first, 17), cut);
        assert!(c > 8 && w > 1 << 16, "{f} 2^{e}: {c} cases, {w} walked");
    }
}

/// `search_unit` takes the route where `plan` says so, and finds what the dyadic route
/// finds: sin and cos in binary64 near 2^24 (where both are cheap), on and off.
#[test]
fn search_unit_takes_the_route_and_agrees_with_the_dyadic_one() {
    use crate::search::{search_unit, Cpu};
    let b64 = Format::named("binary64").unwrap();
    for (f, negative) in [(Function::Sin, false), (Function::Cos, true)] {
        let u = unit(b64, negative, 24, 0x5_5555_0000_0000, 20);
        assert!(plan(f, b64.precision, u).is_some());
        let mut cfg = SearchConfig::in_format(f, b64, 16);
        let on = search_unit(&cfg, u, &Cpu).unwrap();
        cfg.progressions = false;
        let off = search_unit(&cfg, u, &Cpu).unwrap();
        assert_eq!(on.stats.progression_arguments, u.count);
        assert_eq!(off.stats.progression_arguments, 0);
        assert!(on.hr_cases.len() > 4, "{f}: {} cases", on.hr_cases.len());
        assert_eq!(on.hr_cases, off.hr_cases, "{f}");
        assert_eq!(on.exact_cases, off.exact_cases, "{f}");
        assert_eq!(on.skipped, off.skipped, "{f}");
    }
    // Below 2^22 the dyadic route keeps binary64's sin, below 2^20 its sinpi.
    let u = unit(b64, false, 21, 0, 20);
    assert!(plan(Function::Sin, b64.precision, u).is_none());
    assert!(plan(Function::Sinpi, b64.precision, u).is_some());
    assert!(plan(Function::Sinpi, b64.precision, unit(b64, false, 20, 0, 20)).is_some());
    assert!(plan(Function::Sinpi, b64.precision, unit(b64, false, 19, 0, 20)).is_none());
    // sinpi, cospi and tanpi on a piece of a binade's period, route on and off.
    for f in [Function::Sinpi, Function::Cospi, Function::Tanpi] {
        let u = unit(b64, true, 22, 0x3_ffff_fffc_0000, 19);
        let mut cfg = SearchConfig::in_format(f, b64, 16);
        cfg.periodic = false;
        let on = search_unit(&cfg, u, &Cpu).unwrap();
        cfg.progressions = false;
        let off = search_unit(&cfg, u, &Cpu).unwrap();
        // Walked, but around the zero (and the pole) judged by MPFR.
        let s = &on.stats;
        assert_eq!(s.progression_arguments + s.exhaustive_arguments, u.count);
        assert!(s.progression_arguments > u.count - 1024, "{f}: {s:?}");
        assert_eq!(off.stats.progression_arguments, 0);
        assert!(on.hr_cases.len() > 2, "{f}: {} cases", on.hr_cases.len());
        assert_eq!(on.hr_cases, off.hr_cases, "{f}");
        assert_eq!(on.exact_cases, off.exact_cases, "{f}");
        assert_eq!(on.skipped, off.skipped, "{f}");
        assert_eq!(on.exact_lattice, off.exact_lattice, "{f}");
    }
    assert!(plan(Function::Exp, b64.precision, unit(b64, false, 100, 0, 30)).is_none());
}

/// A piece whose two numbers show a zero of sin, or values over more than two output binades,
/// is a shape miss (halved at once, the general route not asked); one well inside a binade is
/// made. The step `2^-20` a offset, pieces of `2^10` offsets: `|u| <= 2^-11` on the piece.
#[test]
fn shape_misses_are_told_apart_from_the_others() {
    let b64 = Format::named("binary64").unwrap();
    let cfg = SearchConfig::in_format(Function::Sin, b64, 43);
    let gen = GenConfig {
        max_degree: DENSE_MAX_DEGREE,
        ..cfg.gen
    };
    let bases = Bases::new(Ball::from_float(300, &(Float::with_val(300, 1) >> 20u32)));
    let along = |theta: Float| {
        let theta = Ball::from_float(300, &theta);
        sincos::fixed_along(Function::Sin, b64.precision, &gen, 1 << 10, &theta, &bases)
    };
    // A zero inside: sin(2^-13 + u) changes sign.
    assert_eq!(
        along(Float::with_val(300, 1) >> 13u32).err(),
        Some(Miss::Shape)
    );
    // sin between about 2^-11 and 5 2^-11: three binades.
    assert_eq!(
        along(Float::with_val(300, 3) >> 11u32).err(),
        Some(Miss::Shape)
    );
    assert!(along(Float::with_val(300, 0.5)).is_ok());
    // tan's misses are all `Other`: its caller halves every one.
    let theta = Ball::from_float(300, &(Float::with_val(300, 1) >> 13u32));
    let tan = sincos::fixed_along(Function::Tan, b64.precision, &gen, 1 << 10, &theta, &bases);
    assert_eq!(tan.err(), Some(Miss::Other));
}

/// `generate_only` makes, batch by batch on the pool, the pieces `dense_pieces` makes on one
/// thread for the same initial pieces.
#[test]
fn generation_alone_makes_the_pieces_of_the_search() {
    let b64 = Format::named("binary64").unwrap();
    let u = unit(b64, false, 100, 0x3_1415_9265_3589, 32);
    let cfg = SearchConfig::in_format(Function::Sin, b64, 43);
    let pr = plan(Function::Sin, b64.precision, u).expect("the route");
    let first = BATCH.min(initial_pieces(u, pr));
    let made = generate_only(&cfg, u, pr, 1);
    assert!(made > 0);
    assert_eq!(made, dense_pieces(&cfg, u, pr, 0..first).len() as u64);
}

/// A center's sine and cosine rotated from the last (`Bases::sin_cos_at`) meet those of its
/// own angle: the balls overlap, and along chains of [`CHAIN`] started afresh, as the route
/// makes them, their radii stay within `2^-500` (binary64 at `2^1023`: balls of 565 bits),
/// forwards and backwards.
#[test]
fn rotated_centers_meet_their_own_angles() {
    let b64 = Format::named("binary64").unwrap();
    let u = unit(b64, false, 1023, 0x3_1415_9265_3589, 40);
    let cfg = SearchConfig::in_format(Function::Sin, b64, 43);
    let pr = plan(Function::Sin, b64.precision, u).expect("the route");
    let bases = unit_bases(&cfg, u, pr).expect("bases");
    let mut rotor = Rotor::default();
    let step = pr.q * 1000 + 17;
    let offsets = (0..133u64).map(|j| 5 + j * step).chain([3, 1 << 39, 11]);
    let tiny = Float::with_val(64, 1) >> 500u32;
    for (j, o) in offsets.enumerate() {
        if (j as u64).is_multiple_of(CHAIN) {
            rotor.restart();
        }
        let (s, c) = bases.sin_cos_at(o, &mut rotor).expect("an origin");
        let (s0, c0) = bases.angle_at(o).expect("an origin").sin_cos();
        for (r, f) in [(&s, &s0), (&c, &c0)] {
            let gap = Float::with_val(600, &r.mid - &f.mid).abs();
            let reach = Float::with_val(64, &r.rad + &f.rad);
            assert!(gap <= reach, "offset {o}: {gap} beyond {reach}");
            assert!(r.rad < tiny, "offset {o}: radius {}", r.rad);
        }
    }
}
