//! A local search written to a file, killed in the middle and resumed: the cases found before
//! the kill are on disk, the resume computes only the units the journal lacks, and the final
//! file equals that of a search never interrupted.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tmd_tests::{bin, scratch, EXP_BINARY64_24_UNITS};

fn search(out: &std::path::Path, extra: &[&str]) -> Command {
    let mut c = Command::new(bin("tmd-worker"));
    c.arg("search")
        .args(EXP_BINARY64_24_UNITS)
        .args([
            "--threads",
            "2",
            "--backend",
            "cpu",
            "--output",
            "csv",
            "-o",
        ])
        .arg(out)
        .args(extra)
        .env("RUST_BACKTRACE", "0");
    c
}

fn case_lines(path: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

#[test]
fn an_interrupted_search_keeps_its_cases_and_resumes() {
    let dir = scratch("search-resume");
    let whole = dir.join("whole.csv");
    let out = search(&whole, &["--quiet"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = case_lines(&whole);
    assert!(want.len() > 10, "{} cases", want.len());

    // Killed once a few units are journaled.
    let cut = dir.join("cut.csv");
    let journal = dir.join("cut.csv.journal");
    let mut child = search(&cut, &[])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        let units = std::fs::read_to_string(&journal)
            .map(|j| j.lines().count().saturating_sub(1))
            .unwrap_or(0);
        if units >= 4 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "no units journaled in 120 s"
        );
        assert!(child.try_wait().unwrap().is_none(), "finished too early");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let kept = case_lines(&cut);
    assert!(!kept.is_empty(), "no case on disk after the kill");
    assert!(
        kept.is_subset(&want),
        "cases on disk that the search does not find"
    );
    assert!(kept.len() < want.len(), "the search was not interrupted");

    // Without --resume the file is not overwritten.
    let again = search(&cut, &["--quiet"]).output().unwrap();
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("--resume"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    // A resume with other settings is refused.
    let mut other = Command::new(bin("tmd-worker"));
    other
        .arg("search")
        .args([
            "--function",
            "exp",
            "--format",
            "binary64",
            "--min-bits",
            "37",
            "--from",
            "0x1p+0",
            "--to",
            "0x1.0018p+0",
            "--unit-bits",
            "36",
            "--output",
            "csv",
            "--resume",
            "--quiet",
            "-o",
        ])
        .arg(&cut);
    let refused = other.output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds another search"));

    // The resume computes the rest and ends with the uninterrupted search's file.
    let resumed = search(&cut, &["--resume"]).output().unwrap();
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    let done_before: usize = err
        .split("resuming: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no resume line in {err}"));
    assert!((4..24).contains(&done_before), "{err}");
    assert_eq!(
        std::fs::read_to_string(&cut).unwrap(),
        std::fs::read_to_string(&whole).unwrap()
    );
    let journaled = std::fs::read_to_string(&journal).unwrap().lines().count() - 1;
    assert_eq!(journaled, 24, "every unit journaled once");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_ends_a_search_with_130_and_says_how_to_resume() {
    let dir = scratch("search-interrupt");
    let cut = dir.join("cut.csv");
    let journal = dir.join("cut.csv.journal");
    let mut child = search(&cut, &["--quiet"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::fs::read_to_string(&journal).map_or(0, |j| j.lines().count()) < 2 {
        assert!(t.elapsed() < Duration::from_secs(120), "no unit in 120 s");
        assert!(child.try_wait().unwrap().is_none(), "finished too early");
        std::thread::sleep(Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("--resume") && err.contains("cut.csv.journal"),
        "{err}"
    );
    // What it said holds: the resume goes on from the journal.
    let resumed = search(&cut, &["--resume", "--quiet"]).output().unwrap();
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    assert!(err.contains("resuming: "), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
