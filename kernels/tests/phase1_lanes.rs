//! Phase 1 with the regular test in lanes lists the same failing domains, with the same words,
//! as a domain-by-domain walk with the scalar test.

use tmd_kernels::existence::{self, Test};
use tmd_kernels::fixed::{self, Word};
use tmd_kernels::generation::{generate, GenConfig, Generated};
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::{packet_state, phase1_packet};
use tmd_kernels::{Function, Precision};

/// The failures of packet `u` as `(index, b, slope, r2)`, domain by domain.
fn reference<const L: usize>(
    g: &Generated,
    u: u64,
    packet: u64,
) -> Vec<(u64, Word<L>, Word<L>, Word<L>)> {
    let (mut wb, mut ws, mut wr) = packet_state::<L>(g, u, packet);
    let mut out = Vec::new();
    for i in u * packet..((u + 1) * packet).min(g.domains) {
        let a = fixed::neg_floor64(&ws[0]);
        let b = fixed::ceil64(&wb[0]);
        if !existence::regular(a, b, g.domain_len(i), g.e1) {
            out.push((i, wb[0], ws[0], wr[0]));
        }
        for w in [&mut wb, &mut ws, &mut wr] {
            for l in 0..w.len() - 1 {
                let next = w[l + 1];
                fixed::add(&mut w[l], &next);
            }
        }
    }
    out
}

fn compare(first: u64, count: u64, min_bits: u32, packet: u64) -> usize {
    let piece = UnitSpec {
        negative: false,
        exponent: 0,
        first,
        count,
    };
    let g = generate(
        Function::Exp,
        Precision::BINARY64,
        &GenConfig::new(min_bits),
        piece,
    )
    .unwrap();
    match g.limbs {
        3 => compare_words::<3>(&g, packet),
        4 => compare_words::<4>(&g, packet),
        5 => compare_words::<5>(&g, packet),
        l => panic!("{l} limbs"),
    }
}

fn compare_words<const L: usize>(g: &Generated, packet: u64) -> usize {
    let mut failures = 0;
    for u in 0..g.domains.div_ceil(packet).min(48) {
        let mut got = Vec::new();
        phase1_packet::<L>(g, Test::Regular, u, packet, &mut got);
        let got: Vec<_> = got.iter().map(|d| (d.index, d.b, d.slope, d.r2)).collect();
        assert_eq!(got, reference::<L>(g, u, packet), "packet {u}");
        failures += got.len();
    }
    failures
}

#[test]
fn phase1_in_lanes_lists_the_scalar_failures() {
    // The first unit of exp on [1, 2) and one near ln 4, where most domains fail; packets
    // that are not a multiple of the lanes, and a short last domain.
    let f1 = compare(1 << 52, 1 << 40, 32, 4096);
    let f2 = compare((1 << 52) + (0x62d << 40), 1 << 40, 32, 1000);
    let f3 = compare(1 << 52, (1 << 24) + 12345, 44, 37);
    assert!(f1 > 0 && f2 > 0, "no failures to compare: {f1} {f2} {f3}");
}
