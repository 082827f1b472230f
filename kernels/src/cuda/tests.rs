//! Tests of the CUDA back end's host side (packing, packets, slack) and of the integer
//! identity phase 2's kernel rests on (its gathered factors); the device itself is tested by
//! `selftest`.

use super::*;
use crate::numbers::fixed;

#[test]
fn words_are_packed_as_the_cpu_reduces_them() {
    let vals = [
        Integer::from(-1),
        Integer::from(12345),
        (Integer::from(1) << 300) - 7,
        -(Integer::from(3) << 200u32),
    ];
    let packed = pack_words(&vals, 5);
    assert_eq!(packed.len(), 20);
    for (l, v) in vals.iter().enumerate() {
        assert_eq!(
            &packed[l * 5..(l + 1) * 5],
            &fixed::from_integer::<5>(v)[..]
        );
    }
    assert_eq!(word_limbs(&Integer::from(-1), 2), vec![u64::MAX, u64::MAX]);
}

#[test]
fn interleaved_lists_round_trip() {
    // What tmd_phase1 writes: 3 fields of L limbs, limb-major, `cap` entries per row.
    let (limbs, cap) = (3usize, 7usize);
    let mut list = vec![0u64; 3 * limbs * cap];
    for j in 0..cap {
        for f in 0..3 {
            for k in 0..limbs {
                list[interleaved_index(f * limbs + k, j, cap)] = (j * 100 + f * 10 + k) as u64;
            }
        }
    }
    // Neighbouring entries of one limb are adjacent: coalesced accesses.
    assert_eq!(
        interleaved_index(4, 3, cap) + 1,
        interleaved_index(4, 4, cap)
    );
    for j in 0..cap {
        for f in 0..3 {
            let w = read_interleaved(&list, f, j, limbs, cap);
            let want: Vec<u64> = (0..limbs).map(|k| (j * 100 + f * 10 + k) as u64).collect();
            assert_eq!(w, want);
        }
    }
}

#[test]
fn phase3_chunks_cover_each_subdomain_once() {
    for sub_bits in 2..=20u32 {
        let (cb, cs) = phase3_chunks(sub_bits);
        assert_eq!(cb + cs, sub_bits);
        // Every argument of a full subdomain is walked by exactly one (chunk, step).
        let mut seen = vec![0u8; 1 << sub_bits];
        for c in 0..1u64 << cs {
            for y in (c << cb)..((c + 1) << cb) {
                seen[y as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "sub_bits {sub_bits}");
    }
}

#[test]
fn packets_and_capacities() {
    for domains in [1u64, 7, 1 << 10, 1 << 20, 1 << 25, (1 << 35) + 3] {
        let p = gpu_packet(domains, false);
        assert_eq!(gpu_packet(domains, true), (domains >> 16).clamp(16, 1024));
        assert!((16..=1024).contains(&p));
        let threads = domains.div_ceil(p);
        assert!(threads * p >= domains && (threads - 1) * p < domains);
        assert!(launch_config(threads).is_ok());
    }
    assert_eq!(gpu_packet(1 << 25, false), 256);
    assert_eq!(gpu_packet(1 << 23, true), 128);
}

/// The slack bounds what the two-limb walk drops: walking words of 3 limbs exactly and by
/// their top two limbs, the shortfall of the lowest difference never exceeds it.
#[test]
fn the_two_limb_walk_stays_within_its_slack() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    for n in [2usize, 4, 7, 9] {
        let steps = 200u64;
        let slack = walk_slack(n, steps).expect("small");
        let mut full: Vec<[u64; 3]> = (0..n).map(|_| rng.gen()).collect();
        let mut top: Vec<[u64; 2]> = full.iter().map(|w| [w[1], w[2]]).collect();
        for _ in 0..steps {
            for l in 0..n - 1 {
                let (x, y) = (full[l + 1], top[l + 1]);
                fixed::add(&mut full[l], &x);
                fixed::add(&mut top[l], &y);
            }
            let t = ((full[0][2] as u128) << 64) | full[0][1] as u128;
            let w = ((top[0][1] as u128) << 64) | top[0][0] as u128;
            assert!(t.wrapping_sub(w) <= slack as u128, "n={n}");
        }
    }
    assert_eq!(walk_slack(1, 1000), Some(0));
    assert_eq!(walk_slack(2, 256), Some(256));
    assert!(walk_slack(13, 4096).is_none());
}

/// The packet keeps the two-limb walk where the default would lose it (exp in
/// binary64 near 300 on a piece of 2^38: degree 11, 8 limbs, 2^28 domains), and stays the
/// default where the walk already fits (exp on a unit of [1, 2)).
#[test]
fn the_packet_keeps_the_two_limb_walk() {
    use crate::plan::UnitSpec;
    use crate::search::generation::{generate, GenConfig};
    use crate::{Function, Precision};
    let gen = |exponent, count| {
        let piece = UnitSpec {
            negative: false,
            exponent,
            first: 3 << 51,
            count,
        };
        generate(
            Function::Exp,
            Precision::BINARY64,
            &GenConfig::new(44),
            piece,
        )
        .unwrap()
    };
    let flat = gen(0, 1 << 40);
    let p = gpu_packet(flat.domains, flat.quadratic);
    assert_eq!(piece::top_walk_packet(&flat, p), p);
    let steep = gen(8, 1 << 38);
    assert!(steep.limbs > 2);
    let p = gpu_packet(steep.domains, steep.quadratic);
    assert_eq!(
        walk_slack(steep.walk_b.len(), p - 1),
        None,
        "the default loses the walk"
    );
    let q = piece::top_walk_packet(&steep, p);
    assert!(q < p && q >= 16, "{q}");
    let slack = walk_slack(steep.walk_b.len(), q - 1).unwrap()
        + walk_slack(steep.walk_slope.len(), q - 1).unwrap();
    assert!(slack as u128 * steep.domains as u128 <= (EXACT_CAP as u128 / 4) << 64);
}

/// `tmd_phase2`'s three-product form of the subdomain line (the integer factors of `r2`
/// gathered) against the seven products of `phases::domain_polynomial` and
/// `phases::subdomain_line`, written out here as the kernel does it: the same `c0`, `c1`, and
/// `s0`, `s1` taken back from them, for the offsets generation makes (`K0 = 2^(2n - 4)`,
/// `K1 = 2^(n - 1) - 1`, the same for the subdomains) up to domains of `2^31`.
#[test]
fn phase2_gathered_factors_give_the_same_line() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(26);
    let word =
        |rng: &mut rand::rngs::StdRng| -> fixed::Word<5> { std::array::from_fn(|_| rng.gen()) };
    // a * m for a signed factor given as (up, down): a (up - down) mod 2^(64 L).
    let signed = |a: &fixed::Word<5>, up: u64, down: u64, acc: &mut fixed::Word<5>| {
        if up >= down {
            fixed::add(acc, &fixed::mul_small(a, up - down));
        } else {
            *acc = fixed::sub(acc, &fixed::mul_small(a, down - up));
        }
    };
    for n in 4..=31u32 {
        for sub_bits in [2, n.saturating_sub(3).max(2), n] {
            let (k0, k1) = (1u64 << (2 * n - 4), (1u64 << (n - 1)) - 1);
            let (k0s, k1s) = (1u64 << (2 * sub_bits - 4), (1u64 << (sub_bits - 1)) - 1);
            let last = (((1u64 << n) - 1) >> sub_bits) << sub_bits;
            for x0 in [0, 1 << sub_bits, ((last / 2) >> sub_bits) << sub_bits, last] {
                let (b, slope, r2, eps1, eps2) = (
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng),
                    word(&mut rng),
                );
                // Seven products (search/phases.rs).
                let r1 = fixed::sub(&slope, &fixed::mul_small(&r2, k1));
                let mut r0 = fixed::sub(&b, &eps1);
                fixed::add(&mut r0, &fixed::mul_small(&r2, k0));
                let mut s0 = r0;
                fixed::add(&mut s0, &fixed::mul_small(&r1, x0));
                fixed::add(
                    &mut s0,
                    &fixed::mul_small(&r2, x0 * x0.saturating_sub(1) / 2),
                );
                let mut s1 = r1;
                fixed::add(&mut s1, &fixed::mul_small(&r2, x0));
                let mut c0 = fixed::sub(&s0, &fixed::mul_small(&r2, k0s));
                fixed::add(&mut c0, &eps2);
                let mut c1 = s1;
                fixed::add(&mut c1, &fixed::mul_small(&r2, k1s));
                // Three products (tmd_phase2).
                let mut g1 = slope;
                signed(&r2, x0 + k1s, k1, &mut g1);
                let mut g0 = b;
                fixed::add(&mut g0, &fixed::mul_small(&slope, x0));
                let up = k0 + x0 * x0.saturating_sub(1) / 2;
                signed(&r2, up, k0s + k1 * x0, &mut g0);
                fixed::add(&mut g0, &fixed::sub(&eps2, &eps1));
                assert_eq!((g0, g1), (c0, c1), "n {n} sub {sub_bits} x0 {x0}");
                // The words phase 3 gets, taken back at a failing subdomain.
                let t1 = fixed::sub(&g1, &fixed::mul_small(&r2, k1s));
                let mut t0 = g0;
                fixed::add(&mut t0, &fixed::mul_small(&r2, k0s));
                assert_eq!((fixed::sub(&t0, &eps2), t1), (s0, s1));
            }
        }
    }
}

/// The screen's error bound on the two-limb walk (docs/error-analysis.md §16): a few units of
/// the top limb with the slacks of a real steep piece, growing with them, and none where `t3`
/// is too large for the kernel's comparisons.
#[test]
fn the_screens_error_bound_is_small_on_steep_pieces() {
    use crate::plan::UnitSpec;
    use crate::search::generation::{generate, GenConfig};
    use crate::{Function, Precision};
    let cfg = GenConfig {
        quadratic: true,
        ..GenConfig::new(44)
    };
    let piece = UnitSpec {
        negative: false,
        exponent: 8,
        first: 1 << 52,
        count: 1 << 34,
    };
    let g = generate(Function::Exp, Precision::BINARY64, &cfg, piece).unwrap();
    assert!(g.quadratic && g.limbs > 2);
    let p = piece::top_walk_packet(&g, gpu_packet(g.domains, g.quadratic));
    let slack = |t: &[rug::Integer]| walk_slack(t.len(), p - 1).unwrap();
    let (b, s, r) = (slack(&g.walk_b), slack(&g.walk_slope), slack(&g.walk_r2));
    assert_eq!(piece::screen_error(&g, 0, 0, 0), Some(2));
    let e = piece::screen_error(&g, b, s, r).unwrap();
    assert!((2..16).contains(&e), "{e}");
    // r2's error is multiplied by about 3 N^2 / 2 = 2^25.6: 2^40 of slack moves the top limb.
    assert!(piece::screen_error(&g, b, s, 1 << 40).unwrap() > e);
    let big_t3 = Generated { t3: 1 << 62, ..g };
    assert_eq!(piece::screen_error(&big_t3, b, s, r), None);
}
