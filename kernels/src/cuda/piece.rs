//! One piece on the device: its constant inputs, the launches of phases 1-3 and their
//! argument lists, within the lists of one slot (split from `mod.rs`).

use super::*;
use cudarc::driver::{CudaView, CudaViewMut};

pub(super) fn check_supported(g: &Generated) -> Result<(), CudaError> {
    if g.degree > MAX_DEGREE || g.degree == 0 {
        return Err(CudaError::Unsupported(format!("degree {}", g.degree)));
    }
    if g.domains > MAX_DOMAINS {
        return Err(CudaError::Unsupported(format!("{} domains", g.domains)));
    }
    if g.domain_bits >= 32 || g.sub_bits > g.domain_bits {
        return Err(CudaError::Unsupported(format!(
            "domains of 2^{}, subdomains of 2^{}",
            g.domain_bits, g.sub_bits
        )));
    }
    // tmd_phase2 gathers the integer factors of r2 into single u64 factors, which needs these
    // bounds (generation sets K0 = 2^(2n - 4) <= 2^58 and K1 = 2^(n - 1) - 1 for n < 32).
    if g.k0.max(g.k0_sub) > 1 << 58 || g.k1.max(g.k1_sub) >= 1 << 31 {
        return Err(CudaError::Unsupported(format!(
            "line offsets K0 {}, K0' {}, K1 {}, K1' {}",
            g.k0, g.k0_sub, g.k1, g.k1_sub
        )));
    }
    Ok(())
}

/// A bound, in units of `2^-64`, on how far the top 64 bits of the quadratic `r0 + r1 x +
/// r2 C(x, 2)` that the screen's two-limb walk forms (`QuadCheck` in `kernels/cuda/tmd.cu`) can
/// lie from the exact one's at any `x < N` (docs/error-analysis.md §16): in units of `2^-128`,
/// each walked word is below the true one by less than its slack plus 1, eps1's top limbs by
/// less than 1, and `r0 = b - eps1 + K0 r2`, `r1 = slope - K1 r2`, the quadratic multiply them
/// by at most `K0`, `x K1`, `x`, `C(x, 2)`; a difference below `2^64 m` moves the top limb by at
/// most `m + 1`. `None` where the bound or phase 3's `t3` is too large for the kernel's
/// comparisons (the exact walk then runs).
pub(super) fn screen_error(g: &Generated, slack_b: u64, slack_s: u64, slack_r: u64) -> Option<u64> {
    let x = (1u128 << g.domain_bits) - 1;
    let r_mult = (g.k0 as u128)
        .checked_add(x.checked_mul(g.k1 as u128)?)?
        .checked_add(x * x.saturating_sub(1) / 2)?;
    let err = (slack_b as u128 + 3)
        .checked_add((slack_r as u128 + 1).checked_mul(r_mult)?)?
        .checked_add(x.checked_mul(slack_s as u128 + 1)?)?;
    ((err >> 64) < 1 << 40 && g.t3 < 1 << 62).then_some((err >> 64) as u64 + 2)
}

/// The packet for phase 1: `packet` (the default or `TMD_CUDA_PACKET`), halved
/// (down to 16) while the two-limb walk over it would drop more than its exact fallback
/// takes: where words are wider than two limbs and the walk's slack is unbounded
/// (`walk_slack`: `None`) or would leave more than a quarter of `EXACT_CAP` domains of the
/// piece undecided (about `(slack_b + slack_s) / 2^64` of them), phase 1 would run the exact
/// walk of `L` limbs and `2 degree + 1` differences, beyond the registers (exp in binary64 on
/// a unit of `2^40` near 300: degree 11, 8 limbs, packets of 1024). A shorter packet only
/// maps the same domains onto more threads: no answer depends on it.
pub(super) fn top_walk_packet(g: &Generated, packet: u64) -> u64 {
    if g.limbs <= 2 || env_u64("TMD_CUDA_TOP") == Some(0) {
        return packet;
    }
    // Undecided domains expected: domains (slack_b + slack_s) / 2^64 <= EXACT_CAP / 4.
    let fits = |p: u64| {
        let steps = p.saturating_sub(1);
        match (
            walk_slack(g.walk_b.len(), steps),
            walk_slack(g.walk_slope.len(), steps),
        ) {
            (Some(b), Some(s)) => {
                (b as u128 + s as u128) * g.domains as u128 <= (EXACT_CAP as u128 / 4) << 64
            }
            _ => false,
        }
    };
    let mut p = packet;
    while p > 16 && !fits(p) {
        p /= 2;
    }
    p
}

/// Phases 1-3 of `g` within the lists of `slot` (see the module's notes on memory).
pub(super) fn run_piece_in(
    dev: &Device,
    slot: &mut Slot,
    g: &Generated,
    test: Test,
) -> Result<PieceOutcome, CudaError> {
    let l = g.limbs;
    let kappa_bits = g.domain_bits - g.sub_bits;
    let packet = top_walk_packet(g, packet_for(g));
    if !slot_fits(&slot.shares, l as u64, kappa_bits, g.domain_bits, packet) {
        return Err(CudaError::Unsupported(format!(
            "{} per piece is too small for {l} limbs and {} subdomains of 2^{} arguments",
            human_bytes(slot.shares.bytes()),
            1u64 << kappa_bits,
            g.sub_bits
        )));
    }
    let m = dev.module(l, g.degree)?;
    let stream = slot.stream.clone();
    // The two-limb walk where words are wider and the dropped carries stay small over a packet
    // (TMD_CUDA_TOP=0 turns it off: a tuning knob, no answer depends on it).
    let slack = if l > 2 && env_u64("TMD_CUDA_TOP") != Some(0) {
        let steps = packet.saturating_sub(1);
        match (
            walk_slack(g.walk_b.len(), steps),
            walk_slack(g.walk_slope.len(), steps),
        ) {
            (Some(b), Some(s)) => Some((b.max(slot.slack_floor), s.max(slot.slack_floor))),
            _ => None,
        }
    } else {
        None
    };
    // A screened piece's two-limb walk also needs r2's slack, and a bound on its quadratic's
    // error from the walked words; without one it takes the exact walk.
    let quad_err = match slack {
        Some((b, s)) if g.quadratic => walk_slack(g.walk_r2.len(), packet.saturating_sub(1))
            .and_then(|r| screen_error(g, b, s, r.max(slot.slack_floor))),
        _ => None,
    };
    let slack = if g.quadratic && quad_err.is_none() {
        None
    } else {
        slack
    };
    let t = Instant::now();
    let piece = PieceData {
        g,
        m: &m,
        test_id: match test {
            Test::Regular => 0,
            Test::Lefevre => 1,
        },
        rho_b: stream.clone_htod(&pack_words(&g.walk_b, l))?,
        rho_s: stream.clone_htod(&pack_words(&g.walk_slope, l))?,
        rho_r: stream.clone_htod(&pack_words(&g.walk_r2, l))?,
        consts: {
            let mut c = word_limbs(&g.bounds.eps1, l);
            c.extend(word_limbs(&g.bounds.eps2, l));
            stream.clone_htod(&c)?
        },
        packet,
        kappa_bits,
        slack,
        quad_err: quad_err.unwrap_or(0),
    };
    let mut out = PieceOutcome::default();
    out.stats.domains = g.domains;
    out.stats.pieces = 1;
    out.timings.phase1_s = t.elapsed().as_secs_f64();

    let packets = g.domains.div_ceil(packet);
    let mut ranges = VecDeque::from([(0u64, packets)]);
    while let Some((p0, p1)) = ranges.pop_front() {
        let t = Instant::now();
        // A few per thousand domains fail with the published sizes; start at 1/64.
        let want = ((p1 - p0) * packet / 64).max(1024).min(slot.shares.index);
        let share = slot.shares.index;
        ensure(&stream, &slot.gauge, &mut slot.index, want, share)?;
        let failed = piece.phase1(slot, p0, p1)?;
        out.timings.phase1_s += t.elapsed().as_secs_f64();
        let cap = slot.index.as_ref().map_or(0, |x| x.len() as u64);
        if failed > cap {
            if failed <= share {
                ensure(&stream, &slot.gauge, &mut slot.index, failed, share)?;
                ranges.push_front((p0, p1));
            } else if p1 - p0 >= 2 {
                for r in split_packets(p0, p1, failed, cap).into_iter().rev() {
                    ranges.push_front(r);
                }
            } else {
                // slot_fits guarantees a packet's failures fit the index share.
                return Err(CudaError::Unsupported(format!(
                    "{failed} failing domains in one packet of {packet}"
                )));
            }
            continue;
        }
        out.stats.phase1_failures += failed;
        let batch = batch_domains(slot.shares.work, l as u64, kappa_bits);
        let mut j0 = 0;
        while j0 < failed {
            let n = batch.min(failed - j0);
            piece.batch(slot, j0, n, &mut out)?;
            j0 += n;
        }
    }
    out.candidates.sort_unstable();
    out.stats.candidates = out.candidates.len() as u64;
    Ok(out)
}

/// A piece's constant inputs on the device, and the launches of its phases.
struct PieceData<'a> {
    g: &'a Generated,
    m: &'a Module,
    test_id: i32,
    rho_b: CudaSlice<u64>,
    rho_s: CudaSlice<u64>,
    rho_r: CudaSlice<u64>,
    consts: CudaSlice<u64>,
    packet: u64,
    kappa_bits: u32,
    /// The two-limb walk's slack for `b` and the slope, where it is used.
    slack: Option<(u64, u64)>,
    /// A screened piece's bound on its quadratic's error on the walked words (`screen_error`).
    quad_err: u64,
}

impl PieceData<'_> {
    /// Phase 1 on packets `[p0, p1)` into the slot's index list: the number of failing
    /// domains, which may exceed the list (then only its capacity was written).
    fn phase1(&self, slot: &mut Slot, p0: u64, p1: u64) -> Result<u64, CudaError> {
        if self.g.quadratic {
            return self.phase1_screen(slot, p0, p1);
        }
        if let Some((slack_b, slack_s)) = self.slack {
            if let Some(failed) = self.phase1_top(slot, p0, p1, slack_b, slack_s)? {
                return Ok(failed);
            }
        }
        let g = self.g;
        let stream = &slot.stream;
        let index = slot.index.as_mut().expect("ensured by the caller");
        let cap = index.len() as u64;
        stream.memset_zeros(&mut slot.counters)?;
        let mut b = stream.launch_builder(&self.m.phase1);
        b.arg(&self.rho_b)
            .arg(&self.rho_s)
            .arg(&g.domains)
            .arg(&g.piece.count)
            .arg(&g.domain_bits)
            .arg(&self.packet)
            .arg(&p0)
            .arg(&p1)
            .arg(&g.e1)
            .arg(&self.test_id)
            .arg(index)
            .arg(&cap)
            .arg(&mut slot.counters);
        // SAFETY: the arguments match tmd_phase1's parameters in order and type (two packed
        // rho lists of NB, NS words of L limbs as this module was compiled for, u64
        // domains/count, u32 domain_bits, u64 packet/first/end packet/e1, int test, an index
        // list of `cap` entries, 8 counters); one thread per packet of [p0, p1), and the kernel
        // writes only below `cap`.
        unsafe { b.launch(launch_config(p1 - p0)?) }?;
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        Ok(c[0])
    }

    /// Phase 1 on packets `[p0, p1)` with the two-limb walk, then the undecided domains from
    /// exact words: the same failing domains as `tmd_phase1` finds. `None` when more domains
    /// were undecided than the slot's list holds (the caller runs the exact walk instead).
    fn phase1_top(
        &self,
        slot: &mut Slot,
        p0: u64,
        p1: u64,
        slack_b: u64,
        slack_s: u64,
    ) -> Result<Option<u64>, CudaError> {
        let g = self.g;
        let stream = &slot.stream;
        let index = slot.index.as_mut().expect("ensured by the caller");
        let cap = index.len() as u64;
        stream.memset_zeros(&mut slot.counters)?;
        {
            let mut b = stream.launch_builder(&self.m.phase1_top);
            b.arg(&self.rho_b)
                .arg(&self.rho_s)
                .arg(&g.domains)
                .arg(&g.piece.count)
                .arg(&g.domain_bits)
                .arg(&self.packet)
                .arg(&p0)
                .arg(&p1)
                .arg(&g.e1)
                .arg(&self.test_id)
                .arg(&mut *index)
                .arg(&cap)
                .arg(&mut slot.counters)
                .arg(&slack_b)
                .arg(&slack_s)
                .arg(&mut slot.exact)
                .arg(&EXACT_CAP);
            // SAFETY: as tmd_phase1, then u64 slacks and the `exact` list of EXACT_CAP
            // entries, which the kernel writes only below EXACT_CAP.
            unsafe { b.launch(launch_config(p1 - p0)?) }?;
        }
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        let undecided = c[5];
        if undecided > EXACT_CAP {
            tracing::debug!(undecided, "two-limb walk: the exact walk runs this range");
            return Ok(None);
        }
        if undecided == 0 {
            return Ok(Some(c[0]));
        }
        {
            let mut b = stream.launch_builder(&self.m.phase1_exact);
            b.arg(&self.rho_b)
                .arg(&self.rho_s)
                .arg(&slot.exact)
                .arg(&undecided)
                .arg(&g.piece.count)
                .arg(&g.domain_bits)
                .arg(&g.e1)
                .arg(&self.test_id)
                .arg(&mut *index)
                .arg(&cap)
                .arg(&mut slot.counters);
            // SAFETY: tmd_phase1_exact(rho_b, rho_s, exact, n, count, domain_bits, e1, test,
            // index, cap, counters): `exact` holds `undecided` <= EXACT_CAP entries written
            // above; one thread per entry; failures are written only below `cap`.
            unsafe { b.launch(launch_config(undecided)?) }?;
        }
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        Ok(Some(c[0]))
    }

    /// Phase 1 of a screened piece on packets `[p0, p1)` (docs/error-analysis.md §16): the
    /// two-limb walk where it has a slack and an error bound, then the undecided domains from
    /// exact words; else the exact walk. The same failing domains as the CPU's screen.
    fn phase1_screen(&self, slot: &mut Slot, p0: u64, p1: u64) -> Result<u64, CudaError> {
        if let Some(slack) = self.slack {
            let c = self.launch_screen(slot, p0, p1, Some(slack))?;
            let undecided = c[5];
            if undecided == 0 {
                return Ok(c[0]);
            }
            if undecided <= EXACT_CAP {
                return self.screen_undecided(slot, undecided);
            }
            tracing::debug!(undecided, "screen: the exact walk runs this range");
        }
        Ok(self.launch_screen(slot, p0, p1, None)?[0])
    }

    /// One launch of the screen's walk on packets `[p0, p1)`: the two-limb walk with the given
    /// slacks, else the exact walk. Returns the counters.
    fn launch_screen(
        &self,
        slot: &mut Slot,
        p0: u64,
        p1: u64,
        top: Option<(u64, u64)>,
    ) -> Result<Vec<u64>, CudaError> {
        let g = self.g;
        let stream = &slot.stream;
        let index = slot.index.as_mut().expect("ensured by the caller");
        let cap = index.len() as u64;
        stream.memset_zeros(&mut slot.counters)?;
        let mut b = match top {
            Some(_) => stream.launch_builder(&self.m.phase1_top_quad),
            None => stream.launch_builder(&self.m.phase1_quad),
        };
        b.arg(&self.rho_b)
            .arg(&self.rho_s)
            .arg(&self.rho_r)
            .arg(&self.consts)
            .arg(&g.domains)
            .arg(&g.piece.count)
            .arg(&g.domain_bits)
            .arg(&self.packet)
            .arg(&p0)
            .arg(&p1)
            .arg(&g.e1)
            .arg(&g.k0)
            .arg(&g.k1)
            .arg(&g.t3)
            .arg(&mut *index)
            .arg(&cap)
            .arg(&mut slot.counters);
        if let Some((slack_b, slack_s)) = &top {
            b.arg(slack_b)
                .arg(slack_s)
                .arg(&self.quad_err)
                .arg(&mut slot.exact)
                .arg(&EXACT_CAP);
        }
        // SAFETY: tmd_phase1_quad(rho_b, rho_s, rho_r, consts, domains, count, domain_bits,
        // packet, first, end, e1, k0, k1, t3, index, cap, counters), and tmd_phase1_top_quad
        // with the slacks, the error bound and the `exact` list of EXACT_CAP entries after
        // them: packed rho lists of NB, NS, NR words and eps1's L limbs first in `consts`, as
        // the module was compiled; one thread per packet of [p0, p1); every list is written
        // only below its capacity.
        unsafe { b.launch(launch_config(p1 - p0)?) }?;
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        Ok(c)
    }

    /// The screen on the `undecided` domains of the slot's `exact` list, from exact words;
    /// returns the failing domains of the range so far.
    fn screen_undecided(&self, slot: &mut Slot, undecided: u64) -> Result<u64, CudaError> {
        let g = self.g;
        let stream = &slot.stream;
        let index = slot.index.as_mut().expect("ensured by the caller");
        let cap = index.len() as u64;
        let mut b = stream.launch_builder(&self.m.phase1_exact_quad);
        b.arg(&self.rho_b)
            .arg(&self.rho_s)
            .arg(&self.rho_r)
            .arg(&self.consts)
            .arg(&slot.exact)
            .arg(&undecided)
            .arg(&g.piece.count)
            .arg(&g.domain_bits)
            .arg(&g.e1)
            .arg(&g.k0)
            .arg(&g.k1)
            .arg(&g.t3)
            .arg(&mut *index)
            .arg(&cap)
            .arg(&mut slot.counters);
        // SAFETY: tmd_phase1_exact_quad(rho_b, rho_s, rho_r, consts, exact, n, count,
        // domain_bits, e1, k0, k1, t3, index, cap, counters): `exact` holds `undecided` <=
        // EXACT_CAP entries written by the walk; one thread per entry; failures only below
        // `cap`.
        unsafe { b.launch(launch_config(undecided)?) }?;
        let c = stream.clone_dtoh(&slot.counters)?;
        stream.synchronize()?;
        Ok(c[0])
    }

    /// Phases 2 and 3 on the failing domains `j0 .. j0 + n` of the slot's index list: adds
    /// the counts to `out` and the candidates to `out.candidates`.
    fn batch(
        &self,
        slot: &mut Slot,
        j0: u64,
        n: u64,
        out: &mut PieceOutcome,
    ) -> Result<(), CudaError> {
        let g = self.g;
        let l = g.limbs as u64;
        let kb = self.kappa_bits;
        let t = Instant::now();
        let Slot {
            stream,
            shares,
            index,
            work,
            candidates,
            counters,
            gauge,
            ..
        } = slot;
        let cap2 = n << kb;
        let needed = n * work_words_per_domain(l, kb);
        ensure(stream, gauge, work, needed, shares.work)?;
        let index = index
            .as_ref()
            .expect("phase 1 ran")
            .slice(j0 as usize..(j0 + n) as usize);
        let work = work.as_mut().expect("ensured");
        let (mut words1, mut rest) = work.split_at_mut((3 * l * n) as usize);
        let (start, mut rest) = rest.split_at_mut(cap2 as usize);
        let (len, mut rest) = rest.split_at_mut(cap2 as usize);
        let (words, _) = rest.split_at_mut((3 * l * cap2) as usize);
        let mut subs = Subdomains {
            start,
            len,
            words,
            cap: cap2,
        };
        self.phase1_words(stream, &index, &mut words1, n)?;
        out.timings.phase1_s += t.elapsed().as_secs_f64();

        let t = Instant::now();
        let c = self.phase2(stream, &index, &mut words1, n, &mut subs, counters)?;
        out.timings.phase2_s += t.elapsed().as_secs_f64();
        out.stats.subdomains += c[1];
        out.stats.phase2_failures += c[2];
        out.stats.phase3_arguments += c[3];
        let (failed2, arguments) = (c[2], c[3]);
        if failed2 == 0 {
            return Ok(());
        }

        // Phase 3 over ranges of the failed subdomains whose candidates fit the list.
        let t = Instant::now();
        let floor = 4096u64.max(1 << g.sub_bits);
        let mut ranges = VecDeque::from([(0u64, failed2)]);
        while let Some((s0, s1)) = ranges.pop_front() {
            let expected = (arguments / failed2 * (s1 - s0)) >> 10;
            let want = expected.clamp(floor, shares.candidates.max(floor));
            ensure(stream, gauge, candidates, want, shares.candidates)?;
            let cand = candidates.as_mut().expect("ensured");
            let cap3 = cand.len() as u64;
            let nsubs = s1 - s0;
            let found = self.phase3(stream, &subs, s0, nsubs, cand, counters)?;
            if found > cap3 {
                if found <= shares.candidates {
                    ensure(stream, gauge, candidates, found, shares.candidates)?;
                    ranges.push_front((s0, s1));
                } else if nsubs >= 2 {
                    let mid = s0 + nsubs / 2;
                    ranges.push_front((mid, s1));
                    ranges.push_front((s0, mid));
                } else {
                    // slot_fits guarantees one subdomain's arguments fit the candidate share.
                    return Err(CudaError::Unsupported(format!(
                        "{found} candidates in one subdomain"
                    )));
                }
                continue;
            }
            let v = stream.clone_dtoh(&cand.slice(0..found as usize))?;
            stream.synchronize()?;
            out.candidates.extend(v);
        }
        out.timings.phase3_s += t.elapsed().as_secs_f64();
        Ok(())
    }

    /// The failing domains' words, evaluated exactly at their indices (`index`, `n` entries)
    /// into `words1` (3 fields of L rows of `n` entries).
    fn phase1_words(
        &self,
        stream: &Arc<CudaStream>,
        index: &CudaView<'_, u64>,
        words1: &mut CudaViewMut<'_, u64>,
        n: u64,
    ) -> Result<(), CudaError> {
        let mut b = stream.launch_builder(&self.m.phase1_words);
        b.arg(&self.rho_b)
            .arg(&self.rho_s)
            .arg(&self.rho_r)
            .arg(index)
            .arg(words1)
            .arg(&n)
            .arg(&n);
        // SAFETY: tmd_phase1_words(rho_b, rho_s, rho_r, index, words, cap, n): the rho
        // lists hold NB, NS, NR words of L limbs, `index` n entries, `words1` 3 L rows of
        // n; one thread per entry writes only its own column.
        unsafe { b.launch(launch_config(n)?) }?;
        Ok(())
    }

    /// Phase 2 on the `n` failing domains (`index`, their words `words1`): the failed
    /// subdomains into `subs`; the counters (`[1]` subdomains, `[2]` failures, `[3]` phase 3's
    /// arguments).
    fn phase2(
        &self,
        stream: &Arc<CudaStream>,
        index: &CudaView<'_, u64>,
        words1: &mut CudaViewMut<'_, u64>,
        n: u64,
        subs: &mut Subdomains<'_>,
        counters: &mut CudaSlice<u64>,
    ) -> Result<Vec<u64>, CudaError> {
        let g = self.g;
        stream.memset_zeros(&mut *counters)?;
        let mut b = stream.launch_builder(&self.m.phase2);
        b.arg(index)
            .arg(words1)
            .arg(&n)
            .arg(&n)
            .arg(&self.consts)
            .arg(&g.k0)
            .arg(&g.k1)
            .arg(&g.k0_sub)
            .arg(&g.k1_sub)
            .arg(&g.e2)
            .arg(&g.domain_bits)
            .arg(&g.sub_bits)
            .arg(&g.piece.count)
            .arg(&self.test_id)
            .arg(&mut subs.start)
            .arg(&mut subs.len)
            .arg(&mut subs.words)
            .arg(&subs.cap)
            .arg(&mut *counters);
        // SAFETY: the arguments match tmd_phase2's parameters in order and type; the input
        // lists hold `n` entries (stride n), the outputs `cap2 = n << kappa_bits` entries
        // (stride cap2), one per thread at most, so no write goes past them.
        unsafe { b.launch(launch_config(subs.cap)?) }?;
        let c = stream.clone_dtoh(&*counters)?;
        stream.synchronize()?;
        Ok(c)
    }

    /// Phase 3 on the failed subdomains `s0 .. s0 + nsubs` of `subs`: the number of
    /// candidates found, which may exceed `cand` (then only its capacity was written).
    fn phase3(
        &self,
        stream: &Arc<CudaStream>,
        subs: &Subdomains<'_>,
        s0: u64,
        nsubs: u64,
        cand: &mut CudaSlice<u64>,
        counters: &mut CudaSlice<u64>,
    ) -> Result<u64, CudaError> {
        let (chunk_bits, chunk_shift) = phase3_chunks(self.g.sub_bits);
        let cap3 = cand.len() as u64;
        stream.memset_zeros(&mut *counters)?;
        let (st, ln, wd) = (
            subs.start.slice(s0 as usize..),
            subs.len.slice(s0 as usize..),
            subs.words.slice(s0 as usize..),
        );
        let mut b = stream.launch_builder(&self.m.phase3);
        b.arg(&st)
            .arg(&ln)
            .arg(&wd)
            .arg(&subs.cap)
            .arg(&nsubs)
            .arg(&chunk_shift)
            .arg(&chunk_bits)
            .arg(&self.g.t3)
            .arg(&mut *cand)
            .arg(&cap3)
            .arg(&mut *counters);
        // SAFETY: the arguments match tmd_phase3's parameters in order and type; the
        // input views start at subdomain s0 of lists of stride `cap2` and the kernel
        // reads entries s0 .. s1 < failed2 <= cap2 of each row, so every read stays in
        // the lists; it writes candidates only below `cap3`.
        unsafe { b.launch(launch_config(nsubs << chunk_shift)?) }?;
        let c = stream.clone_dtoh(&*counters)?;
        stream.synchronize()?;
        Ok(c[4])
    }
}

/// Phase 2's lists of failed subdomains, read by phase 3: each one's start, length and words
/// (3 fields of L rows), `cap` entries a row.
struct Subdomains<'a> {
    start: CudaViewMut<'a, u64>,
    len: CudaViewMut<'a, u64>,
    words: CudaViewMut<'a, u64>,
    cap: u64,
}
