//! A harness for whole-system tests: real `tmd-server` and `tmd-worker` processes on loopback,
//! their logs in files, and the admin API driven over HTTP.

use serde_json::Value;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// The ground of one test: its database, scratch folder and processes.
mod site;
pub use site::Site;

pub const ADMIN_TOKEN: &str = "system-test-admin-token";

/// A built binary of the workspace, next to the test executable's directory.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} not built: run `cargo build --release --workspace` first",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A scratch directory for one test's logs and state.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tmd-system-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A `tmd-server serve` process.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    db_url: String,
    dir: PathBuf,
    extra: Vec<String>,
    starts: u32,
}

impl Server {
    pub fn start(db_url: &str, dir: &Path, extra: &[&str]) -> Server {
        let mut s = Server {
            child: None,
            port: free_port(),
            db_url: db_url.to_string(),
            dir: dir.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            starts: 0,
        };
        s.spawn();
        s
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let log = File::create(self.dir.join(format!("server-{}.log", self.starts))).unwrap();
        let child = Command::new(bin("tmd-server"))
            .arg("serve")
            .args(["--database-url", &self.db_url])
            .args(["--listen", &format!("127.0.0.1:{}", self.port)])
            .args(["--admin-token", ADMIN_TOKEN])
            .args(&self.extra)
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start tmd-server");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let start = Instant::now();
        loop {
            if http_status(self.port, "/readyz") == Some(200) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "tmd-server did not become ready; see {}",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then wait: a graceful restart's first half.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(&c, "TERM");
            let _ = c.wait();
        }
    }

    /// SIGKILL: a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn start_again(&mut self) {
        assert!(self.child.is_none());
        self.spawn();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `tmd-worker run` process with its own state directory.
pub struct Worker {
    child: Option<Child>,
    pub state_dir: PathBuf,
    pub logs: Vec<PathBuf>,
    server: String,
    token: String,
    extra: Vec<String>,
}

impl Worker {
    pub fn start(server: &str, token: &str, state_dir: &Path, extra: &[&str]) -> Worker {
        let mut w = Worker {
            child: None,
            state_dir: state_dir.to_path_buf(),
            logs: Vec::new(),
            server: server.to_string(),
            token: token.to_string(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        w.spawn();
        w
    }

    fn spawn(&mut self) {
        let log_path = self
            .state_dir
            .with_extension(format!("log{}", self.logs.len() + 1));
        let log = File::create(&log_path).unwrap();
        self.logs.push(log_path);
        let child = Command::new(bin("tmd-worker"))
            .arg("run")
            .args(["--server", &self.server, "--token", &self.token])
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(&self.extra)
            .env("RUST_BACKTRACE", "0")
            // Units are logged one by one at debug; the tests count them.
            .env("TMD_LOG", "info,tmd_worker=debug")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start tmd-worker");
        self.child = Some(child);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGKILL, then a new process pointed at `server` (another replica, say), with the same
    /// state directory and flags.
    pub fn restart_at(&mut self, server: &str) {
        self.kill();
        self.server = server.to_string();
        self.spawn();
    }

    /// SIGKILL and a new process at once, without waiting for the old one to be gone: the
    /// restart a supervisor does, which may find the state directory still locked.
    pub fn kill_and_restart_at_once(&mut self) {
        let old = self.child.take();
        if let Some(c) = &old {
            signal(c, "KILL");
        }
        self.spawn();
        if let Some(mut c) = old {
            let _ = c.wait();
        }
    }

    /// Waits up to `limit` for the process to exit by itself; its status, or `None`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            let c = self.child.as_mut()?;
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                return Some(status);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The worker's id at the server, once it registered.
    pub fn worker_id(&self) -> Option<i64> {
        let text = std::fs::read_to_string(self.state_dir.join("credentials.json")).ok()?;
        serde_json::from_str::<Value>(&text).ok()?["worker_id"].as_i64()
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> bool {
        match self.child.take() {
            Some(mut c) => {
                signal(&c, "TERM");
                c.wait().map(|s| s.success()).unwrap_or(false)
            }
            None => true,
        }
    }

    /// Every log line of every run of this worker.
    pub fn log(&self) -> String {
        self.logs
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Lines of the log that say a unit was computed.
    pub fn units_computed(&self) -> usize {
        self.log().matches("unit computed").count()
    }

    /// Waits until the log says at least `n` units were computed; fails with the log after
    /// `limit`.
    pub fn wait_computed(&self, n: usize, limit: Duration) {
        let start = Instant::now();
        while self.units_computed() < n {
            assert!(
                start.elapsed() < limit,
                "fewer than {n} units computed: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The status code of a plain HTTP GET on loopback, without a client library.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace().nth(1)?.parse().ok()
}

fn signal(c: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &c.id().to_string()])
        .status();
}

/// Runs `tmd-server <args>` against `server` with the admin token and parses its JSON output.
pub fn admin(server: &str, args: &[&str]) -> Value {
    let out = Command::new(bin("tmd-server"))
        .args(args)
        .args(["--server", server, "--admin-token", ADMIN_TOKEN])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run tmd-server");
    assert!(
        out.status.success(),
        "tmd-server {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// `tmd-server campaign create <args>`: the new campaign.
pub fn create_campaign(server: &str, args: &[&str]) -> Value {
    let mut all = vec!["campaign", "create"];
    all.extend(args);
    admin(server, &all)
}

/// `tmd-server token create <args>`: the new enrollment token.
pub fn enrollment_token(server: &str, args: &[&str]) -> String {
    let mut all = vec!["token", "create"];
    all.extend(args);
    admin(server, &all)["token"].as_str().unwrap().to_string()
}

/// The one number a query with one `$1` parameter returns.
pub async fn count(db: &tmd_test_support::TestDb, sql: &str, bind: i64) -> i64 {
    sqlx::query_scalar(sql)
        .bind(bind)
        .fetch_one(db.pool())
        .await
        .unwrap()
}

/// `GET` an admin route; `None` while the server is down.
pub async fn get(server: &str, path: &str) -> Option<Value> {
    let resp = reqwest::Client::new()
        .get(format!("{server}/api/v1{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}

/// The text an admin GET of `path` (under `/api/v1`) answers; fails unless it succeeds.
pub async fn get_text(server: &str, path: &str) -> String {
    let resp = reqwest::Client::new()
        .get(format!("{server}/api/v1{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
    resp.text().await.unwrap()
}

/// The JSON an admin POST of `body` to `path` (under `/api/v1`) answers; fails unless it
/// succeeds.
pub async fn post_json(server: &str, path: &str, body: &Value) -> Value {
    let resp = reqwest::Client::new()
        .post(format!("{server}/api/v1{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .timeout(Duration::from_secs(30))
        .json(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    assert!(resp.status().is_success(), "POST {path}: {}", resp.status());
    resp.json().await.unwrap()
}

/// Units done of a campaign, from its progress; `None` while the server is down.
pub async fn units_done(server: &str, campaign: i64) -> Option<i64> {
    let p = get(server, &format!("/campaigns/{campaign}/progress")).await?;
    p["done"]["units"].as_i64()
}

/// Waits until `campaign` has at least `units` done units; fails after `limit`.
pub async fn wait_for_units(server: &str, campaign: i64, units: i64, limit: Duration) {
    let start = Instant::now();
    loop {
        if units_done(server, campaign).await.unwrap_or(0) >= units {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "campaign stuck below {units} units done"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `campaign` is complete: every unit done and, where it derives, every base
/// result's cases derived (the coordinator does that in the background, after the results).
pub async fn wait_for_complete(db: &tmd_test_support::TestDb, campaign: i64, limit: Duration) {
    let start = Instant::now();
    loop {
        let (state, queued): (String, i64) = sqlx::query_as(
            "SELECT state, (SELECT count(*) FROM pending_derivations WHERE campaign_id = $1) \
             FROM campaigns WHERE id = $1",
        )
        .bind(campaign)
        .fetch_one(db.pool())
        .await
        .unwrap();
        if state == "complete" {
            assert_eq!(queued, 0, "a complete campaign has nothing left to derive");
            return;
        }
        assert!(
            start.elapsed() < limit,
            "campaign {campaign} still {state} with {queued} results to derive"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every unit of `campaign` computed by one trusted CPU worker (two threads, `--exit-when-idle`,
/// state in `state_dir`): waits until the `units` are done and the worker has exited (its log
/// on failure), and returns it.
pub async fn compute_on_one_worker(
    server: &str,
    state_dir: &Path,
    campaign: i64,
    units: i64,
) -> Worker {
    let token = enrollment_token(server, &["--trusted"]);
    let mut worker = Worker::start(
        server,
        &token,
        state_dir,
        &["--threads", "2", "--exit-when-idle", "--backend", "cpu"],
    );
    wait_for_units(server, campaign, units, Duration::from_secs(120)).await;
    assert!(
        worker.wait_exit(Duration::from_secs(30)).is_some(),
        "{}",
        worker.log()
    );
    worker
}

/// The JSON output of `tmd-worker search` with these arguments (function, format, range, ...;
/// `--output json --quiet` are added).
pub fn search_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Value {
    let out = Command::new(bin("tmd-worker"))
        .arg("search")
        .args(args)
        .args(["--output", "json", "--quiet"])
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run tmd-worker search");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// The HR-cases `(x, bits, kind)` of a search's JSON output.
pub fn hr_case_keys(v: &Value) -> std::collections::BTreeSet<(String, i64, String)> {
    v["hr_cases"]
        .as_array()
        .expect("hr_cases")
        .iter()
        .map(|c| {
            (
                c["x"].as_str().unwrap().to_string(),
                c["bits"].as_i64().unwrap(),
                c["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The HR-cases `(x, bits, kind)` of `tmd-worker search` with these arguments: the reference a
/// campaign must equal.
pub fn local_search(args: &[&str]) -> std::collections::BTreeSet<(String, i64, String)> {
    hr_case_keys(&search_json(args))
}

/// exp in binary64 on `[from, to)`, in units of 2^36 arguments, at 36 bits: the flags of
/// `campaign create` and `tmd-worker search` alike.
pub const fn exp_binary64(from: &'static str, to: &'static str) -> [&'static str; 12] {
    [
        "--function",
        "exp",
        "--format",
        "binary64",
        "--min-bits",
        "36",
        "--from",
        from,
        "--to",
        to,
        "--unit-bits",
        "36",
    ]
}

/// The campaign of the whole-system tests: exp in binary64 on 24 units of 2^36 arguments just
/// above 1. Each unit takes a noticeable fraction of a second, so failures land in the middle
/// of leases. The same flags serve `campaign create` and `tmd-worker search`.
pub const EXP_BINARY64_24_UNITS: [&str; 12] = exp_binary64("0x1p+0", "0x1.0018p+0");

/// Units in [`EXP_BINARY64_24_UNITS`].
pub const EXP_BINARY64_UNITS: i64 = 24;

/// Creates the campaign [`EXP_BINARY64_24_UNITS`] and an enrollment token: `(campaign id, token)`.
pub fn create_exp_campaign(server: &str) -> (i64, String) {
    let c = create_campaign(server, &EXP_BINARY64_24_UNITS);
    assert_eq!(c["units_total"], EXP_BINARY64_UNITS, "{c}");
    let token = enrollment_token(server, &["--trusted"]);
    (c["id"].as_i64().unwrap(), token)
}

/// Asserts that `got` holds the HR-cases of a local search over [`EXP_BINARY64_24_UNITS`],
/// and that there are some.
pub fn assert_exp_local_search(got: &std::collections::BTreeSet<(String, i64, String)>) {
    let want = local_search(&EXP_BINARY64_24_UNITS);
    assert!(!want.is_empty());
    assert_eq!(got, &want, "the campaign's HR-cases equal a local search's");
}

/// Checks a finished campaign in the database: every unit done, one result per unit (`units`
/// in all), no HR-case recorded twice; returns the HR-cases `(x, bits, kind)`.
pub async fn every_unit_done_once(
    db: &tmd_test_support::TestDb,
    campaign: i64,
    units: i64,
) -> std::collections::BTreeSet<(String, i64, String)> {
    let not_done: i64 =
        sqlx::query_scalar("SELECT count(*) FROM units WHERE campaign_id = $1 AND state <> 'done'")
            .bind(campaign)
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(not_done, 0, "every unit is done");
    wait_for_complete(db, campaign, Duration::from_secs(60)).await;
    let twice: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT unit_id FROM results r JOIN units u ON u.id = r.unit_id \
         WHERE u.campaign_id = $1 GROUP BY unit_id HAVING count(*) > 1) t",
    )
    .bind(campaign)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(twice, 0, "no unit is recorded twice");
    let results: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM results r JOIN units u ON u.id = r.unit_id WHERE u.campaign_id = $1",
    )
    .bind(campaign)
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(results, units, "one result per unit");
    let rows: Vec<(String, i32, String)> =
        sqlx::query_as("SELECT x, bits, kind FROM hr_cases WHERE campaign_id = $1")
            .bind(campaign)
            .fetch_all(db.pool())
            .await
            .unwrap();
    let set: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|(x, b, k)| (x.clone(), *b as i64, k.clone()))
        .collect();
    assert_eq!(set.len(), rows.len(), "no HR-case is recorded twice");
    set
}
