//! The GPU self-test's existence tests on the host: `tmd.cu` compiled
//! by the host's C++ compiler with `cuda/host_shim.h` (CUDA's intrinsics, exact), its
//! `tmd_selftest_tests` run for every case as its thread would, and the answers compared with
//! the CPU's on the self-test's 131,072 inputs. CI has no GPU: this runs the kernels' own code
//! for the regular and Lefevre tests, the flat shortcut and the quadratic screen there.

use super::selftest::tests_reference;
use std::path::Path;
use std::process::Command;

/// Compiles the driver `cuda/<driver>.cpp` (which includes `tmd.cu`) with the host's C++
/// compiler (`CXX`, else `c++`) and `options` into `exe`.
fn compile_for_host(driver: &str, options: &[&str], exe: &Path) {
    let cuda = Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-w"])
        .args(options)
        .arg("-I")
        .arg(&cuda)
        .arg(cuda.join(format!("{driver}.cpp")))
        .arg("-o")
        .arg(exe)
        .status()
        .unwrap_or_else(|e| panic!("{cxx}: {e} (a C++ compiler; scripts/setup.sh installs g++)"));
    assert!(
        status.success(),
        "{cxx} could not compile tmd.cu for the host ({driver}, {options:?})"
    );
}

#[test]
fn the_existence_tests_device_code_gives_the_cpus_answers_on_the_host() {
    let dir = std::env::temp_dir().join(format!("tmd-host-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("host_selftest");
    compile_for_host("host_selftest", &["-O2"], &exe);

    let r = tests_reference();
    let count = r.a.len();
    let mut input = (count as u64).to_ne_bytes().to_vec();
    for v in [&r.a, &r.b, &r.n, &r.e] {
        input.extend(v.iter().flat_map(|x| x.to_ne_bytes()));
    }
    let (inp, outp) = (dir.join("in.bin"), dir.join("out.bin"));
    std::fs::write(&inp, input).unwrap();
    let status = Command::new(&exe).arg(&inp).arg(&outp).status().unwrap();
    assert!(status.success(), "the host run of tmd.cu failed");
    let out = std::fs::read(&outp).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.len(), count * (3 * 4 + 3 * 8));
    let (answers, hits) = out.split_at(count * 12);
    let u32_at = |i: usize| u32::from_ne_bytes(answers[4 * i..4 * i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_ne_bytes(hits[8 * i..8 * i + 8].try_into().unwrap());
    let mut wrong = Vec::new();
    for i in 0..count {
        let got = [u32_at(3 * i), u32_at(3 * i + 1), u32_at(3 * i + 2)];
        let got_screen = [u64_at(3 * i), u64_at(3 * i + 1), u64_at(3 * i + 2)];
        if got != r.want[i] || got_screen != r.want_screen[i] {
            wrong.push(format!(
                "a={:#x} b={:#x} n={} e={:#x}: {got:?} {got_screen:?}, CPU {:?} {:?}",
                r.a[i], r.b[i], r.n[i], r.e[i], r.want[i], r.want_screen[i]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {count} differ: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// The dense walk's device code (`tmd_narrow_walk` on the narrowed pieces' threads,
/// `tmd_dense_walk` on the others', as `walk::launch` runs them), compiled for the host at each word width
/// the pieces need and run thread by thread, keeps exactly the offsets of the host's walk
/// (`dense::candidates`): on the progression route's pieces of sin at `2^24` and `2^1000` and
/// of sinpi at `2^22` (binary64, 44 bits), of cos at `2^100` (120 bits) and of sinpi in
/// binary32 at `2^8` (12 bits): words of 2, 3 and 4 limbs, each width alone and all in one
/// launch at the widest (narrower words in the top limbs); and on the same pieces with
/// thresholds widened to keep about one offset in 32, so that the kept lists are long.
#[test]
fn the_dense_walks_device_code_keeps_the_hosts_offsets_on_the_host() {
    use super::walk::{WalkInputs, CHUNK_BITS};
    use crate::numbers::format::Format;
    use crate::oracle::function::Function;
    use crate::plan::UnitSpec;
    use crate::search::config::SearchConfig;
    use crate::search::dense::{candidates, Dense};
    use crate::search::progression::{dense_pieces, plan};

    let mut pieces: Vec<(Dense, u64)> = Vec::new();
    for (f, format, k, exponent, first, count, initial) in [
        (
            Function::Sin,
            "binary64",
            44,
            24,
            0x3_1415_9265_3589u64,
            1u64 << 30,
            0..3u64,
        ),
        (
            Function::Sin,
            "binary64",
            44,
            1000,
            0x8_0000_0000_0001,
            1 << 30,
            0..2,
        ),
        (
            Function::Sinpi,
            "binary64",
            44,
            22,
            0x1234_5678,
            1 << 20,
            0..4,
        ),
        (
            Function::Cos,
            "binary64",
            120,
            100,
            0x1234_5678_9abc,
            1 << 30,
            0..2,
        ),
        (Function::Sinpi, "binary32", 12, 8, 0x1234, 1 << 20, 0..8),
    ] {
        let unit = UnitSpec {
            negative: false,
            exponent,
            first,
            count,
        };
        let fmt = Format::named(format).unwrap();
        let cfg = SearchConfig::in_format(f, fmt, k);
        let pr = plan(f, fmt.precision, unit).expect("the progression route");
        pieces.extend(dense_pieces(&cfg, unit, pr, initial));
    }
    assert!(pieces.len() >= 6, "{} pieces", pieces.len());
    let widened: Vec<(Dense, u64)> = pieces
        .iter()
        .map(|(d, n)| (d.clone().with_threshold(1 << 58), *n))
        .collect();
    pieces.extend(widened);
    let mut widths: Vec<usize> = pieces.iter().map(|(d, _)| d.fx().limbs).collect();
    widths.sort_unstable();
    widths.dedup();
    assert!(widths.len() >= 2, "pieces of {widths:?} limbs");
    let widest = *widths.last().expect("a width");
    // Each width alone, then every piece in one launch at the widest (as `walk::run` does).
    let mut groups: Vec<(usize, Option<usize>)> = widths.iter().map(|&l| (l, Some(l))).collect();
    groups.push((widest, None));

    let dir = std::env::temp_dir().join(format!("tmd-host-walk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut kept_total = 0;
    let mut narrowings = 0;
    let mut mixed = false;
    for (limbs, only) in groups {
        let exe = dir.join(format!("host_walk_{limbs}"));
        if !exe.exists() {
            compile_for_host("host_walk", &["-O1", &format!("-DTMD_L={limbs}")], &exe);
        }
        let group: Vec<(&Dense, u64)> = pieces
            .iter()
            .filter(|(d, _)| only.is_none_or(|l| d.fx().limbs == l))
            .map(|(d, n)| (d, *n))
            .collect();
        let w = WalkInputs::pack(&group).unwrap();
        let mut input = Vec::new();
        let degrees: Vec<u64> = w.degree.iter().map(|&d| d as u64).collect();
        let narrowed: Vec<u64> = w.narrow.iter().map(|&k| k as u64).collect();
        narrowings += narrowed.iter().filter(|&&k| k > 0).count();
        mixed |= 0 < w.narrowed_threads && w.narrowed_threads < w.threads();
        let head = [group.len() as u64, CHUNK_BITS as u64, w.narrowed_threads];
        for v in [
            &head[..],
            &w.beta,
            &w.count,
            &w.first,
            &degrees,
            &narrowed,
            &w.thr,
        ] {
            input.extend(v.iter().flat_map(|x| x.to_ne_bytes()));
        }
        let (inp, outp) = (dir.join("walk.in"), dir.join("walk.out"));
        std::fs::write(&inp, input).unwrap();
        let status = Command::new(&exe).arg(&inp).arg(&outp).status().unwrap();
        assert!(status.success(), "the host run of tmd_dense_walk failed");
        let out = std::fs::read(&outp).unwrap();
        let words: Vec<u64> = out
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            words[0] as usize,
            words.len() - 1,
            "the kept list overflowed"
        );
        let got = w.split(&words[1..]);
        for (i, (d, n)) in group.iter().enumerate() {
            let want = candidates(d, *n);
            assert_eq!(
                got[i],
                want,
                "piece {i} of {} limbs walked at {limbs}, degree {}, {n} offsets",
                d.fx().limbs,
                d.fx().degree
            );
            kept_total += want.len();
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(kept_total > 1000, "{kept_total} offsets kept in all");
    assert!(narrowings > 0, "no piece walked narrowed");
    assert!(mixed, "no launch had both narrowed and exact pieces");
}
