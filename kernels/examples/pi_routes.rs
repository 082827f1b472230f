//! Times sinpi, cospi or tanpi in binary64 on one unit (from the binade's first argument, the
//! periodic route off) walked on its grid and on the dyadic route, on the CPU's cores, and
//! checks that both find the same cases.
//!
//! `cargo run --release --example pi_routes -- sinpi 22 24 44`: function, the binade's
//! exponent, log2 of the unit's arguments, the threshold in bits.
use std::time::Instant;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::{search_unit, Cpu, SearchConfig};
use tmd_kernels::Function;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let f: Function = args[0].parse().expect("a function");
    let exponent: i32 = args[1].parse().expect("an exponent");
    let bits: u32 = args[2].parse().expect("log2 of the count");
    let k: u32 = args[3].parse().expect("bits");
    let fmt = Format::named("binary64").unwrap();
    let unit = UnitSpec {
        negative: false,
        exponent,
        first: 1 << 52,
        count: 1 << bits,
    };
    let mut cfg = SearchConfig::in_format(f, fmt, k);
    cfg.periodic = false;
    let mut found = Vec::new();
    for walk in [true, false] {
        cfg.progressions = walk;
        let t = Instant::now();
        let r = search_unit(&cfg, unit, &Cpu).expect("search");
        println!(
            "{f} 2^{exponent} 2^{bits} args k={k} {}: {:.2} s, {} HR-cases, generation {:.1} s, walk {:.1} s (summed over threads), walked {}",
            if walk { "walked on the grid" } else { "dyadic" },
            t.elapsed().as_secs_f64(),
            r.hr_cases.len(),
            r.timings.generation_s,
            r.timings.phase3_s,
            r.stats.progression_arguments
        );
        found.push(r.hr_cases);
    }
    assert_eq!(found[0], found[1], "the routes disagree");
}
