//! Times one binary64 unit (from the binade's first argument, the periodic route off) of sin,
//! cos, tan, sinpi, cospi or tanpi on the CPU's cores, on each route in one process: along
//! the progressions with pieces from two numbers (`sincos.rs`, sin, cos, sinpi and cospi),
//! along the progressions with pieces from series, and (unless `nodyadic` follows) on the
//! dyadic route; checks that all find the same cases.
//!
//! `cargo run --release --example progression_routes -- sinpi 22 24 44 [nodyadic]`: function,
//! the binade's exponent, log2 of the unit's arguments, the threshold in bits.
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
    let dyadic = args.get(4).is_none_or(|a| a != "nodyadic");
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
    let routes = [
        ("walked, pieces from two numbers", true, true),
        ("walked, pieces from series", true, false),
        ("dyadic", false, false),
    ];
    for (name, walk, sincos) in routes.into_iter().take(if dyadic { 3 } else { 2 }) {
        cfg.progressions = walk;
        cfg.sincos = sincos;
        let t = Instant::now();
        let r = search_unit(&cfg, unit, &Cpu).expect("search");
        println!(
            "{f} 2^{exponent} 2^{bits} args k={k} {name}: {:.2} s, {} HR-cases, generation {:.2} s, walk {:.2} s (summed over threads), walked {}, pieces {}",
            t.elapsed().as_secs_f64(),
            r.hr_cases.len(),
            r.timings.generation_s,
            r.timings.phase3_s,
            r.stats.progression_arguments,
            r.stats.pieces
        );
        found.push(r.hr_cases);
    }
    assert!(
        found.windows(2).all(|w| w[0] == w[1]),
        "the routes disagree"
    );
}
