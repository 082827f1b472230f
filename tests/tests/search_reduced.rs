//! A reduced local search (`tmd-worker search --whole` for cbrt in binary16) in every output
//! format: the derived runs are named (table lines, `# derived` lines of a wc file, stderr
//! beside a csv), the cases equal those of `--no-reduction`, and a journal written with the
//! reduction is not resumed without it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use tmd_tests::{bin, scratch};

const CBRT: [&str; 9] = [
    "--function",
    "cbrt",
    "--format",
    "binary16",
    "--whole",
    "--min-bits",
    "6",
    "--unit-bits",
    "7",
];

fn search(extra: &[&str]) -> Output {
    let out = Command::new(bin("tmd-worker"))
        .arg("search")
        .args(CBRT)
        .args(["--backend", "cpu", "--threads", "2", "--quiet"])
        .args(extra)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    out
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lines of a file that are cases, not comments.
fn cases(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_reduced_search_names_its_derived_runs_in_every_output() {
    let dir = scratch("search-reduced");
    // wc: `# derived` lines, the same cases as without the reduction.
    let (reduced, full) = (dir.join("reduced.wc"), dir.join("full.wc"));
    ok(&search(&[
        "--output",
        "wc",
        "-o",
        reduced.to_str().unwrap(),
    ]));
    ok(&search(&[
        "--output",
        "wc",
        "-o",
        full.to_str().unwrap(),
        "--no-reduction",
    ]));
    let text = std::fs::read_to_string(&reduced).unwrap();
    let derived: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("# derived"))
        .collect();
    assert_eq!(derived.len(), 4, "{text}");
    assert!(
        derived[0].contains("cbrt(8x) = 2 cbrt(x)") && derived[0].contains("from (-8, -1]"),
        "{}",
        derived[0]
    );
    assert!(!std::fs::read_to_string(&full)
        .unwrap()
        .contains("# derived"));
    let want = cases(&full);
    assert!(want.len() > 100, "{} cases", want.len());
    assert_eq!(cases(&reduced), want);

    // table: the argument counts and the derived lines.
    let table = ok(&search(&[]));
    assert!(
        table.contains("6145 arguments searched and 57342 derived"),
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("derived [")).count(),
        4
    );

    // csv: the runs on stderr, the rows alone on stdout, the same cases.
    let csv = search(&["--output", "csv"]);
    let rows = ok(&csv);
    let stderr = String::from_utf8_lossy(&csv.stderr);
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("tmd: derived ["))
            .count(),
        4 * 2,
        "the plan's lines and the output's: {stderr}"
    );
    assert_eq!(
        rows.lines().count(),
        want.len() + 1,
        "header and one row per case"
    );

    // A journal written with the reduction holds other units: not resumed without it.
    let out = dir.join("resumed.csv");
    ok(&search(&["--output", "csv", "-o", out.to_str().unwrap()]));
    let again = search(&[
        "--output",
        "csv",
        "-o",
        out.to_str().unwrap(),
        "--resume",
        "--no-reduction",
    ]);
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("cannot resume"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    // With it, the finished search resumes to the same file.
    ok(&search(&[
        "--output",
        "csv",
        "-o",
        out.to_str().unwrap(),
        "--resume",
    ]));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().lines().count(),
        want.len() + 1
    );
}
