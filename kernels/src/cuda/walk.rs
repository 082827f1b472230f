//! Dense walks on the device: the progression route's generated pieces (`search/progression.rs`)
//! walked by `tmd_dense_walk` (`kernels/cuda/tmd.cu`) instead of the host's
//! `dense::candidates`, with the same kept offsets (the walk is exact mod 1 on both).
//!
//! A call's pieces are one launch of one thread per chunk of `2^CHUNK_BITS` offsets, whose
//! start differences the thread computes exactly from the piece's `beta` (`shift_state`), at
//! the widest word width among them: a narrower piece's words are placed in the top limbs, its
//! sums mod `2^(64 l)` then sit in the top `l` limbs of the wider ones and its top 64 bits,
//! which the comparison reads, are the same. The inputs are a few kilobytes a piece and the
//! kept offsets few (a piece keeps about `2 thr / 2^64` of its offsets), so a launch allocates its own
//! buffers on a slot's stream and frees them: no list of the slot is used, and a kept list
//! that overflows its capacity (counted on the device, never written past) runs again with
//! the exact capacity.

use super::{launch_config, CudaError, Device};
use crate::search::dense::{Dense, DENSE_MAX_DEGREE};
use crate::search::narrow;
use cudarc::driver::PushKernelArg;

/// Offsets a thread walks: `2^10`, so that its exact start (about `n^2 / 2` products of words)
/// costs a few percent of its walk, and a piece of `2^17` offsets is 128 threads. The
/// narrowed walk's chunk, so a thread's chunk is the one the host narrows alike.
pub const CHUNK_BITS: u32 = narrow::CHUNK_BITS;

/// Words per piece in the packed `beta`: the kernel's `DW`.
pub const WALK_WORDS: usize = DENSE_MAX_DEGREE + 1;

/// The module a walk of `limbs`-limb words loads its kernel from: any degree's module holds it
/// (the walk's degree is an argument), and degree 2's compiles fastest.
const MODULE_DEGREE: usize = 2;

/// Kept offsets a launch makes room for before it knows their number.
const FIRST_CAP: u64 = 1 << 16;

/// The kernel's inputs for pieces of one word width, as it reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkInputs {
    pub limbs: usize,
    /// `WALK_WORDS` words of `limbs` limbs a piece (word `l`, limb `k` at
    /// `(p WALK_WORDS + l) limbs + k`), zero past the piece's degree.
    pub beta: Vec<u64>,
    pub count: Vec<u64>,
    /// Prefix sums of the pieces' chunks: piece `p` owns threads `[first[p], first[p + 1])`.
    pub first: Vec<u64>,
    pub degree: Vec<u32>,
    /// The narrowed walk's differences (`narrow::plan`), 0 where the piece is walked exactly.
    pub narrow: Vec<u32>,
    /// The threshold: the narrowed walk's widened one where narrowed.
    pub thr: Vec<u64>,
    /// The packed order: packed piece `i` is the caller's piece `order[i]`, the narrowed
    /// pieces first, so that one launch of `tmd_narrow_walk` covers them.
    pub order: Vec<usize>,
    /// The narrowed pieces' threads: `[0, narrowed_threads)`, the rest walked exactly.
    pub narrowed_threads: u64,
}

impl WalkInputs {
    /// Packs `pieces` (a dense piece and its number of offsets) at the widest word width
    /// among them, a narrower piece's words in the top limbs. `Unsupported` where the kernel
    /// cannot take one: a degree above its table, a piece of `2^32` offsets or more, or `2^32`
    /// pieces.
    pub fn pack(pieces: &[(&Dense, u64)]) -> Result<WalkInputs, CudaError> {
        let limbs = pieces.iter().map(|(d, _)| d.fx().limbs).max().unwrap_or(1);
        if pieces.len() as u64 >= 1 << 32 {
            return Err(CudaError::Unsupported(format!(
                "{} dense pieces",
                pieces.len()
            )));
        }
        // Planned with each piece where it was generated: no work of the host's here.
        let narrowings: Vec<Option<narrow::Narrow>> =
            pieces.iter().map(|(d, n)| d.narrowing(*n)).collect();
        let (mut order, exact): (Vec<usize>, Vec<usize>) =
            (0..pieces.len()).partition(|&i| narrowings[i].is_some());
        let narrowed = order.len();
        order.extend(exact);
        let mut w = WalkInputs {
            limbs,
            beta: vec![0; pieces.len() * WALK_WORDS * limbs],
            count: Vec::with_capacity(pieces.len()),
            first: vec![0],
            degree: Vec::with_capacity(pieces.len()),
            narrow: Vec::with_capacity(pieces.len()),
            thr: Vec::with_capacity(pieces.len()),
            order,
            narrowed_threads: 0,
        };
        for (i, &at) in w.order.iter().enumerate() {
            let (d, n) = pieces[at];
            if d.fx().beta.len() > WALK_WORDS || n >= 1 << 32 {
                return Err(CudaError::Unsupported(format!(
                    "a dense piece of {n} offsets, degree {}, {} limbs",
                    d.fx().degree,
                    d.fx().limbs
                )));
            }
            w.count.push(n);
            let last = *w.first.last().expect("first holds 0");
            if i == narrowed {
                w.narrowed_threads = last;
            }
            w.first.push(last + n.div_ceil(1 << CHUNK_BITS));
            w.degree.push(d.fx().beta.len() as u32 - 1);
            let nw = narrowings[at];
            w.narrow.push(nw.map_or(0, |nw| nw.diffs as u32));
            w.thr.push(nw.map_or(d.t(), |nw| nw.t));
        }
        if narrowed == pieces.len() {
            w.narrowed_threads = w.threads();
        }
        // Copies of the words each piece was made with (`Dense::new`, on the generating
        // threads), into the top limbs of the batch's width.
        for (out, &at) in w.beta.chunks_mut(WALK_WORDS * limbs).zip(&w.order) {
            let d = pieces[at].0;
            let low = limbs - d.fx().limbs;
            for (m, slot) in out.chunks_mut(limbs).take(d.fx().beta.len()).enumerate() {
                slot[low..].copy_from_slice(d.word_limbs(m));
            }
        }
        Ok(w)
    }

    pub fn threads(&self) -> u64 {
        *self.first.last().expect("first holds 0")
    }

    /// The kernels' kept entries `(p << 32) | t` (`p` a packed piece) as each of the caller's
    /// pieces' offsets, increasing.
    pub fn split(&self, kept: &[u64]) -> Vec<Vec<u64>> {
        let mut out = vec![Vec::new(); self.order.len()];
        for &e in kept {
            out[self.order[(e >> 32) as usize]].push(e & 0xffff_ffff);
        }
        for v in &mut out {
            v.sort_unstable();
        }
        out
    }
}

/// Walks `pieces` on `dev`: the kept offsets of each, increasing, as `dense::candidates`.
/// Each call's host and device seconds are logged at debug level (`TMD_LOG=
/// tmd_kernels::cuda::walk=debug`): where a unit's walk time goes, packing or the launch.
pub(super) fn run(dev: &Device, pieces: &[(&Dense, u64)]) -> Result<Vec<Vec<u64>>, CudaError> {
    let t = std::time::Instant::now();
    let w = WalkInputs::pack(pieces)?;
    let pack_s = t.elapsed().as_secs_f64();
    let kept = launch(dev, &w)?;
    let launch_s = t.elapsed().as_secs_f64() - pack_s;
    tracing::debug!(
        pieces = pieces.len(),
        threads = w.threads(),
        limbs = w.limbs,
        kept = kept.len(),
        pack_s,
        launch_s,
        "dense walk"
    );
    Ok(w.split(&kept))
}

/// One launch over `w`'s pieces (again with room for every kept entry where the first
/// capacity fell short): the kept entries, unordered.
fn launch(dev: &Device, w: &WalkInputs) -> Result<Vec<u64>, CudaError> {
    let m = dev.module(w.limbs, MODULE_DEGREE)?;
    let taken = dev.pool.take(&dev.ctx, &dev.gauge)?;
    let stream = taken.slot.as_ref().expect("a taken slot").stream.clone();
    let beta = stream.clone_htod(&w.beta)?;
    let count = stream.clone_htod(&w.count)?;
    let first = stream.clone_htod(&w.first)?;
    let degree = stream.clone_htod(&w.degree)?;
    let narrow = stream.clone_htod(&w.narrow)?;
    let thr = stream.clone_htod(&w.thr)?;
    let pieces = w.count.len() as u64;
    // The narrowed pieces' threads, then the others', each launch's threads from its t0.
    let launches = [
        (&m.narrow_walk, 0, w.narrowed_threads),
        (&m.dense_walk, w.narrowed_threads, w.threads()),
    ];
    let mut cap = FIRST_CAP;
    loop {
        let mut kept = stream.alloc_zeros::<u64>(cap as usize)?;
        let mut counters = stream.alloc_zeros::<u64>(1)?;
        for &(kernel, t0, end) in &launches {
            if end <= t0 {
                continue;
            }
            let mut b = stream.launch_builder(kernel);
            b.arg(&beta)
                .arg(&count)
                .arg(&first)
                .arg(&degree)
                .arg(&narrow)
                .arg(&thr)
                .arg(&pieces)
                .arg(&CHUNK_BITS)
                .arg(&t0)
                .arg(&mut kept)
                .arg(&cap)
                .arg(&mut counters);
            // SAFETY: the arguments are the kernels', in their order and types; every buffer
            // holds what they read (`first` has pieces + 1 entries, `beta` WALK_WORDS words a
            // piece), they write `kept` below `cap` only, and a thread past `first[pieces]`
            // returns.
            unsafe { b.launch(launch_config(end - t0)?) }?;
        }
        let c = stream.clone_dtoh(&counters)?;
        stream.synchronize()?;
        let found = c[0];
        if found <= cap {
            let v = stream.clone_dtoh(&kept.slice(0..found as usize))?;
            stream.synchronize()?;
            return Ok(v);
        }
        cap = found;
    }
}

#[cfg(test)]
mod tests {
    use super::super::write_word;
    use super::*;
    use rug::Integer;

    /// Written in place through a reused scratch integer, a word is `v mod 2^(64 limbs)`'s
    /// digits, whatever the slot held and the scratch held before.
    #[test]
    fn words_are_written_in_place_as_their_residues() {
        let mut scratch = Integer::from(-12345) << 300u32;
        for limbs in 1..=4 {
            for v in [
                Integer::from(0),
                Integer::from(-1),
                Integer::from(12345),
                -(Integer::from(1) << 200u32) + 77u32,
                (Integer::from(0xdead_beefu32) << 250u32) + 3u32,
                Integer::from(-0x1234_5678_9abc_def0i64) << 70u32,
            ] {
                let mut out = vec![0xffff_ffff_ffff_ffffu64; limbs];
                write_word(&v, &mut out, &mut scratch);
                let modulus = Integer::from(1) << (64 * limbs as u32);
                let (_, residue) = <(Integer, Integer)>::from(v.div_rem_euc_ref(&modulus));
                let mut want = residue.to_digits::<u64>(rug::integer::Order::Lsf);
                want.resize(limbs, 0);
                assert_eq!(out, want, "{v} {limbs}");
            }
        }
    }

    /// Packed piece `p` is the caller's `order[p]`: kept entries go back to the caller's
    /// pieces, each list increasing.
    #[test]
    fn kept_entries_are_split_by_piece_in_increasing_order() {
        let w = WalkInputs {
            limbs: 1,
            beta: Vec::new(),
            count: Vec::new(),
            first: vec![0],
            degree: Vec::new(),
            narrow: Vec::new(),
            thr: Vec::new(),
            order: vec![2, 0, 1],
            narrowed_threads: 0,
        };
        let kept = [(1u64 << 32) | 7, 3, (1 << 32) | 2, 1, (2 << 32) | 5];
        assert_eq!(w.split(&kept), vec![vec![2, 7], vec![5], vec![1, 3]]);
    }
}
