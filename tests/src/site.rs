//! A whole-system test's ground: its own database and scratch folder, with the coordinators
//! and workers started on them, and the end of the test in the order it needs (the processes
//! first, then the database and the folder).

use crate::{create_exp_campaign, scratch, Server, Worker};
use std::path::PathBuf;
use tmd_test_support::TestDb;

/// A fresh database and a scratch folder for one test.
pub struct Site {
    pub db: TestDb,
    pub dir: PathBuf,
}

impl Site {
    /// A fresh database and the scratch folder `name` (see [`scratch`]).
    pub async fn new(name: &str) -> Site {
        Site {
            db: TestDb::new().await,
            dir: scratch(name),
        }
    }

    /// A coordinator on the site's database, its logs in the scratch folder.
    pub fn server(&self, args: &[&str]) -> Server {
        Server::start(self.db.url(), &self.dir, args)
    }

    /// A coordinator started with `args` and the campaign
    /// [`EXP_BINARY64_24_UNITS`](crate::EXP_BINARY64_24_UNITS) on it: the coordinator, its URL,
    /// the campaign's id and a trusted enrollment token.
    pub fn exp_campaign(&self, args: &[&str]) -> (Server, String, i64, String) {
        let server = self.server(args);
        let url = server.url();
        let (campaign, token) = create_exp_campaign(&url);
        (server, url, campaign, token)
    }

    /// One of several coordinators on the site's database, its logs in the subfolder `sub`.
    pub fn server_in(&self, sub: &str, args: &[&str]) -> Server {
        let d = self.dir.join(sub);
        std::fs::create_dir_all(&d).unwrap();
        Server::start(self.db.url(), &d, args)
    }

    /// A worker of `server` whose state directory is `state` in the scratch folder.
    pub fn worker(&self, server: &str, token: &str, state: &str, args: &[&str]) -> Worker {
        Worker::start(server, token, &self.dir.join(state), args)
    }

    /// `n` workers of `server` with the same flags, their state directories `w0`, `w1`, ...
    pub fn workers(&self, server: &str, token: &str, n: usize, args: &[&str]) -> Vec<Worker> {
        (0..n)
            .map(|i| self.worker(server, token, &format!("w{i}"), args))
            .collect()
    }

    /// The end of a test: its `processes` (coordinators and workers, in a tuple or vector)
    /// killed, then the database dropped and the folder removed.
    pub async fn finish<P>(self, processes: P) {
        drop(processes);
        self.db.drop_db().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
