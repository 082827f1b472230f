//! Device memory of the CUDA back end, without any GPU call: the budget a user gives
//! (`--gpu-memory`), how it is cut into slots (one piece in flight each) and shared inside a
//! slot, and how a piece whose lists would not fit is cut into ranges and batches that do.
//!
//! Why: the lists of phases 1-3 grow with the number of failing domains, which has no useful
//! bound (near a zero of `f`, or at high thresholds, most domains fail). Every list is therefore
//! sized to a fixed share of a slot and the work is cut to fit it, never the other way round; the
//! answers do not depend on the cuts, only the number of launches does.

use std::fmt;
use std::str::FromStr;

/// Bytes per list entry word.
pub const WORD_BYTES: u64 = 8;
/// The smallest slot the back end shrinks to before it gives up with out-of-memory (4 MiB):
/// below it a piece would take so many launches that the CPU is the better place for it.
pub const MIN_SLOT_BYTES: u64 = 4 << 20;
/// At most this many pieces share one device at a time: enough to overlap one piece's CPU work
/// (generation, verification) with another's kernels.
pub const MAX_SLOTS: u64 = 4;
/// A slot gets at least this much of the budget (256 MiB) when the budget allows: fewer slots
/// then, rather than slots too small to fill the GPU.
pub const SLOT_TARGET_BYTES: u64 = 256 << 20;
/// The share of a device's free memory taken when no budget is given: leaves room for another
/// daemon on the same card, the kernels' local memory and the display.
pub const DEFAULT_FREE_SHARE: f64 = 0.5;

/// How much device memory the back end may use for its lists, per device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryBudget {
    /// A share (0 < s <= 1) of the device's free memory when the back end opens it.
    FreeShare(f64),
    /// A number of bytes.
    Bytes(u64),
}

impl Default for MemoryBudget {
    fn default() -> MemoryBudget {
        MemoryBudget::FreeShare(DEFAULT_FREE_SHARE)
    }
}

impl MemoryBudget {
    /// The budget in bytes on a device with `free` bytes free now.
    pub fn resolve(self, free: u64) -> u64 {
        match self {
            MemoryBudget::FreeShare(s) => (free as f64 * s) as u64,
            MemoryBudget::Bytes(b) => b,
        }
    }
}

/// Error of parsing a `--gpu-memory` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a memory budget: give bytes with a unit (8G, 8GiB, 512M, 1.5G; units are \
     binary: K, M, G, T), a share of the free memory (60%), or 'auto' (half the free memory)"
)]
pub struct BadBudget(pub String);

impl FromStr for MemoryBudget {
    type Err = BadBudget;

    fn from_str(s: &str) -> Result<MemoryBudget, BadBudget> {
        let bad = || BadBudget(s.to_string());
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(MemoryBudget::default());
        }
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(bad());
            }
            return Ok(MemoryBudget::FreeShare(v / 100.0));
        }
        let lower = t.to_ascii_lowercase();
        let digits_end = lower
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(lower.len());
        let (num, unit) = lower.split_at(digits_end);
        let v: f64 = num.parse().map_err(|_| bad())?;
        let scale: u64 = match unit.trim() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => 1 << 20,
            "g" | "gb" | "gib" => 1 << 30,
            "t" | "tb" | "tib" => 1 << 40,
            _ => return Err(bad()),
        };
        let bytes = v * scale as f64;
        if !(bytes.is_finite() && bytes >= 1.0 && bytes < 2f64.powi(63)) {
            return Err(bad());
        }
        Ok(MemoryBudget::Bytes(bytes as u64))
    }
}

impl fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryBudget::FreeShare(s) => write!(f, "{}% of the free memory", s * 100.0),
            MemoryBudget::Bytes(b) => write!(f, "{}", human_bytes(*b)),
        }
    }
}

/// Bytes for people: `1.50 GiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// How a device's budget is cut into slots: `(slots, bytes per slot)`. `None` when the budget
/// is below one minimal slot.
pub fn slots_for(budget: u64) -> Option<(u64, u64)> {
    if budget < MIN_SLOT_BYTES {
        return None;
    }
    let slots = (budget / SLOT_TARGET_BYTES).clamp(1, MAX_SLOTS);
    Some((slots, budget / slots))
}

/// A slot's words shared between its three lists: the phase-1 index list (a quarter), the
/// phases 2-3 work lists (five eighths) and the phase-3 candidates (an eighth). Each list grows
/// on demand up to its share, so a slot never holds more than its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    pub index: u64,
    pub work: u64,
    pub candidates: u64,
}

impl Shares {
    pub fn of(slot_bytes: u64) -> Shares {
        let words = slot_bytes / WORD_BYTES;
        let index = words / 4;
        let candidates = words / 8;
        Shares {
            index,
            work: words - index - candidates,
            candidates,
        }
    }

    pub fn bytes(&self) -> u64 {
        (self.index + self.work + self.candidates) * WORD_BYTES
    }
}

/// Words of the work lists per failed domain of a batch: its three phase-1 words, and for each
/// of its `2^kappa_bits` subdomains a start, a length and three words (`limbs` limbs each).
pub fn work_words_per_domain(limbs: u64, kappa_bits: u32) -> u64 {
    3 * limbs + ((3 * limbs + 2) << kappa_bits)
}

/// The most failed domains one batch of phases 2-3 can take in `work` words (at least 1: a
/// slot too small for one domain is refused before any piece runs, see [`slot_fits`]).
pub fn batch_domains(work: u64, limbs: u64, kappa_bits: u32) -> u64 {
    (work / work_words_per_domain(limbs, kappa_bits)).max(1)
}

/// Whether a slot of these shares can run a piece of `limbs` limbs, `2^kappa_bits` subdomains
/// per domain of `2^domain_bits` arguments, with `packet` domains per phase-1 thread: one
/// packet's failures, one failed domain's work and one subdomain's candidates must fit.
pub fn slot_fits(s: &Shares, limbs: u64, kappa_bits: u32, domain_bits: u32, packet: u64) -> bool {
    let sub_len = 1u64 << (domain_bits - kappa_bits);
    s.index >= packet
        && s.work >= work_words_per_domain(limbs, kappa_bits)
        && s.candidates >= sub_len
}

/// The length to grow a list to when `needed` entries do not fit its `have`: a little more
/// than asked (fewer regrowths along a binade), never above `share`.
pub fn grow_to(have: u64, needed: u64, share: u64) -> u64 {
    needed
        .saturating_add(needed / 4)
        .max(have)
        .min(share)
        .max(needed.min(share))
}

/// Cuts the phase-1 packet range `[p0, p1)` whose launch counted `counted` failing domains,
/// more than a list of `cap` entries holds, into consecutive ranges expected to fit (failures
/// are uneven along a piece, so with a quarter to spare; a range that still overflows is cut
/// again). At least two ranges, at most one packet each.
pub fn split_packets(p0: u64, p1: u64, counted: u64, cap: u64) -> Vec<(u64, u64)> {
    let n = p1 - p0;
    debug_assert!(n >= 2 && counted > cap && cap > 0);
    let want = counted.saturating_add(counted / 4).div_ceil(cap.max(1));
    let parts = want.clamp(2, n);
    let mut out = Vec::with_capacity(parts as usize);
    let mut a = p0;
    for k in 0..parts {
        // Even cuts: range k ends at p0 + n (k + 1) / parts.
        let b = p0 + ((n as u128 * (k as u128 + 1)) / parts as u128) as u64;
        if b > a {
            out.push((a, b));
        }
        a = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn budgets_parse_as_people_write_them() {
        let b = |s: &str| s.parse::<MemoryBudget>();
        assert_eq!(b("8G"), Ok(MemoryBudget::Bytes(8 << 30)));
        assert_eq!(b("8GiB"), Ok(MemoryBudget::Bytes(8 << 30)));
        assert_eq!(b("8gb"), Ok(MemoryBudget::Bytes(8 << 30)));
        assert_eq!(b("512M"), Ok(MemoryBudget::Bytes(512 << 20)));
        assert_eq!(b("1.5G"), Ok(MemoryBudget::Bytes(3 << 29)));
        assert_eq!(b("4096"), Ok(MemoryBudget::Bytes(4096)));
        assert_eq!(b("60%"), Ok(MemoryBudget::FreeShare(0.6)));
        assert_eq!(b("auto"), Ok(MemoryBudget::default()));
        for bad in [
            "", "G", "8X", "-1G", "0%", "101%", "0", "1e3G", "abc", "8 G B",
        ] {
            assert!(b(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(MemoryBudget::FreeShare(0.5).resolve(1000), 500);
        assert_eq!(MemoryBudget::Bytes(7).resolve(1000), 7);
        assert_eq!(human_bytes(3 << 29), "1.50 GiB");
        assert_eq!(human_bytes(100), "100 B");
    }

    #[test]
    fn slots_cut_the_budget() {
        assert_eq!(slots_for(MIN_SLOT_BYTES - 1), None);
        assert_eq!(slots_for(MIN_SLOT_BYTES), Some((1, MIN_SLOT_BYTES)));
        assert_eq!(slots_for(100 << 20), Some((1, 100 << 20)));
        assert_eq!(slots_for(600 << 20), Some((2, 300 << 20)));
        assert_eq!(slots_for(8 << 30), Some((4, 2 << 30)));
        let s = Shares::of(2 << 30);
        assert!(s.bytes() <= 2 << 30 && s.bytes() > (2 << 30) - 64);
        assert!(slot_fits(&Shares::of(MIN_SLOT_BYTES), 8, 3, 15, 1024));
        assert!(!slot_fits(&Shares::of(64 << 10), 8, 3, 15, 1024));
    }

    #[test]
    fn growth_stays_within_the_share() {
        assert_eq!(grow_to(100, 1000, 10_000), 1250);
        assert_eq!(grow_to(100, 1000, 1100), 1100);
        assert_eq!(grow_to(5000, 1000, 10_000), 5000);
        assert_eq!(grow_to(0, 20_000, 10_000), 10_000);
    }

    proptest! {
        /// The ranges cover `[p0, p1)` exactly, in order, without overlap, and there are at
        /// least two, so the recursion on an overflowing range makes progress.
        #[test]
        fn packet_ranges_partition(p0 in 0u64..1 << 40, n in 2u64..1 << 22,
                                   cap in 1u64..1 << 20, extra in 1u64..1 << 30) {
            let parts = split_packets(p0, p0 + n, cap + extra, cap);
            prop_assert!(parts.len() >= 2);
            prop_assert_eq!(parts[0].0, p0);
            prop_assert_eq!(parts.last().unwrap().1, p0 + n);
            for w in parts.windows(2) {
                prop_assert_eq!(w[0].1, w[1].0);
            }
            for (a, b) in &parts {
                prop_assert!(a < b);
            }
        }

        /// A batch never needs more words than the work share holds (when one domain fits).
        #[test]
        fn batches_fit(work in 1u64..1 << 34, limbs in 1u64..=8, kappa_bits in 0u32..=6) {
            let b = batch_domains(work, limbs, kappa_bits);
            if work >= work_words_per_domain(limbs, kappa_bits) {
                prop_assert!(b * work_words_per_domain(limbs, kappa_bits) <= work);
            }
            prop_assert!(b >= 1);
        }
    }
}
