//! The journal of a local `search` written to a file: one JSON line per finished unit, so that
//! an interrupted search keeps what it found and `--resume` goes on where it stopped.
//!
//! The first line says what is searched (function, format, threshold, range, engine sizes); a
//! resume with other settings is refused rather than mixing two searches in one file. Each
//! later line is a whole unit's result, written with one `write` and flushed: a crash leaves at
//! most a torn last line, which a resume cuts off (that unit is simply computed again).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tmd_kernels::plan::UnitSpec;
use tmd_kernels::search::UnitResult;

/// What a journal's search is; two searches are the same when these are equal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub tmd_search_journal: u32,
    pub function: String,
    pub precision: u32,
    /// The format's name (`binary32`, or `p24` for a bare precision): named formats judge
    /// results on their exponent range, bare ones do not. Absent in journals written before.
    #[serde(default)]
    pub format: String,
    pub min_bits: u32,
    pub test: String,
    pub from: String,
    pub to: String,
    pub unit_bits: Option<u32>,
    pub domain_bits: u32,
}

/// The journal's version: a file of another version is refused.
pub const VERSION: u32 = 1;

/// The journal beside an output file: `cases.csv` -> `cases.csv.journal`.
pub fn path_for(output: &Path) -> PathBuf {
    let mut p = output.as_os_str().to_owned();
    p.push(".journal");
    PathBuf::from(p)
}

/// An open journal, appended to as units finish.
pub struct Journal {
    file: File,
    path: PathBuf,
    last_sync: Instant,
}

impl Journal {
    /// Starts a new journal at `path`; refuses to overwrite one.
    pub fn create(path: &Path, header: &Header) -> Result<Journal> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("creating the journal {}", path.display()))?;
        let mut line = serde_json::to_string(header)?;
        line.push('\n');
        file.write_all(line.as_bytes())?;
        file.sync_data()?;
        Ok(Journal {
            file,
            path: path.to_path_buf(),
            last_sync: Instant::now(),
        })
    }

    /// Opens the journal at `path` to go on with the search `header` describes: its finished
    /// units, and the journal ready for more (a torn last line cut off).
    pub fn resume(path: &Path, header: &Header) -> Result<(Journal, Vec<UnitResult>)> {
        let file = File::open(path).with_context(|| {
            format!(
                "cannot resume: no journal {} (was the search started with this --output-file?)",
                path.display()
            )
        })?;
        let mut reader = BufReader::new(file);
        let mut first = String::new();
        reader.read_line(&mut first)?;
        let found: Header = serde_json::from_str(first.trim_end())
            .with_context(|| format!("{} is not a tmd search journal", path.display()))?;
        if found.tmd_search_journal != VERSION {
            bail!(
                "{} is a journal of version {}; this tmd-worker reads version {VERSION}",
                path.display(),
                found.tmd_search_journal
            );
        }
        if &found != header {
            bail!(
                "cannot resume: {} holds another search ({} {} ({} bits), k={}, [{}, {}), test {}); \
                 start this one with another --output-file",
                path.display(),
                found.function,
                found.format,
                found.precision,
                found.min_bits,
                found.from,
                found.to,
                found.test
            );
        }
        let mut good_len = first.len() as u64;
        let mut units = Vec::new();
        let mut seen = HashSet::new();
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line)?;
            if n == 0 {
                break;
            }
            // Only a whole line counts: the last one may be torn by a crash.
            let Some(body) = line.strip_suffix('\n') else {
                break;
            };
            let Ok(r) = serde_json::from_str::<UnitResult>(body) else {
                break;
            };
            if seen.insert(r.unit) {
                units.push(r);
            }
            good_len += n as u64;
        }
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(good_len)?;
        let mut journal = Journal {
            file,
            path: path.to_path_buf(),
            last_sync: Instant::now(),
        };
        use std::io::Seek;
        journal.file.seek(std::io::SeekFrom::End(0))?;
        Ok((journal, units))
    }

    /// Records a finished unit (the tests' shorthand for `record_line(&line(r)?)`).
    #[cfg(test)]
    pub fn record(&mut self, r: &UnitResult) -> Result<()> {
        self.record_line(&line(r)?)
    }

    /// Records a finished unit's line made by [`line`] (so that callers can serialise outside
    /// a lock): flushed to the system at once and to the disk at least every second.
    pub fn record_line(&mut self, line: &str) -> Result<()> {
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .with_context(|| format!("writing the journal {}", self.path.display()))?;
        if self.last_sync.elapsed() >= Duration::from_secs(1) {
            self.file.sync_data()?;
            self.last_sync = Instant::now();
        }
        Ok(())
    }

    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_data()?;
        Ok(())
    }
}

/// A unit's journal line, newline included.
pub fn line(r: &UnitResult) -> Result<String> {
    let mut line = serde_json::to_string(r)?;
    line.push('\n');
    Ok(line)
}

/// The units of `all` that `done` does not hold, in order.
pub fn remaining(all: &[UnitSpec], done: &[UnitResult]) -> Vec<UnitSpec> {
    let done: HashSet<UnitSpec> = done.iter().map(|r| r.unit).collect();
    all.iter().copied().filter(|u| !done.contains(u)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmd_kernels::search::{Stats, Timings};
    use tmd_kernels::verify::{HrCase, Kind};

    fn header() -> Header {
        Header {
            tmd_search_journal: VERSION,
            function: "exp".into(),
            precision: 24,
            format: "binary32".into(),
            min_bits: 12,
            test: "regular".into(),
            from: "0x1p+0".into(),
            to: "0x1p+1".into(),
            unit_bits: Some(16),
            domain_bits: 15,
        }
    }

    fn unit(first: u64) -> UnitResult {
        UnitResult {
            unit: UnitSpec {
                negative: false,
                exponent: 0,
                first,
                count: 1 << 16,
            },
            stats: Stats {
                units: 1,
                ..Stats::default()
            },
            hr_cases: vec![HrCase {
                x: format!("0x{first:x}p-23"),
                bits: 13,
                neg_log2_d: 13.5,
                kind: Kind::Fp,
                rounded: "0x1p+1".into(),
            }],
            exact_cases: vec![],
            skipped: Vec::new(),
            timings: Timings::default(),
        }
    }

    #[test]
    fn a_torn_line_is_cut_and_the_search_goes_on() {
        let dir = std::env::temp_dir().join(format!("tmd-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cases.csv.journal");
        let _ = std::fs::remove_file(&path);
        let mut j = Journal::create(&path, &header()).unwrap();
        j.record(&unit(1 << 23)).unwrap();
        j.record(&unit((1 << 23) + (1 << 16))).unwrap();
        drop(j);
        // A crash in the middle of the third line.
        let torn = serde_json::to_string(&unit((1 << 23) + (2 << 16))).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&torn.as_bytes()[..torn.len() / 2]).unwrap();
        drop(f);

        let (mut j, done) = Journal::resume(&path, &header()).unwrap();
        assert_eq!(done, vec![unit(1 << 23), unit((1 << 23) + (1 << 16))]);
        j.record(&unit((1 << 23) + (2 << 16))).unwrap();
        drop(j);
        let (_, done) = Journal::resume(&path, &header()).unwrap();
        assert_eq!(done.len(), 3);
        assert_eq!(done[2], unit((1 << 23) + (2 << 16)));

        let all: Vec<UnitSpec> = (0..4).map(|k| unit((1 << 23) + (k << 16)).unit).collect();
        assert_eq!(remaining(&all, &done), vec![all[3]]);

        // Another search is refused, and so is overwriting.
        let mut other = header();
        other.min_bits = 13;
        let e = Journal::resume(&path, &other).err().unwrap().to_string();
        assert!(e.contains("holds another search"), "{e}");
        assert!(Journal::create(&path, &header()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_journal_sits_beside_the_output() {
        assert_eq!(
            path_for(Path::new("/tmp/exp.wc")),
            PathBuf::from("/tmp/exp.wc.journal")
        );
    }
}
