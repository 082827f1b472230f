//! Published binary64 worst cases: a range of 2^20 arguments around each must report it, with
//! the published hardness and kind (Lefevre and Muller's tables, as used by CORE-MATH).

use rug::float::Round;
use tmd_kernels::numbers::format::{parse_number, Argument};
use tmd_kernels::oracle::verify::Kind;
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::existence::Test;
use tmd_kernels::search::generation::FLAT_DOMAIN_BITS;
use tmd_kernels::search::{search_units, Cpu, SearchConfig};
use tmd_kernels::{Function, Precision};

fn around(x: &str, half_width: u64) -> UnitSpec {
    let p = Precision::BINARY64;
    let a = Argument::from_float(&parse_number(x, 53, Round::Nearest).unwrap(), p).unwrap();
    let first = (a.significand - half_width).max(1 << 52);
    let last = (a.significand + half_width).min((1 << 53) - 1);
    UnitSpec {
        negative: a.negative,
        exponent: a.exponent,
        first,
        count: last - first + 1,
    }
}

fn check(f: Function, x: &str, bits: u32, kind: Kind) {
    let unit = around(x, 1 << 19);
    // The default domains, and the published 2^15 everywhere (no larger domains where f is
    // flat): there phase 1 has enough domains for its filter to be judged.
    for (test, flat_bits) in [
        (Test::Regular, FLAT_DOMAIN_BITS),
        (Test::Lefevre, FLAT_DOMAIN_BITS),
        (Test::Regular, 15),
        (Test::Lefevre, 15),
    ] {
        let mut cfg = SearchConfig::new(f, Precision::BINARY64, 40);
        cfg.test = test;
        cfg.gen.flat_domain_bits = flat_bits;
        let r = search_units(&cfg, &[unit], &Cpu, &|_| {}).unwrap();
        let want = x.to_ascii_lowercase();
        let case = r
            .hr_cases
            .iter()
            .find(|c| c.x == want)
            .unwrap_or_else(|| panic!("{f}({x}) not reported; got {:?}", r.hr_cases));
        assert_eq!((case.bits, case.kind), (bits, kind), "{f}({x})");
        assert_eq!(
            r.stats.exhaustive_arguments, 0,
            "the polynomial path is used"
        );
        if flat_bits == 15 {
            assert!(
                r.stats.phase1_failures < r.stats.domains / 4,
                "{:?}",
                r.stats
            );
        }
    }
}

#[test]
fn exp_of_minus_0x1_e8bdbfcd9144ep3_has_54_bits() {
    check(Function::Exp, "-0x1.E8BDBFCD9144Ep+3", 54, Kind::Fp);
}

#[test]
fn exp_of_minus_0x1_71e0b869b5e79p2_has_52_bits() {
    check(Function::Exp, "-0x1.71E0B869B5E79p+2", 52, Kind::Mid);
}

#[test]
fn log_of_0x1_ac50b409c8aeep8_has_60_bits() {
    check(Function::Log, "0x1.ac50b409c8aeep+8", 60, Kind::Fp);
}

#[test]
fn exp_of_0x1_9e9cbbfd6080bp_31_has_57_bits() {
    check(Function::Exp, "0x1.9e9cbbfd6080bp-31", 57, Kind::Mid);
}
