//! What a search is asked: the function, format and threshold, the existence test, the
//! generation's settings, and the routes it may take (trivial regions, the dense route, where
//! steep pieces are split).

use crate::numbers::format::{Format, Precision};
use crate::oracle::function::Function;
use crate::search::existence::Test;
use crate::search::generation::GenConfig;

/// The largest threshold `k` the engine takes: phase 3 keeps the top 64 bits of each fraction,
/// and its threshold must stay meaningful beside that truncation.
pub const MAX_MIN_BITS: u32 = 60;

/// What to search for and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchConfig {
    pub function: Function,
    pub precision: Precision,
    pub min_bits: u32,
    pub test: Test,
    pub gen: GenConfig,
    /// Domains per packet: the unit of parallel work in phase 1.
    pub packet_domains: u64,
    /// List trivial regions (where `f(x)` rounds like `x` or like `f(0)`, `trivial.rs`) as
    /// runs with their rule rather than case by case.
    pub trivial_regions: bool,
    /// Walk small pieces on their full-degree polynomial and verify only the candidates
    /// (`dense.rs`) instead of judging every argument with MPFR. Off only to compare the two.
    pub dense: bool,
    /// Search sin, cos and tan of large arguments along progressions of the angle
    /// (`progression.rs`) where the grid's step is a large angle. Off only to compare with the
    /// dyadic route.
    pub progressions: bool,
    /// On that route, generate the pieces of sin, cos, sinpi and cospi from the sine and
    /// cosine of their centers (`sincos.rs`) rather than from series of the function. Off only
    /// to compare the two.
    pub sincos: bool,
    /// Search sinpi, cospi and tanpi units that hold two periods (2) or more on their first
    /// period and copy its cases (`periodic.rs`). Off only to compare with the full search.
    pub periodic: bool,
    /// Where steep pieces are split in halves for speed ([`SteepSplit`]).
    pub steep: SteepSplit,
}

/// Steep pieces (the curvature lowered the domain size) wider than `max_limbs` limbs
/// (`max_limbs_screened` where phase 1 screens them, §16) are split in halves while the halves
/// keep at least `min_domains` domains. A route only: the tests force it on at small
/// precisions (both limits 0) against the brute force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SteepSplit {
    pub max_limbs: usize,
    pub max_limbs_screened: usize,
    pub min_domains: u64,
}

impl SteepSplit {
    /// The engine's choice, from exp in binary64 at 44 bits on one H100
    /// (docs/benchmarks-history.md, 2026-11-24 and 2026-11-25): with the line test, pieces of
    /// `2^34` near 300 (degree 8, 5 limbs) ran 7 times faster per argument than `2^38` (degree
    /// 11, 8 limbs) and a little faster than `2^32` or `2^30`;
    /// screened, whose domains are 4 to 8 times fewer, pieces of 6 limbs ran 10-26% faster than
    /// of 5 from 64 to 1024, and of 7 or 8 slower near 64, 128 and 512.
    pub const DEFAULT: SteepSplit = SteepSplit {
        max_limbs: 5,
        max_limbs_screened: 6,
        min_domains: 1 << 22,
    };

    /// The width above which a piece is split: `g.quadratic` says whether it is screened.
    pub fn limbs_for(&self, quadratic: bool) -> usize {
        if quadratic {
            self.max_limbs_screened
        } else {
            self.max_limbs
        }
    }
}

impl SearchConfig {
    pub fn new(function: Function, precision: Precision, min_bits: u32) -> SearchConfig {
        SearchConfig {
            function,
            precision,
            min_bits,
            test: Test::Regular,
            gen: GenConfig::new(min_bits),
            packet_domains: 4096,
            trivial_regions: true,
            dense: true,
            progressions: true,
            sincos: true,
            periodic: true,
            steep: SteepSplit::DEFAULT,
        }
    }

    /// As [`SearchConfig::new`], in format `fmt` (a named format brings its exponent range).
    pub fn in_format(function: Function, fmt: Format, min_bits: u32) -> SearchConfig {
        let mut cfg = SearchConfig::new(function, fmt.precision, min_bits);
        cfg.gen.exponents = fmt.exponents;
        cfg
    }

    /// The format searched: the precision, with the exponent range generation judges by.
    pub fn format(&self) -> Format {
        Format {
            precision: self.precision,
            exponents: self.gen.exponents,
        }
    }
}
