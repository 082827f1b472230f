//! The journal of a local `search` written to a file, so that an interrupted search keeps
//! what it found and `--resume` goes on where it stopped.
//!
//! The first line says what is searched (function, format, threshold, range, engine sizes); a
//! resume with other settings is refused rather than mixing two searches in one file. Each
//! later line is a whole unit's result, written with one `write` and flushed: a crash leaves at
//! most a torn last line, which a resume cuts off (that unit is simply computed again).
//!
//! A unit's line is a few hundred bytes (its counters and timings), which for millions of
//! units would be gigabytes: so the journal is compacted as it grows. Once the lines appended
//! since the last compaction outweigh what it wrote (and at least [`COMPACT_AFTER`] bytes), the
//! file is replaced, in one rename, by the header and one line holding the [`Tally`] of every
//! unit so far: the done units as runs, the cases, the summed counters. Its size is that of
//! the cases plus a few bytes per run of units, and each byte is rewritten a bounded number
//! of times.

use super::tally::{Tally, TallyRecord};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
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
    /// `--flat-domain-bits`. Absent in journals written before, which are resumed
    /// with this one's: every route searches each unit whole, so units of either agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flat_domain_bits: Option<u32>,
    /// `search --whole`: its units collapse blocks that skip every argument, unlike the
    /// range's own (`tmd_kernels::plan::whole`). Absent (false) in journals written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole: bool,
    /// The binades a reduction derives are not searched (`tmd_kernels::plan::reduce`): other
    /// units. Absent (false) in journals written before or with `--no-reduction`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reduced: bool,
    /// Phase 1's quadratic screen on steep units (on unless `--no-quadratic-screen`):
    /// other statistics there. Absent (false) in journals written without it, before the
    /// screen existed or with the flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quadratic_screen: bool,
    /// Which screen (`existence::quadratic::ROUTE`, 0 without one): the first, opt-in
    /// screen on Lefevre's turns (absent here, read as 0) failed other domains than today's.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub screen_route: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// How a journal's search tested steep pieces, from its header's `(quadratic_screen,
/// screen_route)`.
fn describe_screen((on, route): (bool, u32)) -> String {
    match (on, route) {
        (false, _) => "with the line test alone (--no-quadratic-screen)".into(),
        (true, 0) => "with the first quadratic screen (route 0, an earlier tmd-worker's \
                      --quadratic-screen)"
            .into(),
        (true, r) => format!("with the quadratic screen of route {r}"),
    }
}

/// The journal's version: version 2 adds the compacted line (a version-1 reader would take
/// it for a torn line and cut it off, so it is refused there); version 1 is still read.
pub const VERSION: u32 = 2;

/// Bytes of unit lines after which a compaction may start (it starts when they also outweigh
/// the last compacted line).
pub const COMPACT_AFTER: u64 = 1 << 20;

/// The compacted line: every unit finished before the compaction.
#[derive(Serialize, Deserialize)]
struct CompactedLine {
    compacted: TallyRecord,
}

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
    header: Header,
    last_sync: Instant,
    /// Bytes of unit lines since the last compaction, and the size of its line.
    appended: u64,
    compacted: u64,
}

impl Journal {
    /// Starts a new journal at `path`; refuses to overwrite one.
    pub fn create(path: &Path, header: &Header) -> Result<Journal> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("creating the journal {}", path.display()))?;
        file.write_all(header_line(header)?.as_bytes())?;
        file.sync_data()?;
        Ok(Journal {
            file,
            path: path.to_path_buf(),
            header: header.clone(),
            last_sync: Instant::now(),
            appended: 0,
            compacted: 0,
        })
    }

    /// Opens the journal at `path` to go on with the search `header` describes: its finished
    /// units, and the journal ready for more (a torn last line cut off).
    pub fn resume(path: &Path, header: &Header) -> Result<(Journal, Tally)> {
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
        if !(1..=VERSION).contains(&found.tmd_search_journal) {
            bail!(
                "{} is a journal of version {}; this tmd-worker reads version {VERSION}",
                path.display(),
                found.tmd_search_journal
            );
        }
        let same = Header {
            tmd_search_journal: header.tmd_search_journal,
            flat_domain_bits: found.flat_domain_bits.or(header.flat_domain_bits),
            ..found.clone()
        };
        if &same != header {
            let screen = |h: &Header| (h.quadratic_screen, h.screen_route);
            let but_screen = Header {
                quadratic_screen: header.quadratic_screen,
                screen_route: header.screen_route,
                ..same.clone()
            };
            if but_screen == *header {
                bail!(
                    "cannot resume: {} was searched {}, this search runs {}: the HR-cases would be \
                     the same, the statistics not. {}",
                    path.display(),
                    describe_screen(screen(&same)),
                    describe_screen(screen(header)),
                    if same.quadratic_screen {
                        "Finish it with the tmd-worker that started it, or start again with \
                         another --output-file"
                    } else {
                        "Resume it with --no-quadratic-screen"
                    }
                );
            }
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
        let mut tally = Tally::default();
        let (mut appended, mut compacted) = (0, 0);
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
            if good_len == first.len() as u64 {
                // Only the line after the header can be a compaction, written whole by
                // a rename: one that does not parse is damage, not a torn end.
                if let Ok(c) = serde_json::from_str::<CompactedLine>(body) {
                    tally = Tally::from_record(c.compacted);
                    compacted = n as u64;
                    good_len += n as u64;
                    continue;
                }
            }
            let Ok(r) = serde_json::from_str::<UnitResult>(body) else {
                break;
            };
            tally.add(r);
            appended += n as u64;
            good_len += n as u64;
        }
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(good_len)?;
        let mut journal = Journal {
            file,
            path: path.to_path_buf(),
            header: header.clone(),
            last_sync: Instant::now(),
            appended,
            compacted,
        };
        use std::io::Seek;
        journal.file.seek(std::io::SeekFrom::End(0))?;
        Ok((journal, tally))
    }

    /// Whether the unit lines since the last compaction outweigh it: time to compact.
    pub fn wants_compaction(&self) -> bool {
        self.appended >= COMPACT_AFTER.max(self.compacted)
    }

    /// Replaces the journal by its header and one line holding `tally`, which must hold every
    /// unit recorded so far (finished: cases sorted, runs merged). One rename: a crash leaves
    /// the old journal or the new one, each whole.
    pub fn compact(&mut self, tally: &Tally) -> Result<()> {
        let mut line = serde_json::to_string(&CompactedLine {
            compacted: tally.record(),
        })?;
        line.push('\n');
        let mut text = header_line(&self.header)?;
        text.push_str(&line);
        crate::state::replace_file(&self.path, text.as_bytes(), false)
            .with_context(|| format!("compacting the journal {}", self.path.display()))?;
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("reopening the journal {}", self.path.display()))?;
        self.appended = 0;
        self.compacted = line.len() as u64;
        self.last_sync = Instant::now();
        Ok(())
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
        self.appended += line.len() as u64;
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

fn header_line(header: &Header) -> Result<String> {
    let mut line = serde_json::to_string(header)?;
    line.push('\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmd_kernels::oracle::verify::{HrCase, Kind};
    use tmd_kernels::plan::UnitSpec;
    use tmd_kernels::search::{Stats, Timings};

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
            flat_domain_bits: Some(20),
            whole: false,
            reduced: false,
            quadratic_screen: false,
            screen_route: 0,
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
            exact_lattice: None,
            timings: Timings::default(),
        }
    }

    /// A test's folder (`tmd-journal-{tag}` and this process) and a journal path in it, with no
    /// journal there yet.
    fn fresh_journal(tag: &str, name: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("tmd-journal-{tag}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        (dir, path)
    }

    #[test]
    fn a_torn_line_is_cut_and_the_search_goes_on() {
        let (dir, path) = fresh_journal("", "cases.csv.journal");
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
        let mut want = Tally::default();
        want.add(unit(1 << 23));
        want.add(unit((1 << 23) + (1 << 16)));
        assert_eq!(done, want);
        j.record(&unit((1 << 23) + (2 << 16))).unwrap();
        drop(j);
        let (_, done) = Journal::resume(&path, &header()).unwrap();
        assert_eq!(done.units, 3);
        assert_eq!(done.result.hr_cases.len(), 3);

        let all: Vec<UnitSpec> = (0..4).map(|k| unit((1 << 23) + (k << 16)).unit).collect();
        assert_eq!(done.remaining(&all), vec![all[3]]);

        // Another search is refused, and so is overwriting.
        let mut other = header();
        other.min_bits = 13;
        let e = Journal::resume(&path, &other).err().unwrap().to_string();
        assert!(e.contains("holds another search"), "{e}");
        assert!(Journal::create(&path, &header()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Thousands of units: the journal is compacted as it grows, stays a small multiple of
    /// its cases' size, and a resume after a compaction (and a torn line after it) finds
    /// every unit.
    #[test]
    fn a_long_journal_is_compacted_and_resumes_whole() {
        let (dir, path) = fresh_journal("c-", "cases.wc.journal");
        // Arguments up to 2^31 significands: judged in binary64, where they are exact.
        let fmt = tmd_kernels::numbers::format::Format::named("binary64").unwrap();
        let mut j = Journal::create(&path, &header()).unwrap();
        let mut tally = Tally::default();
        let n = 20_000u64;
        let mut compactions = 0;
        for k in 0..n {
            let r = unit((1 << 23) + (k << 16));
            j.record(&r).unwrap();
            tally.add(r);
            if j.wants_compaction() {
                tally.finish_in(fmt);
                j.compact(&tally).unwrap();
                compactions += 1;
            }
        }
        let unit_line = line(&unit(1 << 23)).unwrap().len() as u64;
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(compactions >= 2, "{compactions}");
        assert!(
            size < n * unit_line / 3,
            "{size} bytes for {n} units of {unit_line}-byte lines"
        );
        drop(j);
        let torn = serde_json::to_string(&unit(1 << 30)).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&torn.as_bytes()[..10]).unwrap();
        drop(f);
        let (_, mut back) = Journal::resume(&path, &header()).unwrap();
        assert_eq!(back.units, n);
        assert_eq!(back.result.hr_cases.len(), n as usize);
        back.finish_in(fmt);
        tally.finish_in(fmt);
        assert_eq!(back.result, tally.result);
        let all: Vec<UnitSpec> = (0..n).map(|k| unit((1 << 23) + (k << 16)).unit).collect();
        assert!(back.remaining(&all).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A journal written before `--flat-domain-bits` (no such field) is resumed by
    /// this one; one with another value is another search.
    #[test]
    fn a_journal_without_flat_domains_resumes() {
        let (dir, path) = fresh_journal("f-", "cases.csv.journal");
        let old = Header {
            flat_domain_bits: None,
            ..header()
        };
        let mut j = Journal::create(&path, &old).unwrap();
        j.record(&unit(1 << 23)).unwrap();
        drop(j);
        let first = std::fs::read_to_string(&path).unwrap();
        assert!(!first.lines().next().unwrap().contains("flat_domain_bits"));
        let (_, done) = Journal::resume(&path, &header()).unwrap();
        assert_eq!(done.units, 1);
        std::fs::remove_file(&path).unwrap();

        let mut j = Journal::create(&path, &header()).unwrap();
        j.record(&unit(1 << 23)).unwrap();
        drop(j);
        let other = Header {
            flat_domain_bits: Some(15),
            ..header()
        };
        let e = Journal::resume(&path, &other).err().unwrap().to_string();
        assert!(e.contains("holds another search"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The quadratic screen changes a steep unit's statistics, so a journal resumes
    /// only with the screen it was written with, and the refusal says which and what to do.
    /// Without the screen the header is written as before the screen existed.
    #[test]
    fn a_journal_resumes_only_with_its_screen() {
        use tmd_kernels::search::existence::quadratic::ROUTE;
        let (dir, path) = fresh_journal("s-", "cases.csv.journal");
        let line = header();
        let screened = Header {
            quadratic_screen: true,
            screen_route: ROUTE,
            ..header()
        };
        let fifth_pass = Header {
            quadratic_screen: true,
            screen_route: 0,
            ..header()
        };
        let written = |h: &Header| {
            let _ = std::fs::remove_file(&path);
            let mut j = Journal::create(&path, h).unwrap();
            j.record(&unit(1 << 23)).unwrap();
            drop(j);
            std::fs::read_to_string(&path).unwrap()
        };
        let refusal = |h: &Header| Journal::resume(&path, h).err().unwrap().to_string();

        let first = written(&line);
        let first = first.lines().next().unwrap();
        assert!(!first.contains("quadratic_screen") && !first.contains("screen_route"));
        let e = refusal(&screened);
        assert!(
            e.contains("line test alone") && e.contains("Resume it with --no-quadratic-screen"),
            "{e}"
        );
        assert_eq!(Journal::resume(&path, &line).unwrap().1.units, 1);

        let first = written(&screened);
        assert!(
            first.contains(&format!("\"screen_route\":{ROUTE}")),
            "{first}"
        );
        let e = refusal(&line);
        assert!(
            e.contains(&format!("route {ROUTE}")) && e.contains("the tmd-worker that started it"),
            "{e}"
        );
        assert_eq!(Journal::resume(&path, &screened).unwrap().1.units, 1);

        written(&fifth_pass);
        let e = refusal(&screened);
        assert!(e.contains("first quadratic screen (route 0"), "{e}");
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
