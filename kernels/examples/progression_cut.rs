//! Times the progression route's generation and the host's walk per argument, cut by cut
//! (`progression::Cut`'s longest piece `2^17`, `2^19`, `2^21` at the default span), on the first
//! initial pieces of one binary64 unit of sin, cos or tan, on one thread: what the choice of
//! the longest piece trades (generation per argument against the walk's words).
//!
//! `cargo run --release --example progression_cut -- sin 1023 44 43 [pieces]`: function, the
//! binade's exponent, log2 of the unit's arguments, the threshold in bits, initial pieces
//! timed (default 24).
use std::collections::BTreeMap;
use std::time::Instant;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::progression::{dense_pieces, plan_with, Cut};
use tmd_kernels::search::{dense, SearchConfig};
use tmd_kernels::Function;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        eprintln!("usage: progression_cut FUNCTION EXPONENT UNIT_BITS MIN_BITS [PIECES]");
        std::process::exit(2);
    }
    let f: Function = args[0].parse().expect("a function");
    let exponent: i32 = args[1].parse().expect("an exponent");
    let bits: u32 = args[2].parse().expect("log2 of the unit's arguments");
    let k: u32 = args[3].parse().expect("the threshold in bits");
    let n: u64 = args
        .get(4)
        .map_or(24, |a| a.parse().expect("a count of pieces"));
    let fmt = Format::named("binary64").unwrap();
    let unit = UnitSpec {
        negative: false,
        exponent,
        first: 1 << 52,
        count: 1 << bits,
    };
    let cfg = SearchConfig::in_format(f, fmt, k);
    println!("{f} at 2^{exponent}, a unit of 2^{bits}, {k} bits, the first {n} initial pieces");
    for max_bits in [17, 19, 21] {
        let cut = Cut {
            max_piece: 1 << max_bits,
            ..Cut::DEFAULT
        };
        let Some(pr) = plan_with(f, fmt.precision, unit, cut) else {
            println!("  longest 2^{max_bits}: no progression");
            continue;
        };
        let t = Instant::now();
        let pieces = dense_pieces(&cfg, unit, pr, 0..n);
        let gen = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let kept: usize = pieces
            .iter()
            .map(|(d, c)| dense::candidates(d, *c).len())
            .sum();
        let walk = t.elapsed().as_secs_f64();
        let args: u64 = pieces.iter().map(|p| p.1).sum();
        let (mut shapes, mut diffs) = (BTreeMap::new(), 0u64);
        for (d, c) in &pieces {
            *shapes.entry((d.fx().degree, d.fx().limbs)).or_insert(0u64) += c;
            diffs += c * d.narrowing(*c).map_or(0, |w| w.diffs as u64);
        }
        let shapes: Vec<String> = shapes
            .iter()
            .map(|((deg, l), c)| format!("{deg}/{l} {:.0}%", 100.0 * *c as f64 / args as f64))
            .collect();
        println!(
            "  longest 2^{max_bits}: q {}, {} pieces a unit ({} arguments each here); generation \
             {:.1} us a piece, {:.3} ns an argument; walk {:.2} ns an argument ({kept} kept); \
             narrowed to {:.1} differences on average; degree/limbs {}",
            pr.q,
            pr.q * pr.per_class,
            args / pieces.len().max(1) as u64,
            1e6 * gen / pieces.len().max(1) as f64,
            1e9 * gen / args.max(1) as f64,
            1e9 * walk / args.max(1) as f64,
            diffs as f64 / args.max(1) as f64,
            shapes.join(", ")
        );
    }
}
