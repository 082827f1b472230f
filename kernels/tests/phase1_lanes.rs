//! Phases 1 and 2 with the regular test in lanes list the same failing domains and subdomains,
//! with the same words, as a domain-by-domain walk and a subdomain-by-subdomain loop with the
//! scalar test.

use tmd_kernels::numbers::fixed::{self, Word};
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::existence::{self, Test};
use tmd_kernels::search::generation::{generate, GenConfig, Generated};
use tmd_kernels::search::phases::{
    domain_polynomial, packet_state, phase1_packet, phase2_domains, subdomain_line, FailedDomain,
    LineOffsets,
};
use tmd_kernels::search::Stats;
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

/// The failing subdomains of `d` as `(start, len, s0, s1)`, one test at a time (each
/// subdomain's line from `phases::subdomain_line`, as phase 2 builds it: what is compared is the
/// lanes' test and the order of the list).
fn reference2<const L: usize>(
    g: &Generated,
    d: &FailedDomain<L>,
) -> Vec<(u64, u64, Word<L>, Word<L>)> {
    let offsets = LineOffsets::<L>::new(g);
    let r = domain_polynomial(g, &offsets, d);
    let n_sub = 1u64 << g.sub_bits;
    let len = g.domain_len(d.index);
    let mut out = Vec::new();
    for x0 in (0..len).step_by(n_sub as usize) {
        let (s0, s1, a, b) = subdomain_line(g, &r, &offsets.eps2, x0);
        let n = n_sub.min(len - x0);
        if !existence::regular(a, b, n, g.e2) {
            out.push((d.index * g.domain_size() + x0, n, s0, s1));
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
    // The line test's lanes: [1, 2) takes the quadratic screen by default.
    let cfg = GenConfig {
        quadratic: false,
        ..GenConfig::new(min_bits)
    };
    let g = generate(Function::Exp, Precision::BINARY64, &cfg, piece).unwrap();
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
        // Phase 2 on the packet's failures, in chunks as the CPU back end cuts them.
        let offsets = LineOffsets::<L>::new(g);
        for chunk in got.chunks(7) {
            let domains: Vec<FailedDomain<L>> = chunk
                .iter()
                .map(|&(index, b, slope, r2)| FailedDomain {
                    index,
                    b,
                    slope,
                    r2,
                })
                .collect();
            let (mut stats, mut subs) = (Stats::default(), Vec::new());
            phase2_domains(g, Test::Regular, &offsets, &domains, &mut stats, &mut subs);
            let subs: Vec<_> = subs.iter().map(|s| (s.start, s.len, s.s0, s.s1)).collect();
            let want: Vec<_> = domains.iter().flat_map(|d| reference2(g, d)).collect();
            assert_eq!(subs, want, "packet {u}");
            assert_eq!(stats.phase2_failures, want.len() as u64);
        }
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
