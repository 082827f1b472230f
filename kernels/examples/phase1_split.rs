//! Times the phase-1 walk alone and with each test, on the first domains of a binary64 exp unit.
//!
//! Modes, per domain, packets of 1024: 7 the packets' start tables alone; 0 the unit-step walk;
//! 5 the striped walk with the test's inputs; 6 the start tables and the stripes' set-up; 1 the
//! unit-step walk and the scalar regular test; 4 the same with the test in lanes; 2 and 3
//! Lefevre's test and four interleaved scalar regular tests.
use std::time::Instant;
use tmd_kernels::numbers::fixed;
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::existence::{regular_lanes, Test, LANES};
use tmd_kernels::search::generation::{generate, GenConfig};
use tmd_kernels::search::phases::packet_state;
use tmd_kernels::search::stripe::Stripes;
use tmd_kernels::{Function, Precision};

fn main() {
    let piece = UnitSpec {
        negative: false,
        exponent: 0,
        first: 1 << 52,
        count: 1 << 40,
    };
    let g = generate(
        Function::Exp,
        Precision::BINARY64,
        &GenConfig::new(32),
        piece,
    )
    .unwrap();
    assert_eq!(g.limbs, 5);
    let packets = 4096u64;
    for mode in [7, 0, 5, 6, 1, 4] {
        let c0 = cpu();
        let t = Instant::now();
        let mut fails = 0u64;
        for u in 0..packets {
            let (mut wb, mut ws, _) = packet_state::<5>(&g, u, 1024);
            if mode == 7 {
                fails += wb[0][0] & 1;
                continue;
            }
            if mode >= 5 {
                let mut st = Stripes::new(&wb, &ws).unwrap();
                if mode == 6 {
                    continue;
                }
                for _ in 0..1024 / 8 {
                    let (mut a, mut b) = ([0u64; 8], [0u64; 8]);
                    st.test_inputs(&mut a, &mut b);
                    fails += (0..8).filter(|&l| a[l] ^ b[l] == 7).count() as u64;
                    st.step();
                }
                continue;
            }
            let mut lane = 0;
            let (mut la, mut lb) = ([0u64; 4], [0u64; 4]);
            let (mut va, mut vb) = ([0u64; LANES], [0u64; LANES]);
            for _ in 0..1024 {
                let a = fixed::neg_floor64(&ws[0]);
                let b = fixed::ceil64(&wb[0]);
                if mode == 4 {
                    va[lane] = a;
                    vb[lane] = b;
                    lane += 1;
                    if lane == LANES {
                        let pass = regular_lanes(&va, &vb, 1 << 15, g.e1);
                        fails += LANES as u64 - pass.count_ones() as u64;
                        lane = 0;
                    }
                } else if mode == 3 {
                    la[lane] = a;
                    lb[lane] = b;
                    lane += 1;
                    if lane == 4 {
                        let r: [bool; 4] =
                            std::array::from_fn(|k| Test::Regular.run(la[k], lb[k], 1 << 15, g.e1));
                        fails += r.iter().filter(|&&x| !x).count() as u64;
                        lane = 0;
                    }
                } else {
                    let ok = match mode {
                        0 => (a ^ b) != 7,
                        1 => Test::Regular.run(a, b, 1 << 15, g.e1),
                        _ => Test::Lefevre.run(a, b, 1 << 15, g.e1),
                    };
                    fails += !ok as u64;
                }
                // Only b and the slope, as phase 1 walks.
                for w in [&mut wb, &mut ws] {
                    for l in 0..w.len() - 1 {
                        let n = w[l + 1];
                        fixed::add(&mut w[l], &n);
                    }
                }
            }
        }
        let ns = t.elapsed().as_secs_f64() * 1e9 / (packets * 1024) as f64;
        let cns = (cpu() - c0) * 1e9 / (packets * 1024) as f64;
        println!("mode {mode}: {ns:.1} ns wall, {cns:.1} ns CPU per domain, fails {fails}");
    }
}

fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}
