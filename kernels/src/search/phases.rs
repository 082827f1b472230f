//! The CPU's phases 1-3 of a generated piece, generic over the word width: plain functions on
//! fixed-size words (`phase1_packet`, `phase2_domains`, `phase3_subdomain`) that the CPU back end
//! (`Cpu`) runs over rayon, and that the CUDA kernels in `kernels/cuda/` mirror with identical
//! answers.

use crate::numbers::fixed::{self, Word};
use crate::search::backend::{Backend, PieceOutcome, SearchError, Stats};
use crate::search::existence::{self, Test};
use crate::search::generation::Generated;
use crate::search::stripe;
use rayon::prelude::*;
use rug::Integer;
use std::time::Instant;

/// What phase 1 hands to phase 2: a failing domain with its exact line data.
#[derive(Debug, Clone, Copy)]
pub struct FailedDomain<const L: usize> {
    pub index: u64,
    pub b: Word<L>,
    pub slope: Word<L>,
    pub r2: Word<L>,
}

/// What phase 2 hands to phase 3: a failing subdomain's start value and differences.
#[derive(Debug, Clone, Copy)]
pub struct FailedSubdomain<const L: usize> {
    /// Offset of its first argument in the piece.
    pub start: u64,
    pub len: u64,
    pub s0: Word<L>,
    pub s1: Word<L>,
    pub s2: Word<L>,
}

/// The exact start state of packet `u` as words: differences of the three walked polynomials.
pub fn packet_state<const L: usize>(
    g: &Generated,
    u: u64,
    packet_domains: u64,
) -> (Vec<Word<L>>, Vec<Word<L>>, Vec<Word<L>>) {
    let i0 = u * packet_domains;
    let conv = |rho: &[Integer]| -> Vec<Word<L>> {
        Generated::shift(rho, i0)
            .iter()
            .map(fixed::from_integer::<L>)
            .collect()
    };
    (conv(&g.walk_b), conv(&g.walk_slope), conv(&g.walk_r2))
}

/// Phase 1 on one packet: walk the domains, run the test, collect the failures. Only `b` and
/// the slope are walked; `r2`, needed at the failing domains alone (about 1% of them), is
/// evaluated there from the packet's start differences (`fixed::value_at_offset`): a quarter less
/// walking per domain. The regular test runs on `existence::LANES` domains at a time
/// (`stripe::phase1_lanes`: vector lanes where the CPU has them, the same answers and the same
/// list in the same order).
pub fn phase1_packet<const L: usize>(
    g: &Generated,
    test: Test,
    u: u64,
    packet_domains: u64,
    failed: &mut Vec<FailedDomain<L>>,
) {
    if g.quadratic {
        return phase1_screen_packet(g, u, packet_domains, failed);
    }
    let (mut wb, mut ws, wr) = packet_state::<L>(g, u, packet_domains);
    let i0 = u * packet_domains;
    let i1 = (i0 + packet_domains).min(g.domains);
    let fail = |i: u64, b: Word<L>, slope: Word<L>| FailedDomain {
        index: i,
        b,
        slope,
        r2: fixed::value_at_offset(&wr, i - i0)
            .unwrap_or_else(|| fixed::from_integer(&Generated::shift(&g.walk_r2, i)[0])),
    };
    let mut i = i0;
    if test == Test::Regular {
        i = stripe::phase1_lanes(g, i0, i1, &wb, &ws, |i, b, slope| {
            failed.push(fail(i, b, slope))
        });
        if i > i0 && i < i1 {
            // The unit-step tables at `i` for the last domains, exactly.
            let at = |w: &[Word<L>], rho: &[Integer]| -> Vec<Word<L>> {
                (0..w.len())
                    .map(|r| {
                        fixed::value_at_offset(&w[r..], i - i0)
                            .unwrap_or_else(|| fixed::from_integer(&Generated::shift(rho, i)[r]))
                    })
                    .collect()
            };
            (wb, ws) = (at(&wb, &g.walk_b), at(&ws, &g.walk_slope));
        }
    }
    for i in i..i1 {
        let a = fixed::neg_floor64(&ws[0]);
        let b = fixed::ceil64(&wb[0]);
        if !test.run(a, b, g.domain_len(i), g.e1) {
            failed.push(fail(i, wb[0], ws[0]));
        }
        step(&mut wb);
        step(&mut ws);
    }
}

/// Phase 1 on one packet of a screened piece (`g.quadratic`): the three polynomials walked, and
/// each domain's line points within `e1` (`existence::quadratic::screen`) checked against the
/// domain's quadratic as phase 3 checks an argument (`phase3_flags`). A domain fails where one
/// is flagged (or the screen gives up): phase 2 then takes it as a failed line domain.
fn phase1_screen_packet<const L: usize>(
    g: &Generated,
    u: u64,
    packet_domains: u64,
    failed: &mut Vec<FailedDomain<L>>,
) {
    let (mut wb, mut ws, mut wr) = packet_state::<L>(g, u, packet_domains);
    let offsets = LineOffsets::<L>::new(g);
    let i0 = u * packet_domains;
    for i in i0..(i0 + packet_domains).min(g.domains) {
        let d = FailedDomain {
            index: i,
            b: wb[0],
            slope: ws[0],
            r2: wr[0],
        };
        let a = fixed::neg_floor64(&d.slope);
        let b = fixed::ceil64(&d.b);
        let mut poly = None;
        let clear = existence::quadratic::screen(a, b, g.domain_len(i), g.e1, |x| {
            let [r0, r1, r2] = poly.get_or_insert_with(|| domain_polynomial(g, &offsets, &d));
            phase3_flags(g, &quadratic_at(r0, r1, r2, x))
        });
        if !clear {
            failed.push(d);
        }
        step(&mut wb);
        step(&mut ws);
        step(&mut wr);
    }
}

/// `r0 + r1 x + r2 C(x, 2)` mod `2^(64 L)`, exactly.
pub fn quadratic_at<const L: usize>(r0: &Word<L>, r1: &Word<L>, r2: &Word<L>, x: u64) -> Word<L> {
    let mut v = *r0;
    fixed::add(&mut v, &fixed::mul_small(r1, x));
    // x < 2^32 (domains hold at most 2^30 arguments): C(x, 2) fits.
    fixed::add(&mut v, &fixed::mul_small(r2, x * x.saturating_sub(1) / 2));
    v
}

/// Phase 3's condition on one value: its top 64 bits within `t3` of an integer.
#[inline(always)]
pub fn phase3_flags<const L: usize>(g: &Generated, v: &Word<L>) -> bool {
    let top = fixed::floor64(v);
    top <= g.t3 || top >= 0u64.wrapping_sub(g.t3)
}

/// One step of tabulated differences: `Delta^l w += Delta^(l+1) w`, low `l` first.
#[inline(always)]
fn step<const L: usize>(w: &mut [Word<L>]) {
    for l in 0..w.len().saturating_sub(1) {
        let next = w[l + 1];
        fixed::add(&mut w[l], &next);
    }
}

/// The lines' offsets `eps1`, `eps2` of a piece as words: constant over the piece, so converted
/// once rather than for each of its (many) failed domains.
#[derive(Debug, Clone, Copy)]
pub struct LineOffsets<const L: usize> {
    pub eps1: Word<L>,
    pub eps2: Word<L>,
}

impl<const L: usize> LineOffsets<L> {
    pub fn new(g: &Generated) -> LineOffsets<L> {
        LineOffsets {
            eps1: fixed::from_integer::<L>(&g.bounds.eps1),
            eps2: fixed::from_integer::<L>(&g.bounds.eps2),
        }
    }
}

/// The exact `r0, r1, r2` of a failed domain from its walked line data.
pub fn domain_polynomial<const L: usize>(
    g: &Generated,
    offsets: &LineOffsets<L>,
    d: &FailedDomain<L>,
) -> [Word<L>; 3] {
    let r2 = d.r2;
    let r1 = fixed::sub(&d.slope, &fixed::mul_small(&r2, g.k1));
    let mut r0 = fixed::sub(&d.b, &offsets.eps1);
    fixed::add(&mut r0, &fixed::mul_small(&r2, g.k0));
    [r0, r1, r2]
}

/// The subdomain of a failed domain (polynomial `[r0, r1, r2]`) that starts at offset `x0`: its
/// start differences `s0`, `s1` (`P(x0 + y) = s0 + s1 y + r2 C(y, 2)`, for phase 3) and its own
/// line's `a`, `b` for the existence test (threshold `g.e2`).
pub fn subdomain_line<const L: usize>(
    g: &Generated,
    [r0, r1, r2]: &[Word<L>; 3],
    eps2: &Word<L>,
    x0: u64,
) -> (Word<L>, Word<L>, u64, u64) {
    let mut s0 = *r0;
    fixed::add(&mut s0, &fixed::mul_small(r1, x0));
    fixed::add(
        &mut s0,
        &fixed::mul_small(r2, x0 * x0.saturating_sub(1) / 2),
    );
    let mut s1 = *r1;
    fixed::add(&mut s1, &fixed::mul_small(r2, x0));
    let mut c0 = fixed::sub(&s0, &fixed::mul_small(r2, g.k0_sub));
    fixed::add(&mut c0, eps2);
    let mut c1 = s1;
    fixed::add(&mut c1, &fixed::mul_small(r2, g.k1_sub));
    (s0, s1, fixed::neg_floor64(&c1), fixed::ceil64(&c0))
}

/// Phase 2 on failed domains: the test on each subdomain with its own line. The regular test
/// runs on `existence::LANES` subdomains at a time (of one or more domains, in order); the
/// failures are listed in domain and subdomain order as before.
pub fn phase2_domains<const L: usize>(
    g: &Generated,
    test: Test,
    offsets: &LineOffsets<L>,
    domains: &[FailedDomain<L>],
    stats: &mut Stats,
    failed: &mut Vec<FailedSubdomain<L>>,
) {
    let eps2 = offsets.eps2;
    let n_sub = 1u64 << g.sub_bits;
    // Subdomains waiting for the test, with their `a` and `b`.
    let mut batch = Vec::with_capacity(existence::LANES);
    let mut flush = |batch: &mut Vec<(u64, u64, FailedSubdomain<L>)>| {
        let len = batch.first().map_or(0, |s| s.2.len);
        let pass = if test == Test::Regular
            && batch.len() == existence::LANES
            && batch.iter().all(|s| s.2.len == len)
        {
            let a = std::array::from_fn(|j| batch[j].0);
            let b = std::array::from_fn(|j| batch[j].1);
            existence::regular_lanes(&a, &b, len, g.e2)
        } else {
            let run = |(j, s): (usize, &(u64, u64, FailedSubdomain<L>))| {
                (test.run(s.0, s.1, s.2.len, g.e2) as u32) << j
            };
            batch.iter().enumerate().map(run).fold(0, |m, r| m | r)
        };
        stats.subdomains += batch.len() as u64;
        for (j, (_, _, s)) in batch.drain(..).enumerate() {
            if pass >> j & 1 == 0 {
                stats.phase2_failures += 1;
                failed.push(s);
            }
        }
    };
    for d in domains {
        let [r0, r1, r2] = domain_polynomial(g, offsets, d);
        let dom_start = d.index * g.domain_size();
        let dom_len = g.domain_len(d.index);
        let mut x0 = 0u64;
        while x0 < dom_len {
            let (s0, s1, a, b) = subdomain_line(g, &[r0, r1, r2], &eps2, x0);
            let sub = FailedSubdomain {
                start: dom_start + x0,
                len: n_sub.min(dom_len - x0),
                s0,
                s1,
                s2: r2,
            };
            batch.push((a, b, sub));
            if batch.len() == existence::LANES {
                flush(&mut batch);
            }
            x0 += n_sub;
        }
    }
    flush(&mut batch);
}

/// Phase 3 on one failed subdomain: every argument, exactly; returns candidate offsets.
pub fn phase3_subdomain<const L: usize>(
    g: &Generated,
    s: &FailedSubdomain<L>,
    candidates: &mut Vec<u64>,
) {
    let (mut v, mut d) = (s.s0, s.s1);
    for y in 0..s.len {
        if phase3_flags(g, &v) {
            candidates.push(s.start + y);
        }
        fixed::add(&mut v, &d);
        fixed::add(&mut d, &s.s2);
    }
}

/// The CPU back end: rayon over packets.
pub struct Cpu;

impl Backend for Cpu {
    fn search_piece(
        &self,
        g: &Generated,
        test: Test,
        packet_domains: u64,
    ) -> Result<PieceOutcome, SearchError> {
        Ok(search_generated_cpu(g, test, packet_domains))
    }

    fn name(&self) -> String {
        // Whether the regular test and the walk run in AVX-512 lanes matters for speed (about
        // 2x), so it is in the name every search, bench and daemon prints.
        let lanes = if existence::simd_available() {
            "AVX-512"
        } else {
            "scalar"
        };
        format!("cpu ({} threads, {lanes})", rayon::current_num_threads())
    }
}

/// Phases 1-3 of a generated piece on the CPU, all cores.
pub fn search_generated_cpu(g: &Generated, test: Test, packet_domains: u64) -> PieceOutcome {
    macro_rules! dispatch {
        ($($l:literal),*) => {
            match g.limbs {
                $($l => search_generated_cpu_l::<$l>(g, test, packet_domains),)*
                other => unreachable!("{other} limbs"),
            }
        };
    }
    dispatch!(1, 2, 3, 4, 5, 6, 7, 8)
}

fn search_generated_cpu_l<const L: usize>(
    g: &Generated,
    test: Test,
    packet_domains: u64,
) -> PieceOutcome {
    let mut out = PieceOutcome::default();
    out.stats.domains = g.domains;
    out.stats.pieces = 1;
    let packets = g.domains.div_ceil(packet_domains);

    let t = Instant::now();
    let failed: Vec<FailedDomain<L>> = (0..packets)
        .into_par_iter()
        .flat_map_iter(|u| {
            let mut f = Vec::new();
            phase1_packet::<L>(g, test, u, packet_domains, &mut f);
            f
        })
        .collect();
    out.timings.phase1_s = t.elapsed().as_secs_f64();
    out.stats.phase1_failures = failed.len() as u64;

    let t = Instant::now();
    let offsets = LineOffsets::<L>::new(g);
    let (sub_stats, subs): (Stats, Vec<FailedSubdomain<L>>) = failed
        .par_chunks(256)
        .map(|chunk| {
            let mut st = Stats::default();
            let mut subs = Vec::new();
            phase2_domains(g, test, &offsets, chunk, &mut st, &mut subs);
            (st, subs)
        })
        .reduce(
            || (Stats::default(), Vec::new()),
            |(mut s1, mut v1), (s2, v2)| {
                s1.add(&s2);
                v1.extend(v2);
                (s1, v1)
            },
        );
    out.timings.phase2_s = t.elapsed().as_secs_f64();
    out.stats.subdomains = sub_stats.subdomains;
    out.stats.phase2_failures = sub_stats.phase2_failures;

    let t = Instant::now();
    let mut candidates: Vec<u64> = subs
        .par_iter()
        .flat_map_iter(|s| {
            let mut c = Vec::new();
            phase3_subdomain(g, s, &mut c);
            c
        })
        .collect();
    candidates.sort_unstable();
    out.timings.phase3_s = t.elapsed().as_secs_f64();
    out.stats.phase3_arguments = subs.iter().map(|s| s.len).sum();
    out.stats.candidates = candidates.len() as u64;
    out.candidates = candidates;
    out
}
