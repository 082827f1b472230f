//! The counters of reference units, pinned to `ENGINE_VERSION`: the coordinator compares two
//! results of a unit only when the same engine version computed them (`docs/trust.md`), so a
//! change that moves any counter must raise the version. This test fails until it is raised
//! and the table below holds the new counters.

use std::str::FromStr;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::plan::split_range_in;
use tmd_kernels::search::{search_units, Cpu, SearchConfig};
use tmd_kernels::{Function, ENGINE_VERSION};

/// A unit range and what the engine of [`PINNED_VERSION`] counts there: units, domains,
/// phase-1 failures, subdomains, phase-2 failures, phase-3 arguments, candidates, false
/// positives (the eight counters a result claims), the HR-cases found, then the arguments
/// walked along progressions (sin, cos and tan of large arguments).
struct Reference {
    function: &'static str,
    format: &'static str,
    from: &'static str,
    to: &'static str,
    min_bits: u32,
    unit_bits: u32,
    counters: [u64; 10],
}

/// The version whose counters the table holds.
const PINNED_VERSION: u32 = 10;

/// The routes that decide the counters: flat screened domains on `[1, 2)` (`2^18`), steep
/// screened and striped ones near 512 (`2^12`, phase-1 and phase-2 failures), tan near its pole
/// and sinh near -256 (steep, split), the line test where exp is flat (`2^20` near `2^-12`),
/// binary32 on the line with trivial runs, candidates and false positives, binary80 near 64,
/// sin near 2^24 along progressions, sin near 2^100 along progressions of the coarser cut
/// (units of 2^21), sinpi near 16 by its first period, sinpi near 2^22 walked on its grid.
/// About a second on two cores.
const REFERENCES: &[Reference] = &[
    Reference {
        function: "exp",
        format: "binary64",
        from: "0x1p+0",
        to: "0x1.0004p+0",
        min_bits: 44,
        unit_bits: 36,
        counters: [4, 1048576, 8, 512, 0, 0, 0, 0, 0, 0],
    },
    Reference {
        function: "exp",
        format: "binary64",
        from: "0x1p+9",
        to: "0x1.000008p+9",
        min_bits: 44,
        unit_bits: 28,
        counters: [8, 524288, 325, 2600, 17, 8704, 0, 0, 0, 0],
    },
    Reference {
        function: "tan",
        format: "binary64",
        from: "0x1.92p+0",
        to: "0x1.920002p+0",
        min_bits: 44,
        unit_bits: 28,
        counters: [2, 1048576, 249, 1992, 5, 320, 0, 0, 0, 0],
    },
    Reference {
        function: "sinh",
        format: "binary64",
        from: "-0x1.000008p+8",
        to: "-0x1p+8",
        min_bits: 44,
        unit_bits: 28,
        counters: [9, 262144, 6, 48, 12, 12288, 0, 0, 0, 0],
    },
    Reference {
        function: "exp",
        format: "binary64",
        from: "0x1p-12",
        to: "0x1.00004p-12",
        min_bits: 44,
        unit_bits: 28,
        counters: [64, 16384, 0, 0, 0, 0, 0, 0, 0, 0],
    },
    Reference {
        function: "exp",
        format: "binary32",
        from: "-0x1p+7",
        to: "-0x1p+4",
        min_bits: 20,
        unit_bits: 20,
        counters: [
            25, 643989, 586621, 4692968, 65720, 266052, 1276, 1241, 35, 0,
        ],
    },
    Reference {
        function: "exp",
        format: "binary80",
        from: "0x1p+6",
        to: "0x1.0000008p+6",
        min_bits: 54,
        unit_bits: 32,
        counters: [64, 1048576, 10, 640, 0, 0, 0, 0, 0, 0],
    },
    Reference {
        function: "sin",
        format: "binary64",
        from: "0x1p+24",
        to: "0x1.00000004p+24",
        min_bits: 20,
        unit_bits: 22,
        counters: [1, 0, 0, 0, 0, 0, 6, 0, 6, 4194304],
    },
    Reference {
        function: "sinpi",
        format: "binary32",
        from: "0x1p+4",
        to: "0x1.8p+4",
        min_bits: 16,
        unit_bits: 22,
        counters: [1, 32256, 31464, 251712, 5954, 23816, 216, 186, 112, 0],
    },
    Reference {
        function: "sin",
        format: "binary64",
        from: "0x1p+100",
        to: "0x1.00000002p+100",
        min_bits: 16,
        unit_bits: 21,
        counters: [1, 0, 0, 0, 0, 0, 63, 0, 63, 2096720],
    },
    Reference {
        function: "sinpi",
        format: "binary64",
        from: "0x1p+22",
        to: "0x1.0000001p+22",
        min_bits: 24,
        unit_bits: 22,
        counters: [4, 0, 0, 0, 0, 0, 3, 0, 3, 16777200],
    },
];

fn counters(r: &Reference) -> [u64; 10] {
    let f = Function::from_str(r.function).unwrap();
    let fmt = Format::from_str(r.format).unwrap();
    let units = split_range_in(f, fmt, r.from, r.to, Some(r.unit_bits)).unwrap();
    let cfg = SearchConfig::in_format(f, fmt, r.min_bits);
    let got = search_units(&cfg, &units, &Cpu, &|_| {}).unwrap();
    let s = got.stats;
    [
        s.units,
        s.domains,
        s.phase1_failures,
        s.subdomains,
        s.phase2_failures,
        s.phase3_arguments,
        s.candidates,
        s.false_positives,
        got.hr_cases.len() as u64,
        s.progression_arguments,
    ]
}

#[test]
fn the_reference_counters_are_those_of_the_engine_version() {
    let mut moved = Vec::new();
    for r in REFERENCES {
        let got = counters(r);
        if got != r.counters {
            moved.push(format!(
                "{} {} [{}, {}) k={} units of 2^{}: pinned {:?}, now {:?}",
                r.function, r.format, r.from, r.to, r.min_bits, r.unit_bits, r.counters, got
            ));
        }
    }
    assert!(
        moved.is_empty() && ENGINE_VERSION == PINNED_VERSION,
        "the counters of reference units moved (or ENGINE_VERSION is {ENGINE_VERSION}, the \
         table's {PINNED_VERSION}): results of this engine would disagree with those of \
         version {PINNED_VERSION}. Raise tmd_kernels::ENGINE_VERSION, set PINNED_VERSION to it \
         and the table to the new counters.\n{}",
        moved.join("\n")
    );
    // The table covers the routes it names: every reference searched some domains or walked
    // some progressions.
    assert!(REFERENCES
        .iter()
        .all(|r| r.counters[1] > 0 || r.counters[9] > 0));
}
