//! Whole binades of sin, cos and tan (or any function) searched by the engine, each against an
//! MPFR brute force of every one of its arguments: the HR-cases and exact cases must be the
//! same, none missed and none extra. One line per binade (the route the engine took, its
//! cases, what differs, the seconds of each side), then a total; exits 1 on any difference.
//!
//! `cargo run --release --example trig_brute -- binary32 sin,cos,tan 20 127 10 [neg] [every=N]`:
//! format, functions, the first and last binade's exponent (the binade `[2^e, 2^(e+1))`), the
//! threshold in bits, `neg` for the binades of negative arguments, `every=N` for every `N`-th
//! binade from the first (and the last) instead of all. sin and tan are odd and
//! cos even, so the cases of one sign are those of the other, mirrored: one sign covers both.
//! On two cores a binade of binary32 takes about 12 s, nearly all of it the brute force's.
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;
use tmd_kernels::numbers::format::Format;
use tmd_kernels::oracle::verify::{classify_in, Verdict};
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::{search_unit, Cpu, SearchConfig};
use tmd_kernels::Function;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        eprintln!(
            "usage: trig_brute FORMAT FUNCTIONS FIRST_EXPONENT LAST_EXPONENT BITS [neg] [every=N]"
        );
        std::process::exit(2);
    }
    let fmt = Format::named(&args[0]).expect("a named format");
    let functions: Vec<Function> = args[1]
        .split(',')
        .map(|f| f.parse().expect("a function"))
        .collect();
    let first: i32 = args[2].parse().expect("the first exponent");
    let last: i32 = args[3].parse().expect("the last exponent");
    let k: u32 = args[4].parse().expect("bits");
    let negative = args[5..].iter().any(|a| a == "neg");
    let every: i32 = args[5..]
        .iter()
        .find_map(|a| a.strip_prefix("every="))
        .map_or(1, |n| n.parse().expect("every=N, N >= 1"))
        .max(1);
    let p = fmt.precision.bits();
    let (mut binades, mut arguments, mut cases, mut walked, mut bad) = (0u64, 0u64, 0u64, 0u64, 0);
    let started = Instant::now();
    for f in functions {
        let cfg = SearchConfig::in_format(f, fmt, k);
        for e in (first..=last).filter(|e| (e - first) % every == 0 || *e == last) {
            let unit = UnitSpec {
                negative,
                exponent: e,
                first: 1 << (p - 1),
                count: 1 << (p - 1),
            };
            let t = Instant::now();
            let r = search_unit(&cfg, unit, &Cpu).expect("search");
            let engine_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let truth: Vec<Verdict> = (0..unit.count)
                .into_par_iter()
                .map(|o| classify_in(f, fmt, &unit.argument(o), k).expect("MPFR"))
                .collect();
            let brute_s = t.elapsed().as_secs_f64();
            let mut want = BTreeMap::new();
            let mut want_exact = Vec::new();
            for v in truth {
                match v {
                    Verdict::Hard(c) => {
                        want.insert(c.x.clone(), c);
                    }
                    Verdict::Exact(x) => want_exact.push(x),
                    _ => {}
                }
            }
            let got: BTreeMap<_, _> = r
                .hr_cases
                .iter()
                .map(|c| (c.x.clone(), c.clone()))
                .collect();
            let missed = want.keys().filter(|x| !got.contains_key(*x)).count();
            let extra = got.keys().filter(|x| !want.contains_key(*x)).count();
            let differ = got
                .iter()
                .filter(|(x, c)| want.get(*x).is_some_and(|w| w != *c))
                .count();
            let exact_ok = r.exact_cases == want_exact && r.skipped.is_empty();
            let ok = missed == 0 && extra == 0 && differ == 0 && exact_ok;
            println!(
                "{} {f} 2^{e} {}: {} HR-cases, missed {missed}, extra {extra}, differ {differ}, \
                 exact cases {} ({}), walked along progressions {}, engine {engine_s:.2} s, \
                 MPFR {brute_s:.2} s",
                fmt.name(),
                if negative { "negative" } else { "positive" },
                want.len(),
                want_exact.len(),
                if exact_ok { "same" } else { "DIFFER" },
                r.stats.progression_arguments,
            );
            let _ = std::io::stdout().flush();
            binades += 1;
            arguments += unit.count;
            cases += want.len() as u64;
            walked += r.stats.progression_arguments;
            bad += usize::from(!ok);
        }
    }
    println!(
        "total: {binades} binades, {arguments} arguments, {cases} HR-cases, {walked} walked \
         along progressions, {bad} binades differ, {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if bad > 0 {
        std::process::exit(1);
    }
}
