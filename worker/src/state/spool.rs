//! The spool: computed results the server has not yet accepted, on disk so that a crash loses
//! none. Results that are ready together are written as one group, in one file (`batch-N.json`)
//! synced once: the durability of one result per sync cost the CPU daemon its compute threads'
//! time (two fsyncs per result, docs/benchmarks-history.md, 2026-11-24). A result leaves the
//! spool in memory at once; its group's file goes when its last result has left. A crash
//! between the two brings the results already accepted back, to be posted again and answered
//! `replayed`, as a crash between a post and its removal always did.
//!
//! Files of one result (`lease-L-unit-U.json`, written by earlier versions) are read and
//! removed the same way.

use super::{io_err, read_json, remove_if_there, replace_file, SpoolEntry, StateDir, StateError};
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// A spool file's content: a group, or the single result of earlier versions.
#[derive(Deserialize)]
#[serde(untagged)]
enum SpoolFile {
    Group(Vec<SpoolEntry>),
    One(SpoolEntry),
}

/// Which results each spool file still holds for the server, and where each result is.
#[derive(Default)]
pub(super) struct SpoolIndex {
    /// Files by their path, with the (lease, unit) results in them not yet accepted.
    files: HashMap<PathBuf, BTreeSet<(i64, i64)>>,
    /// The file of each result not yet accepted.
    results: BTreeMap<(i64, i64), PathBuf>,
    /// The number the next group's file takes.
    next_group: u64,
}

impl SpoolIndex {
    /// Reads the spool folder: every file's results, and the next group's number.
    pub(super) fn load(dir: &Path) -> Result<SpoolIndex, StateError> {
        let mut index = SpoolIndex::default();
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let path = entry.map_err(io_err(dir))?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            if let Some(n) = group_number(&path) {
                index.next_group = index.next_group.max(n + 1);
            }
            let keys = read_file(&path)?
                .iter()
                .map(|e| (e.lease_id, e.unit_id))
                .collect();
            index.insert(path, keys);
        }
        Ok(index)
    }

    fn insert(&mut self, path: PathBuf, keys: BTreeSet<(i64, i64)>) {
        for &k in &keys {
            // A result in two files (a crash between writing a group and removing an older
            // copy) is the same result: the later file is the one that counts.
            if let Some(old) = self.results.insert(k, path.clone()) {
                let emptied = old != path
                    && self.files.get_mut(&old).is_some_and(|left| {
                        left.remove(&k);
                        left.is_empty()
                    });
                if emptied {
                    // Its every result is in a later file, already on disk.
                    self.files.remove(&old);
                    let _ = fs::remove_file(&old);
                }
            }
        }
        self.files.insert(path, keys);
    }
}

/// `N` of `batch-N.json`.
fn group_number(path: &Path) -> Option<u64> {
    path.file_name()?
        .to_str()?
        .strip_prefix("batch-")?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

fn read_file(path: &Path) -> Result<Vec<SpoolEntry>, StateError> {
    Ok(match read_json::<SpoolFile>(path)? {
        None => Vec::new(),
        Some(SpoolFile::Group(g)) => g,
        Some(SpoolFile::One(e)) => vec![e],
    })
}

impl StateDir {
    fn spool_index(&self) -> std::sync::MutexGuard<'_, SpoolIndex> {
        // A panic while the index was held left it as it was before or after one change: both
        // agree with the disk as far as losing nothing goes.
        self.spool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes results to the spool as one group, synced once: when it returns they are on
    /// disk. A result already spooled is replaced.
    pub fn spool_put_all<E: Borrow<SpoolEntry> + Serialize>(
        &self,
        entries: &[E],
    ) -> Result<(), StateError> {
        if entries.is_empty() {
            return Ok(());
        }
        let path = {
            let mut index = self.spool_index();
            let n = index.next_group;
            index.next_group += 1;
            self.root.join("spool").join(format!("batch-{n}.json"))
        };
        let text = serde_json::to_vec(entries).expect("spool entries serialise");
        replace_file(&path, &text, true).map_err(io_err(&path))?;
        let keys = entries
            .iter()
            .map(|e| (e.borrow().lease_id, e.borrow().unit_id))
            .collect();
        self.spool_index().insert(path, keys);
        Ok(())
    }

    /// Takes a result out of the spool (accepted, or refused for good); its file goes with
    /// its last result.
    pub fn spool_remove(&self, lease_id: i64, unit_id: i64) -> Result<(), StateError> {
        let mut index = self.spool_index();
        let Some(path) = index.results.remove(&(lease_id, unit_id)) else {
            return Ok(());
        };
        let emptied = index.files.get_mut(&path).is_some_and(|left| {
            left.remove(&(lease_id, unit_id));
            left.is_empty()
        });
        if emptied {
            index.files.remove(&path);
            remove_if_there(&path)?;
        }
        Ok(())
    }

    /// The units of `lease_id` with a result in the spool.
    pub fn spooled_units(&self, lease_id: i64) -> Result<BTreeSet<i64>, StateError> {
        Ok(self
            .spool_index()
            .results
            .range((lease_id, i64::MIN)..=(lease_id, i64::MAX))
            .map(|(&(_, u), _)| u)
            .collect())
    }

    /// Every spooled result, oldest lease first, read from disk.
    pub fn spool(&self) -> Result<Vec<SpoolEntry>, StateError> {
        let files: Vec<(PathBuf, BTreeSet<(i64, i64)>)> = self
            .spool_index()
            .files
            .iter()
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(p, k)| (p.clone(), k.clone()))
            .collect();
        let mut out = Vec::new();
        for (path, keys) in files {
            out.extend(
                read_file(&path)?
                    .into_iter()
                    .filter(|e| keys.contains(&(e.lease_id, e.unit_id))),
            );
        }
        out.sort_by_key(|e| (e.lease_id, e.unit_id));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{entry, fresh_dir};
    use super::*;

    fn keys(s: &StateDir) -> Vec<(i64, i64)> {
        s.spool()
            .unwrap()
            .iter()
            .map(|e| (e.lease_id, e.unit_id))
            .collect()
    }

    fn files(dir: &Path) -> usize {
        fs::read_dir(dir.join("spool")).unwrap().count()
    }

    #[test]
    fn a_group_is_one_file_that_goes_with_its_last_result() {
        let dir = fresh_dir("spool-group");
        let s = StateDir::open(&dir).unwrap();
        s.spool_put_all(&[entry(1, 1), entry(1, 2), entry(2, 5)])
            .unwrap();
        s.spool_put_all(&[entry(2, 6)]).unwrap();
        assert_eq!(files(&dir), 2);
        assert_eq!(keys(&s), vec![(1, 1), (1, 2), (2, 5), (2, 6)]);
        assert_eq!(s.spooled_units(2).unwrap(), BTreeSet::from([5, 6]));
        s.spool_remove(1, 1).unwrap();
        s.spool_remove(2, 5).unwrap();
        // Removing twice, or what was never there, is no error.
        s.spool_remove(2, 5).unwrap();
        s.spool_remove(9, 9).unwrap();
        assert_eq!(files(&dir), 2, "the group still holds (1, 2)");
        assert_eq!(keys(&s), vec![(1, 2), (2, 6)]);
        s.spool_remove(1, 2).unwrap();
        assert_eq!(files(&dir), 1);
        // Reopened: the next group takes a new number, not an old file's.
        drop(s);
        let s = StateDir::open(&dir).unwrap();
        s.spool_put_all(&[entry(3, 1)]).unwrap();
        assert_eq!(files(&dir), 2);
        assert_eq!(keys(&s), vec![(2, 6), (3, 1)]);
        s.spool_remove(2, 6).unwrap();
        s.spool_remove(3, 1).unwrap();
        assert_eq!(files(&dir), 0);
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_crash_brings_back_the_accepted_results_of_a_group_still_on_disk() {
        let dir = fresh_dir("spool-crash");
        let s = StateDir::open(&dir).unwrap();
        s.spool_put_all(&[entry(1, 1), entry(1, 2)]).unwrap();
        s.spool_remove(1, 1).unwrap();
        drop(s);
        // Posted again after the restart (the server answers `replayed`): nothing is lost.
        let s = StateDir::open(&dir).unwrap();
        assert_eq!(keys(&s), vec![(1, 1), (1, 2)]);
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_single_result_files_of_earlier_versions_are_read_and_removed() {
        let dir = fresh_dir("spool-old");
        fs::create_dir_all(dir.join("spool")).unwrap();
        fs::write(
            dir.join("spool/lease-4-unit-8.json"),
            serde_json::to_vec(&entry(4, 8)).unwrap(),
        )
        .unwrap();
        // A temporary file a crash left behind is not a result.
        fs::write(dir.join("spool/batch-3.json.tmp"), b"[{").unwrap();
        let s = StateDir::open(&dir).unwrap();
        assert_eq!(keys(&s), vec![(4, 8)]);
        assert_eq!(s.spooled_units(4).unwrap(), BTreeSet::from([8]));
        s.spool_remove(4, 8).unwrap();
        assert!(!dir.join("spool/lease-4-unit-8.json").exists());
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_spool_file_is_named() {
        let dir = fresh_dir("spool-bad");
        fs::create_dir_all(dir.join("spool")).unwrap();
        fs::write(dir.join("spool/batch-0.json"), b"[{not json").unwrap();
        match StateDir::open(&dir) {
            Err(StateError::Damaged { path, .. }) => assert!(path.ends_with("batch-0.json")),
            other => panic!("{:?}", other.map(|_| ())),
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
