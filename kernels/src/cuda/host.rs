//! The GPU self-test's existence tests on the host: `tmd.cu` compiled
//! by the host's C++ compiler with `cuda/host_shim.h` (CUDA's intrinsics, exact), its
//! `tmd_selftest_tests` run for every case as its thread would, and the answers compared with
//! the CPU's on the self-test's 131,072 inputs. CI has no GPU: this runs the kernels' own code
//! for the regular and Lefevre tests, the flat shortcut and the quadratic screen there.

use super::selftest::tests_reference;
use std::path::Path;
use std::process::Command;

#[test]
fn the_existence_tests_device_code_gives_the_cpus_answers_on_the_host() {
    let cuda = Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda");
    let dir = std::env::temp_dir().join(format!("tmd-host-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("host_selftest");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let status = Command::new(&cxx)
        .args(["-O2", "-std=c++17", "-w", "-I"])
        .arg(&cuda)
        .arg(cuda.join("host_selftest.cpp"))
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("{cxx}: {e} (a C++ compiler; scripts/setup.sh installs g++)"));
    assert!(
        status.success(),
        "{cxx} could not compile tmd.cu for the host"
    );

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
