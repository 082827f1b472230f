//! What the daemon keeps on disk so that a crash or a restart loses nothing: its credentials,
//! the leases in hand with the units already accepted, and the results the server has not yet
//! accepted (the spool, `spool.rs`). Every file is written to a temporary name, synced, then
//! renamed.
//!
//! A lease's finished units are those in its `done` set and those with a result in the spool:
//! a result is spooled before it is queued for posting, and a unit enters `done` before its
//! accepted result leaves the spool, so a crash at any point loses no finished unit.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tmd_wire::{Lease, UnitResult};

mod spool;

/// The worker's identity at one server.
#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub server: String,
    pub worker_id: i64,
    pub token: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .field("worker_id", &self.worker_id)
            .field("token", &"<redacted>")
            .finish()
    }
}

/// A lease in hand and which of its units are finished (accepted; the spooled ones are the
/// spool's to tell).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseState {
    pub lease: Lease,
    pub done: BTreeSet<i64>,
}

/// A computed result waiting to be accepted by the server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpoolEntry {
    pub lease_id: i64,
    pub unit_id: i64,
    pub result: UnitResult,
}

/// The state directory, locked for one daemon at a time.
pub struct StateDir {
    root: PathBuf,
    _lock: File,
    spool: std::sync::Mutex<spool::SpoolIndex>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state directory {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("another tmd-worker is using the state directory {0}")]
    Locked(PathBuf),
    #[error("{path} is damaged: {message}")]
    Damaged { path: PathBuf, message: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Replaces `path` with `bytes` in one step, so a crash leaves the old file or the new one,
/// never a part: a temporary file beside it (`NAME.tmp`), synced, renamed over it, and the
/// folder synced. `private` files (credentials, leases) are readable by their owner alone.
pub fn replace_file(path: &Path, bytes: &[u8], private: bool) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut opts = OpenOptions::new();
        opts.create(true).write(true).truncate(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// A JSON file's content; `None` where there is no file, [`StateError::Damaged`] where it
/// does not parse.
fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StateError::Damaged {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn remove_if_there(p: &Path) -> Result<(), StateError> {
    match fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(p)(e)),
    }
}

impl StateDir {
    /// Opens `root`, waiting up to `wait` while another process holds its lock: a predecessor
    /// killed a moment ago may still be exiting (a GPU context takes seconds to tear down), and
    /// a restart should not fail on it. `waiting(elapsed)` is called about every `report` while
    /// it waits, to say why. After `wait`, [`StateError::Locked`].
    pub fn open_waiting(
        root: &Path,
        wait: Duration,
        report: Duration,
        mut waiting: impl FnMut(Duration),
    ) -> Result<StateDir, StateError> {
        let start = Instant::now();
        let mut reported = start;
        loop {
            match StateDir::open(root) {
                Err(StateError::Locked(_)) if start.elapsed() < wait => {
                    if reported == start || reported.elapsed() >= report {
                        reported = Instant::now();
                        waiting(start.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(100).min(wait));
                }
                other => return other,
            }
        }
    }

    pub fn open(root: &Path) -> Result<StateDir, StateError> {
        fs::create_dir_all(root.join("spool")).map_err(io_err(root))?;
        fs::create_dir_all(root.join("leases")).map_err(io_err(root))?;
        let lock_path = root.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(StateError::Locked(root.into())),
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
        }
        let spool = spool::SpoolIndex::load(&root.join("spool"))?;
        Ok(StateDir {
            root: root.to_path_buf(),
            _lock: lock,
            spool: std::sync::Mutex::new(spool),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn write_json<T: Serialize>(&self, path: &Path, value: &T) -> Result<(), StateError> {
        let text = serde_json::to_vec_pretty(value).expect("state serialises");
        replace_file(path, &text, true).map_err(io_err(path))
    }

    pub fn credentials(&self) -> Result<Option<Credentials>, StateError> {
        read_json(&self.root.join("credentials.json"))
    }

    pub fn save_credentials(&self, c: &Credentials) -> Result<(), StateError> {
        self.write_json(&self.root.join("credentials.json"), c)
    }

    fn lease_path(&self, lease_id: i64) -> PathBuf {
        self.root
            .join("leases")
            .join(format!("lease-{lease_id}.json"))
    }

    /// Every lease in hand, oldest first; with the single `lease.json` of earlier versions.
    pub fn leases(&self) -> Result<Vec<LeaseState>, StateError> {
        let dir = self.root.join("leases");
        let mut out: Vec<LeaseState> = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let path = entry.map_err(io_err(&dir))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                out.extend(read_json::<LeaseState>(&path)?);
            }
        }
        if let Some(old) = read_json::<LeaseState>(&self.root.join("lease.json"))? {
            if out.iter().all(|l| l.lease.lease_id != old.lease.lease_id) {
                out.push(old);
            }
        }
        out.sort_by_key(|l| l.lease.lease_id);
        Ok(out)
    }

    pub fn save_lease(&self, l: &LeaseState) -> Result<(), StateError> {
        self.write_json(&self.lease_path(l.lease.lease_id), l)
    }

    /// Forgets a lease (finished, released or lost).
    pub fn clear_lease(&self, lease_id: i64) -> Result<(), StateError> {
        remove_if_there(&self.lease_path(lease_id))?;
        let old = self.root.join("lease.json");
        if let Ok(Some(l)) = read_json::<LeaseState>(&old) {
            if l.lease.lease_id == lease_id {
                remove_if_there(&old)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmd_wire::UnitStats;

    /// An empty folder for one test, named after it and this process.
    pub(super) fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tmd-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    pub(super) fn entry(lease_id: i64, unit_id: i64) -> SpoolEntry {
        SpoolEntry {
            lease_id,
            unit_id,
            result: UnitResult {
                fencing_token: 3,
                stats: UnitStats::default(),
                hr_cases: vec![],
                exact_cases: vec![],
                skipped: vec![],
                elapsed: 1.0,
                digest: format!("{lease_id}-{unit_id}"),
                engine: Some(tmd_kernels::ENGINE_VERSION),
            },
        }
    }

    #[test]
    fn spool_survives_reopening_and_the_directory_is_exclusive() {
        let dir = fresh_dir("state-test");
        {
            let s = StateDir::open(&dir).unwrap();
            assert!(matches!(StateDir::open(&dir), Err(StateError::Locked(_))));
            s.spool_put_all(&[entry(2, 7)]).unwrap();
            s.spool_put_all(&[entry(1, 9)]).unwrap();
            s.save_credentials(&Credentials {
                server: "http://x".into(),
                worker_id: 4,
                token: "secret".into(),
            })
            .unwrap();
        }
        let s = StateDir::open(&dir).unwrap();
        let spool = s.spool().unwrap();
        assert_eq!(
            spool
                .iter()
                .map(|e| (e.lease_id, e.unit_id))
                .collect::<Vec<_>>(),
            vec![(1, 9), (2, 7)]
        );
        s.spool_remove(1, 9).unwrap();
        assert_eq!(s.spool().unwrap().len(), 1);
        let c = s.credentials().unwrap().unwrap();
        assert_eq!(c.worker_id, 4);
        assert!(!format!("{c:?}").contains("secret"));
        assert!(s.leases().unwrap().is_empty());
        assert_eq!(s.spooled_units(2).unwrap(), BTreeSet::from([7]));
        fs::write(dir.join("lease.json"), b"{not json").unwrap();
        assert!(matches!(s.leases(), Err(StateError::Damaged { .. })));
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_held_lock_is_waited_for_and_a_released_one_taken() {
        let dir = fresh_dir("state-lock");
        let held = StateDir::open(&dir).unwrap();
        // Still held after the bound: the clear error, after having said why it waited.
        let mut said = 0;
        let t = Instant::now();
        let r = StateDir::open_waiting(
            &dir,
            Duration::from_millis(400),
            Duration::from_millis(100),
            |_| said += 1,
        );
        assert!(matches!(r, Err(StateError::Locked(_))));
        assert!(t.elapsed() >= Duration::from_millis(400));
        assert!(said >= 2, "{said}");
        // Released while waited for: taken.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let t = Instant::now();
        let s = StateDir::open_waiting(
            &dir,
            Duration::from_secs(30),
            Duration::from_secs(5),
            |_| {},
        )
        .unwrap();
        assert!(t.elapsed() >= Duration::from_millis(250));
        assert!(t.elapsed() < Duration::from_secs(10));
        releaser.join().unwrap();
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn leases_are_kept_apart_and_the_old_single_file_is_read() {
        let dir = fresh_dir("state-leases");
        let s = StateDir::open(&dir).unwrap();
        let lease = |id: i64| LeaseState {
            lease: Lease {
                lease_id: id,
                fencing_token: 1,
                expires_at: chrono::Utc::now(),
                heartbeat_seconds: 1,
                task: tmd_wire::LeaseTask {
                    campaign_id: 1,
                    function: "exp".into(),
                    precision: 24,
                    min_bits: 12,
                    format: None,
                },
                units: vec![],
            },
            done: BTreeSet::from([id * 10]),
        };
        s.save_lease(&lease(5)).unwrap();
        s.save_lease(&lease(3)).unwrap();
        fs::write(
            dir.join("lease.json"),
            serde_json::to_vec(&lease(1)).unwrap(),
        )
        .unwrap();
        let ids = |s: &StateDir| {
            s.leases()
                .unwrap()
                .iter()
                .map(|l| l.lease.lease_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&s), vec![1, 3, 5]);
        s.clear_lease(1).unwrap();
        s.clear_lease(5).unwrap();
        assert_eq!(ids(&s), vec![3]);
        assert!(!dir.join("lease.json").exists());
        assert_eq!(s.leases().unwrap()[0].done, BTreeSet::from([30]));
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }
}
