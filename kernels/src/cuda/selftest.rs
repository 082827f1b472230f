//! The GPU self-test: known-answer checks of the arithmetic the kernels rely on, and whole
//! pieces against the CPU back end, run before a device is trusted with work.

use super::{
    launch_config, packet_for, run_piece_in, word_limbs, work_words_per_domain, Cuda, CudaError,
    Device, MemoryBudget, Shares, Slot,
};
use crate::search::backend::PieceOutcome;
use crate::search::existence::{self, quadratic, Test};
use crate::search::generation::Generated;
use cudarc::driver::PushKernelArg;
use rayon::prelude::*;
use rug::Integer;
use std::sync::OnceLock;

/// One known-answer check of the self-test.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub cases: u64,
    pub failures: u64,
    /// The first differing case, for the message.
    pub first_failure: Option<String>,
}

impl Check {
    pub fn passed(&self) -> bool {
        self.failures == 0 && self.cases > 0
    }
}

/// The self-test of one device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub device: usize,
    pub name: String,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(Check::passed)
    }
}

/// splitmix64: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// A number with a random bit length, or near the edges of the 64-bit range.
    fn edgy(&mut self) -> u64 {
        match self.below(6) {
            0 => self.next(),
            1 => self.next() >> self.below(64),
            2 => u64::MAX - self.below(1 << 20),
            3 => self.below(1 << 20),
            4 => (1u64 << self.below(64))
                .wrapping_add(self.below(3))
                .wrapping_sub(1),
            _ => self.next() | 0xffff_ffff_0000_0000,
        }
    }
}

/// `a` close to a rational with a small denominator: large partial quotients.
fn adversarial_a(rng: &mut Rng) -> u64 {
    let den = 1 + rng.below(63);
    let num = rng.below(den);
    let base = ((num as u128) << 64) / den as u128;
    let spread = rng.below(40);
    let jitter = (rng.below(1 << spread) as i128) - (rng.below(1 << 20) as i128);
    (base as i128 + jitter).rem_euclid(1i128 << 64) as u64
}

fn record(name: &str, diffs: impl Iterator<Item = Option<String>>, cases: u64) -> Check {
    let mut failures = 0;
    let mut first_failure = None;
    for msg in diffs.flatten() {
        failures += 1;
        first_failure.get_or_insert(msg);
    }
    tracing::info!(check = name, cases, failures, "self-test check");
    Check {
        name: name.to_string(),
        cases,
        failures,
        first_failure,
    }
}

/// Known-answer tests of the GPU arithmetic the kernels rely on, against the CPU: 64-bit
/// products, quotients and remainders by the kernels' method, multi-limb carry chains at
/// several widths, exact binomials, both existence tests and `flat` on random and adversarial
/// inputs, and whole pieces against the CPU back end. The daemon refuses a device whose report
/// does not pass. This opens the device on its own, with the default memory budget, while the
/// CPU computes its side ([`Reference`]); the daemon tests the devices of its own back end
/// instead ([`Cuda::selftest`]).
pub fn selftest(device: usize) -> Result<Report, CudaError> {
    let reference = OnceLock::new();
    std::thread::scope(|s| {
        s.spawn(|| reference.get_or_init(Reference::compute));
        Cuda::new(&[device], MemoryBudget::default())?.selftest(device, &reference)
    })
}

/// The CPU's side of the self-test that does not depend on the device: the existence tests'
/// inputs and answers and the whole pieces with the CPU back end's outcomes. Computing it
/// takes most of the self-test's time (about 0.25 s on 16 cores), so the daemon computes it
/// while the devices open, once for all of them: each device's test takes it from a
/// `OnceLock` that a thread started beforehand fills (`get_or_init` waits for that thread
/// rather than computing it twice).
pub struct Reference {
    tests: TestsReference,
    pieces: Vec<PieceReference>,
}

pub(super) struct TestsReference {
    pub(super) a: Vec<u64>,
    pub(super) b: Vec<u64>,
    pub(super) n: Vec<u64>,
    pub(super) e: Vec<u64>,
    /// The CPU's regular, Lefevre and flat answers of each case.
    pub(super) want: Vec<[u32; 3]>,
    /// The CPU's quadratic screen of each case with nothing flagged: its answer (0 clear, 1
    /// fail), how many hits it visited and their sum mod 2^64.
    pub(super) want_screen: Vec<[u64; 3]>,
}

struct PieceReference {
    name: String,
    test: Test,
    /// The generated piece and the CPU back end's outcome, or why generation failed.
    piece: Result<(Generated, PieceOutcome), String>,
}

impl Reference {
    pub fn compute() -> Reference {
        let (tests, pieces) = rayon::join(tests_reference, pieces_reference);
        Reference { tests, pieces }
    }
}

/// Inputs of both existence tests and the flat shortcut, with the CPU's answers.
pub(super) fn tests_reference() -> TestsReference {
    // Its own stream, independent of the device's: computed before any device is open.
    let mut rng = Rng(0x7d2016 ^ 0xe715_7e57);
    let n = 1 << 17;
    let mut a = Vec::with_capacity(n);
    let mut bv = Vec::with_capacity(n);
    let mut nv = Vec::with_capacity(n);
    let mut ev = Vec::with_capacity(n);
    for i in 0..n {
        let len = match i % 5 {
            0 => 1 + rng.below(16),
            1 => 16 + rng.below(496),
            2 => 1 << rng.below(13),
            3 => 512 + rng.below(3584),
            // Up to the largest domains (2^30 at most, 2^15 by default). Not beyond: where
            // q divides p, Lefevre's test advances u by v per iteration, linear in N.
            _ => 1 + rng.below(1 << 20),
        };
        let x = match i % 6 {
            0 => rng.next(),
            1 | 5 => adversarial_a(&mut rng),
            2 => rng.below(1 << 20),
            3 => u64::MAX - rng.below(1 << 20),
            _ => rng.next() >> rng.below(63),
        };
        let y = match i % 3 {
            0 => rng.next(),
            1 => rng.below(1 << 30),
            _ => u64::MAX - rng.below(1 << 30),
        };
        // A threshold at the true minimum where brute force is cheap: wrong answers show.
        // (The minimum only steers the thresholds; it is not an expected answer.)
        let e = if len <= 4096 && i % 2 == 0 {
            let m = existence::brute_force_min(x, y, len);
            match i % 8 {
                0 => m,
                2 => m.saturating_add(1),
                4 => m.saturating_sub(rng.below(1000)),
                _ => m.saturating_sub(1),
            }
        } else {
            rng.next() >> rng.below(64)
        };
        a.push(x);
        bv.push(y);
        nv.push(len);
        ev.push(e);
    }
    // The CPU's answers on every core: sequentially they took over a second of every
    // daemon's start-up.
    let want: Vec<[u32; 3]> = (0..n)
        .into_par_iter()
        .map(|i| {
            let flat = match existence::flat(a[i], bv[i], nv[i], ev[i]) {
                None => 2,
                Some(x) => x as u32,
            };
            [
                existence::regular(a[i], bv[i], nv[i], ev[i]) as u32,
                existence::lefevre(a[i], bv[i], nv[i], ev[i]) as u32,
                flat,
            ]
        })
        .collect();
    let want_screen: Vec<[u64; 3]> = (0..n)
        .into_par_iter()
        .map(|i| {
            let (mut count, mut sum) = (0u64, 0u64);
            let clear = quadratic::screen(a[i], bv[i], nv[i], ev[i], |x| {
                count += 1;
                sum = sum.wrapping_add(x);
                false
            });
            [!clear as u64, count, sum]
        })
        .collect();
    TestsReference {
        a,
        b: bv,
        n: nv,
        e: ev,
        want,
        want_screen,
    }
}

/// The whole pieces of the self-test, generated, with the CPU back end's outcomes.
fn pieces_reference() -> Vec<PieceReference> {
    [
        (
            crate::Function::Exp,
            24u32,
            16u32,
            1u64 << 23,
            20u32,
            Test::Regular,
        ),
        (crate::Function::Log, 24, 16, 3 << 22, 20, Test::Lefevre),
        (crate::Function::Sin, 20, 14, 1 << 19, 16, Test::Regular),
        // Words of 3 limbs: phase 1 walks their top two limbs (tmd_phase1_top).
        (
            crate::Function::Exp,
            53,
            32,
            (1 << 52) + (1 << 50),
            30,
            Test::Regular,
        ),
    ]
    .into_par_iter()
    .map(|(function, bits, min_bits, first, unit_bits, test)| {
        let name = format!(
            "{} p={bits} k={min_bits} [{first:#x}, +2^{unit_bits}) {}: phases 1-3 vs CPU",
            function.name(),
            test.name()
        );
        let piece = crate::Precision::new(bits)
            .map_err(|e| e.to_string())
            .and_then(|p| {
                let unit = crate::plan::UnitSpec {
                    negative: false,
                    exponent: 0,
                    first,
                    count: 1 << unit_bits,
                };
                let gen = crate::search::generation::GenConfig::new(min_bits);
                crate::search::generation::generate(function, p, &gen, unit)
                    .map_err(|e| format!("generation: {e}"))
            })
            .map(|g| {
                let cpu = crate::search::phases::search_generated_cpu(&g, test, 1024);
                (g, cpu)
            });
        PieceReference { name, test, piece }
    })
    .collect()
}

/// Every module the self-test uses, compiled (or taken from the disk cache) and loaded at once
/// before its first check: the words' widths at degree 2 from the start, while the CPU
/// computes the reference, then the whole pieces' modules, which the reference's generation
/// names. One after another, the dozen modules took most of a fresh machine's 41 s start.
fn prepare(dev: &Device, reference: &OnceLock<Reference>) -> Result<(), CudaError> {
    std::thread::scope(|s| {
        let words = s.spawn(|| dev.prepare(&(1..=8).map(|limbs| (limbs, 2)).collect::<Vec<_>>()));
        let pieces: Vec<(usize, usize)> = reference
            .get_or_init(Reference::compute)
            .pieces
            .iter()
            .filter_map(|p| p.piece.as_ref().ok())
            .map(|(g, _)| (g.limbs, g.degree))
            .collect();
        let pieces = dev.prepare(&pieces);
        let words = words
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        words.and(pieces)
    })
}

/// The self-test of `dev`, one of `cuda`'s devices, against `reference` (computed here if no
/// one has yet). Memory: the whole pieces run in the device's own slots, within its budget
/// (`--gpu-memory`); the known-answer checks before them hold at most about 6 MiB at a time
/// (the existence tests' 2^17 cases), freed before the first slot is made, and the tiny slot of
/// the chunked runs a few KiB.
///
/// Long (about 320 lines): the known-answer checks one after the other, each a block on the
/// same stream, generator and modules, in the order a failure is easiest to read (products,
/// divisions, words, binomials, the existence tests, whole pieces); not split yet because only
/// the device runs it.
pub(super) fn run(
    cuda: &Cuda,
    dev: &Device,
    reference: &OnceLock<Reference>,
) -> Result<Report, CudaError> {
    let device = dev.ordinal;
    prepare(dev, reference)?;
    let stream = dev.ctx.new_stream()?;
    let mut checks = Vec::new();
    let mut rng = Rng(0x7d2016 + device as u64);
    let m8 = dev.module(8, 2)?;

    // 64-bit products.
    {
        let n = 1 << 16;
        let x: Vec<u64> = (0..n).map(|_| rng.edgy()).collect();
        let y: Vec<u64> = (0..n).map(|_| rng.edgy()).collect();
        let dx = stream.clone_htod(&x)?;
        let dy = stream.clone_htod(&y)?;
        let mut lo = stream.alloc_zeros::<u64>(n)?;
        let mut hi = stream.alloc_zeros::<u64>(n)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.mul);
        b.arg(&dx).arg(&dy).arg(&mut lo).arg(&mut hi).arg(&count);
        // SAFETY: tmd_selftest_mul(x, y, lo, hi, n) with four lists of n entries.
        unsafe { b.launch(launch_config(count)?) }?;
        let (lo, hi) = (stream.clone_dtoh(&lo)?, stream.clone_dtoh(&hi)?);
        stream.synchronize()?;
        checks.push(record(
            "64-bit multiply (low and high halves)",
            (0..n).map(|i| {
                let p = x[i] as u128 * y[i] as u128;
                (lo[i] != p as u64 || hi[i] != (p >> 64) as u64).then(|| {
                    format!(
                        "{:#x} * {:#x}: got hi {:#x} lo {:#x}",
                        x[i], y[i], hi[i], lo[i]
                    )
                })
            }),
            n as u64,
        ));
    }

    // Quotients and remainders through the kernels' divrem.
    {
        let n = 1 << 16;
        let mut x = Vec::with_capacity(n);
        let mut y = Vec::with_capacity(n);
        for i in 0..n {
            let (a, d) = match i % 5 {
                // small quotients: the subtraction path
                0 => {
                    let d = rng.edgy().max(1);
                    (
                        d.saturating_mul(rng.below(4)).saturating_add(rng.below(d)),
                        d,
                    )
                }
                1 => (rng.edgy(), rng.edgy().max(1)),
                2 => (rng.next(), 1 + rng.below(1 << 12)),
                // quotients around the float estimate's range (2^20), remainders at the edges
                3 => {
                    let d = (rng.next() >> rng.below(64)).max(1);
                    let k = rng.below(1 << 22);
                    let r = if rng.below(2) == 0 {
                        d - 1
                    } else {
                        rng.below(d)
                    };
                    match k.checked_mul(d).and_then(|x| x.checked_add(r)) {
                        Some(x) => (x, d),
                        None => (u64::MAX, d),
                    }
                }
                _ => (u64::MAX - rng.below(4), rng.edgy().max(1)),
            };
            x.push(a);
            y.push(d);
        }
        let dx = stream.clone_htod(&x)?;
        let dy = stream.clone_htod(&y)?;
        let mut q = stream.alloc_zeros::<u64>(n)?;
        let mut r = stream.alloc_zeros::<u64>(n)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.div);
        b.arg(&dx).arg(&dy).arg(&mut q).arg(&mut r).arg(&count);
        // SAFETY: tmd_selftest_div(x, y, q, r, n) with four lists of n entries, y > 0.
        unsafe { b.launch(launch_config(count)?) }?;
        let (q, r) = (stream.clone_dtoh(&q)?, stream.clone_dtoh(&r)?);
        stream.synchronize()?;
        checks.push(record(
            "64-bit division and remainder (subtraction, float estimate + correction, hardware)",
            (0..n).map(|i| {
                (q[i] != x[i] / y[i] || r[i] != x[i] % y[i])
                    .then(|| format!("{:#x} / {:#x}: got q {:#x} r {:#x}", x[i], y[i], q[i], r[i]))
            }),
            n as u64,
        ));
    }

    // Multi-limb words: carry chains at each width the kernels are built for.
    for limbs in 1..=8usize {
        let m = dev.module(limbs, 2)?;
        let n = 1 << 13;
        let mut a = Vec::with_capacity(n * limbs);
        let mut bw = Vec::with_capacity(n * limbs);
        let mut mul = Vec::with_capacity(n);
        for i in 0..n {
            for _ in 0..limbs {
                // Runs of all-ones limbs make carries ripple through the whole word.
                let (x, y) = match i % 3 {
                    0 => (u64::MAX, if rng.below(2) == 0 { 1 } else { rng.edgy() }),
                    1 => (rng.edgy(), rng.edgy()),
                    _ => (rng.below(2), u64::MAX - rng.below(2)),
                };
                a.push(x);
                bw.push(y);
            }
            mul.push(rng.edgy());
        }
        let da = stream.clone_htod(&a)?;
        let db = stream.clone_htod(&bw)?;
        let dm = stream.clone_htod(&mul)?;
        let stride = 4 * limbs + 3;
        let mut o = stream.alloc_zeros::<u64>(n * stride)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m.words);
        b.arg(&da).arg(&db).arg(&dm).arg(&mut o).arg(&count);
        // SAFETY: tmd_selftest_words(a, b, m, out, n) for this module's L = limbs: a and b
        // hold n words of L limbs, m n entries, out n (4 L + 3) entries.
        unsafe { b.launch(launch_config(count)?) }?;
        let o = stream.clone_dtoh(&o)?;
        stream.synchronize()?;
        let modulus = Integer::from(1) << (64 * limbs as u32);
        let to_int = |w: &[u64]| Integer::from_digits(w, rug::integer::Order::Lsf);
        checks.push(record(
            &format!("{limbs}-limb add, sub, multiply, carries and 64-bit reads"),
            (0..n).map(|i| {
                let wa = &a[i * limbs..(i + 1) * limbs];
                let wb = &bw[i * limbs..(i + 1) * limbs];
                let (ia, ib) = (to_int(wa), to_int(wb));
                let got = &o[i * stride..(i + 1) * stride];
                let want_words = [
                    Integer::from(&ia + &ib) % &modulus,
                    Integer::from(&ia - &ib).keep_bits(64 * limbs as u32),
                    Integer::from(&ia * mul[i]) % &modulus,
                    Integer::from(&ia * &ib) % &modulus,
                ];
                let low_nonzero = wa[..limbs - 1].iter().any(|&x| x != 0);
                let top = wa[limbs - 1];
                let want_reads = [
                    top,
                    top.wrapping_add(low_nonzero as u64),
                    if low_nonzero {
                        !top
                    } else {
                        top.wrapping_neg()
                    },
                ];
                let ok = want_words
                    .iter()
                    .enumerate()
                    .all(|(f, w)| word_limbs(w, limbs) == got[f * limbs..(f + 1) * limbs])
                    && got[4 * limbs..] == want_reads;
                (!ok).then(|| format!("a={wa:x?} b={wb:x?} m={:#x}: got {got:x?}", mul[i]))
            }),
            n as u64,
        ));
    }

    // Exact binomials C(i0, m), m <= 12, i0 < 2^40.
    {
        let n = 1 << 12;
        let i0: Vec<u64> = (0..n)
            .map(|i| match i % 3 {
                0 => rng.below(1 << 40),
                1 => rng.below(20),
                _ => (1u64 << 40) - 1 - rng.below(1 << 10),
            })
            .collect();
        let di = stream.clone_htod(&i0)?;
        let mut o = stream.alloc_zeros::<u64>(n * 13 * 8)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.binomial);
        b.arg(&di).arg(&mut o).arg(&count);
        // SAFETY: tmd_selftest_binomial(i0, out, n): n inputs, n * 13 * 8 outputs.
        unsafe { b.launch(launch_config(count)?) }?;
        let o = stream.clone_dtoh(&o)?;
        stream.synchronize()?;
        checks.push(record(
            "exact binomials C(i, m) for i < 2^40, m <= 12 (512-bit division by m)",
            (0..n).map(|j| {
                (0..13u32).find_map(|m| {
                    let want = word_limbs(&Integer::from(i0[j]).binomial(m), 8);
                    let got = &o[(j * 13 + m as usize) * 8..(j * 13 + m as usize + 1) * 8];
                    (want != got).then(|| format!("C({}, {m}): got {got:x?}", i0[j]))
                })
            }),
            n as u64 * 13,
        ));
    }

    // Both existence tests and the flat shortcut, exactly as the CPU answers.
    let reference = reference.get_or_init(Reference::compute);
    {
        let TestsReference {
            a,
            b: bv,
            n: nv,
            e: ev,
            want,
            want_screen,
        } = &reference.tests;
        let n = a.len();
        let (da, db) = (stream.clone_htod(a)?, stream.clone_htod(bv)?);
        let (dn, de) = (stream.clone_htod(nv)?, stream.clone_htod(ev)?);
        let mut o = stream.alloc_zeros::<u32>(3 * n)?;
        let mut hits = stream.alloc_zeros::<u64>(3 * n)?;
        let count = n as u64;
        let mut b = stream.launch_builder(&m8.tests);
        b.arg(&da)
            .arg(&db)
            .arg(&dn)
            .arg(&de)
            .arg(&mut o)
            .arg(&mut hits)
            .arg(&count);
        // SAFETY: tmd_selftest_tests(a, b, n, e, out, hits, count): four inputs of count
        // entries, 3 count u32 and 3 count u64 outputs.
        unsafe { b.launch(launch_config(count)?) }?;
        let o = stream.clone_dtoh(&o)?;
        let hits = stream.clone_dtoh(&hits)?;
        stream.synchronize()?;
        let show = |i: usize| format!("a={:#x} b={:#x} n={} e={:#x}", a[i], bv[i], nv[i], ev[i]);
        for (j, name) in [
            "regular existence test (with the capped last quotient) vs CPU",
            "Lefevre existence test vs CPU",
            "flat-line shortcut vs CPU",
        ]
        .into_iter()
        .enumerate()
        {
            checks.push(record(
                name,
                (0..n).map(|i| {
                    (o[3 * i + j] != want[i][j]).then(|| format!("{}: cpu {}", show(i), want[i][j]))
                }),
                n as u64,
            ));
        }
        checks.push(record(
            "quadratic screen's hits (answer, count, sum) vs CPU",
            (0..n).map(|i| {
                let got = &hits[3 * i..3 * i + 3];
                (got != want_screen[i])
                    .then(|| format!("{}: cpu {:?}, gpu {got:?}", show(i), want_screen[i]))
            }),
            n as u64,
        ));
    }

    // Whole pieces: statistics and candidates against the CPU back end.
    for PieceReference { name, test, piece } in &reference.pieces {
        let (name, test) = (name.clone(), *test);
        match piece {
            Ok((g, cpu)) => {
                let gpu = cuda.run_piece(dev, g, test)?;
                // The same piece in lists a few entries long: phase 1 in many packet ranges,
                // phases 2-3 in many batches and candidate ranges, as a unit with far more
                // failures than its budget holds would run.
                let kappa_bits = g.domain_bits - g.sub_bits;
                let mut tiny = Slot::new(&dev.ctx, 0, dev.gauge.clone())?;
                tiny.shares = Shares {
                    index: 2 * packet_for(g),
                    work: 3 * work_words_per_domain(g.limbs as u64, kappa_bits),
                    candidates: 1 << g.sub_bits,
                };
                let chunked = run_piece_in(dev, &mut tiny, g, test)?;
                let mut runs = vec![("", gpu), (", in a tiny slot", chunked)];
                if g.limbs > 2 {
                    // The two-limb walk with a slack far above its bound: many domains from
                    // exact words (2^-12 of them), then more than the list holds (a quarter:
                    // the range runs again with the exact walk).
                    // In one of the device's own slots (its budget), given back with no floor.
                    for (floor, what) in [
                        (1u64 << 52, ", undecided domains from exact words"),
                        (1u64 << 62, ", undecided domains overflowing their list"),
                    ] {
                        let mut taken = dev.pool.take(&dev.ctx, &dev.gauge)?;
                        let slot = taken.slot.as_mut().expect("a taken slot");
                        slot.slack_floor = floor;
                        let got = run_piece_in(dev, slot, g, test);
                        slot.slack_floor = 0;
                        runs.push((what, got?));
                    }
                }
                for (what, got) in runs {
                    let same = cpu.stats == got.stats && cpu.candidates == got.candidates;
                    let name = format!("{name}{what}");
                    tracing::info!(check = %name, same, stats = ?got.stats, "self-test check");
                    checks.push(Check {
                        first_failure: (!same).then(|| {
                            format!(
                                "cpu {:?} {} candidates, gpu {:?} {} candidates",
                                cpu.stats,
                                cpu.candidates.len(),
                                got.stats,
                                got.candidates.len()
                            )
                        }),
                        name,
                        cases: 1,
                        failures: (!same) as u64,
                    });
                }
            }
            Err(e) => checks.push(Check {
                name,
                cases: 0,
                failures: 1,
                first_failure: Some(e.clone()),
            }),
        }
    }
    Ok(Report {
        device,
        name: dev.name.clone(),
        checks,
    })
}
