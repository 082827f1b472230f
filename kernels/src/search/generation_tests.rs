//! Tests of piece generation: the per-domain polynomials against MPFR, the shifted
//! differences, the saturated thresholds and the split where curvature fills the circle.

use super::*;

/// The exact per-domain polynomials reproduce MPFR's G within the written error bound, at
/// every tested argument of a binary64 unit of exp near 1: the line's domains of `2^15` and
/// the quadratic screen's larger ones (the default there since 2026-11-25).
#[test]
fn domain_polynomials_match_mpfr_within_the_bounds() {
    let line = GenConfig {
        quadratic: false,
        ..GenConfig::new(32)
    };
    let g = domain_polynomials_within_the_bounds(&line);
    assert_eq!((g.domain_bits, g.quadratic), (15, false));
    let g = domain_polynomials_within_the_bounds(&GenConfig::new(32));
    assert!(g.domain_bits > 15 && g.quadratic, "{}", g.domain_bits);
}

fn domain_polynomials_within_the_bounds(cfg: &GenConfig) -> Generated {
    let p = Precision::BINARY64;
    let piece = UnitSpec {
        negative: false,
        exponent: 0,
        first: (1u64 << 52) + (5u64 << 40),
        count: 1 << 40,
    };
    let g = generate(Function::Exp, p, cfg, piece).unwrap();
    assert!(g.degree >= 4 && g.degree <= 8, "degree {}", g.degree);
    let f_bits = g.frac_bits();
    let err = Integer::from(&g.bounds.taylor + &g.bounds.rounding) + &g.bounds.left_out;
    for &(i, x) in &[(0u64, 0u64), (1, 7), (12345, 4321), (g.domains - 1, 32767)] {
        // P_i(x) = r0 + r1 x + r2 C(x, 2), exact in fixed units.
        let v = g.r(0, i) + g.r(1, i) * x + g.r(2, i) * Integer::from(x).binomial(2);
        let arg = piece.argument(i * g.domain_size() + x).to_float(p);
        let y = Float::with_val(2000, arg.exp_ref());
        // exp(x) is in [2, 4) here: q = 1 and G = 2^(53 - 1) exp(x).
        let mut gv = y;
        gv <<= 52 + f_bits as i32;
        let truth = gv.to_integer().unwrap();
        let diff = Integer::from(&v - &truth).abs();
        assert!(
            diff <= Integer::from(&err + 1),
            "i={i} x={x}: {diff} > {err}"
        );
    }
    g
}

#[test]
fn shifted_differences_are_exact() {
    let rho = vec![Integer::from(5), Integer::from(-3), Integer::from(7)];
    // w(i) = 5 - 3 i + 7 C(i, 2)
    let w = |i: i64| Integer::from(5 - 3 * i + 7 * i * (i - 1) / 2);
    let s = Generated::shift(&rho, 10);
    assert_eq!(s[0], w(10));
    assert_eq!(s[1], w(11) - w(10));
    assert_eq!(s[2], Integer::from(7));
}

/// erfc in binary32 near 9 moves `G` by about 2^-7.7 per step squared, so
/// the line's quadratic residual fills the circle on a piece of 8192 arguments; that is
/// `Curvature` (split), not `Threshold` (every argument through MPFR at about 0.5 ms), and
/// a half generates.
#[test]
fn curvature_splits_where_halves_fit() {
    let fmt = crate::numbers::format::Format::named("binary32").unwrap();
    let mut cfg = GenConfig::new(16);
    cfg.exponents = fmt.exponents;
    let piece = |count| UnitSpec {
        negative: false,
        exponent: 3,
        first: 9 << 20,
        count,
    };
    let p = fmt.precision;
    assert_eq!(
        generate(Function::Erfc, p, &cfg, piece(8192)).err(),
        Some(GenError::Curvature)
    );
    assert!(generate(Function::Erfc, p, &cfg, piece(4096)).is_ok());
}

/// A threshold E that does not fit below 2^64 saturates at 2^64 - 1,
/// which a test could still pass (the flat-line shortcut, or d = 2^64 - 1). Generation
/// never hands one out: it refuses the piece, which is then searched exhaustively.
#[test]
fn saturated_thresholds_are_never_handed_to_a_test() {
    let p = Precision::new(16).unwrap();
    let piece = UnitSpec {
        negative: false,
        exponent: 0,
        first: 1 << 15,
        count: 1 << 12,
    };
    for k in 1..=4 {
        match generate(Function::Exp, p, &GenConfig::new(k), piece) {
            Ok(g) => assert!(g.e1 < u64::MAX && g.e2 < u64::MAX, "k={k}: {}", g.e1),
            Err(e) => assert!(
                matches!(e, GenError::Threshold | GenError::Curvature),
                "k={k}: {e}"
            ),
        }
    }
}

/// Where `f` is flatter than exp on [1, 2), domains rise above `domain_bits` up to
/// `flat_domain_bits` as far as the curvature allows (the cap of §5), and nowhere else: exp on
/// [1, 2) keeps `2^15`, exp near `2^-2` gets `2^17`, near `2^-10` the whole `2^20`.
#[test]
fn flat_regions_take_larger_domains() {
    let p = Precision::BINARY64;
    let unit = |exponent: i32| UnitSpec {
        negative: false,
        exponent,
        first: 1u64 << 52,
        count: 1 << 40,
    };
    let bits = |cfg: &GenConfig, e| {
        generate(Function::Exp, p, cfg, unit(e))
            .unwrap()
            .domain_bits
    };
    // The line's rise (with the screen, the default, these pieces are screened: see
    // `steep_pieces_take_screened_domains`).
    let flat = GenConfig {
        quadratic: false,
        ..GenConfig::new(44)
    };
    assert_eq!(flat.flat_domain_bits, FLAT_DOMAIN_BITS);
    let published = GenConfig {
        flat_domain_bits: 15,
        ..flat
    };
    assert_eq!(bits(&flat, 0), 15);
    assert_eq!(bits(&flat, -2), 17);
    assert_eq!(bits(&flat, -10), 20);
    for e in [0, -2, -10] {
        assert_eq!(bits(&published, e), 15, "binade 2^{e}");
    }
}

/// §16: with the quadratic screen (the default), pieces whose line domains stay
/// below the largest size take larger domains (exp in binary64 near 256: `2^13`, where the
/// cubic terms reach 16 radii, against `2^10`); screened domains rise above `domain_bits`
/// where the points allow (near 4 `2^17`, on [1, 2) `2^18`, near `2^-2` `2^19`),
/// and pieces whose line reaches the largest size keep the line (near `2^-10`).
#[test]
fn steep_pieces_take_screened_domains() {
    let p = Precision::BINARY64;
    let unit = |exponent: i32| UnitSpec {
        negative: false,
        exponent,
        first: 1u64 << 52,
        count: 1 << 34,
    };
    let screen = GenConfig::new(44);
    assert!(screen.quadratic, "the screen is the default");
    let line = GenConfig {
        quadratic: false,
        ..screen
    };
    let g = |cfg: &GenConfig, e| generate(Function::Exp, p, cfg, unit(e)).unwrap();
    let (l, s) = (g(&line, 8), g(&screen, 8));
    assert_eq!((l.domain_bits, l.quadratic), (10, false));
    assert_eq!((s.domain_bits, s.quadratic), (13, true));
    // Left-out terms within 2^SCREEN_LEFT_OUT_BITS radii, beyond one (a size that only the
    // allowance gives); the points per domain within SCREEN_HITS.
    assert!(s.bounds.left_out <= Integer::from(&s.bounds.radius << SCREEN_LEFT_OUT_BITS));
    assert!(s.bounds.left_out > s.bounds.radius);
    let points = Integer::from(&s.bounds.eps1 << (s.domain_bits + 1));
    assert!(points <= Integer::from(SCREEN_HITS) << s.frac_bits());
    let unit40 = |e| UnitSpec {
        count: 1 << 40,
        ..unit(e)
    };
    let g40 = |cfg: &GenConfig, e| generate(Function::Exp, p, cfg, unit40(e)).unwrap();
    for (e, line_bits, screen_bits) in [(0, 15, 18), (-2, 17, 19)] {
        let (l, s) = (g40(&line, e), g40(&screen, e));
        assert_eq!((l.domain_bits, l.quadratic), (line_bits, false), "2^{e}");
        assert_eq!((s.domain_bits, s.quadratic), (screen_bits, true), "2^{e}");
    }
    let flat = g40(&screen, -10);
    assert_eq!((flat.domain_bits, flat.quadratic), (20, false));
    // Screened domains rise above `domain_bits` up to `flat_domain_bits` where the points per
    // domain allow (near 4: `2^17`, the line's `2^14`), and stay at `2^15` when held there.
    let held = GenConfig {
        flat_domain_bits: 15,
        ..screen
    };
    let (l, s, h) = (g40(&line, 2), g40(&screen, 2), g40(&held, 2));
    assert_eq!((l.domain_bits, s.domain_bits, h.domain_bits), (14, 17, 15));
    assert!(s.quadratic && h.quadratic);
    assert!(s.sub_bits <= screen.domain_bits - screen.subdomain_split_bits);
    let points = Integer::from(&s.bounds.eps1 << (s.domain_bits + 1));
    assert!(points <= Integer::from(SCREEN_HITS) << s.frac_bits());
}

/// The wide series taken first to `WIDE_FIRST` terms (all of them where
/// the degree is higher: exp near 256 and 512) and the point series only to the degree found
/// give the polynomial of the full series, coefficient for coefficient, for every function
/// (the first terms of a series rule do not depend on its length), on pieces flat and steep,
/// wide and narrow, of both signs; where generation fails, it fails on both routes, alike for
/// the caller.
#[test]
fn the_short_point_series_gives_the_full_series_polynomial() {
    let fmt = crate::numbers::format::Format::named("binary64").unwrap();
    let mut cfg = GenConfig::new(44);
    cfg.exponents = fmt.exponents;
    let p = fmt.precision;
    let (mut same, mut failed) = (0, 0);
    for (i, &f) in Function::ALL.iter().enumerate() {
        for (j, &(exponent, count)) in [
            (-3, 1u64 << 30),
            (0, 1 << 36),
            (1, 2048),
            (6, 1 << 20),
            (8, 1 << 40),
            (9, 1 << 36),
        ]
        .iter()
        .enumerate()
        {
            let piece = UnitSpec {
                negative: (i + j) % 3 == 0,
                exponent,
                first: (1u64 << 52) + (((i * 7 + j * 13) as u64 % 61) << 44),
                count,
            };
            let max_degree = if count == 2048 { 16 } else { 12 };
            let cfg = GenConfig { max_degree, ..cfg };
            let full = fixed_polynomial_by(f, p, &cfg, piece, Route::Full);
            let short = fixed_polynomial_by(f, p, &cfg, piece, Route::Short);
            match (&full, &short) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "{f:?} {piece:?}");
                    same += 1;
                }
                (Err(a), Err(b)) => {
                    let skip = |e: &GenError| matches!(e, GenError::Overflow | GenError::Underflow);
                    assert!(
                        skip(a) == skip(b) && (!skip(a) || a == b),
                        "{f:?} {piece:?}: {a:?} {b:?}"
                    );
                    failed += 1;
                }
                _ => panic!("{f:?} {piece:?}: {full:?} against {short:?}"),
            }
        }
    }
    assert!(
        same > 3 * Function::ALL.len(),
        "{same} polynomials, {failed} failures"
    );
}

/// The binomial sums kept per thread are the sums: first asked, asked again, and after the
/// store was emptied for holding too many.
#[test]
fn kept_binomial_sums_are_the_sums() {
    let direct = |n: u64, d: usize| -> Integer {
        (0..=d as u32).map(|m| Integer::from(n).binomial(m)).sum()
    };
    for round in 0..2 {
        for (n, d) in [
            (0u64, 0usize),
            (1, 3),
            (511, 12),
            ((1 << 19) - 1, 16),
            (1 << 40, 7),
        ] {
            assert_eq!(
                sum_binomials(n, d),
                direct(n, d),
                "round {round}: C({n}, <= {d})"
            );
        }
    }
    for n in 0..4200u64 {
        let _ = sum_binomials(n, 2);
    }
    assert_eq!(sum_binomials(511, 12), direct(511, 12));
}
