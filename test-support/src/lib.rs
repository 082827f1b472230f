//! Test helpers: each test gets its own throwaway PostgreSQL database, dropped afterwards.
//!
//! Where the server comes from, in order: `DATABASE_URL` (any database on a server where we may
//! `CREATE DATABASE`), else the local server at `127.0.0.1:5432` as user `postgres`, else a
//! cluster this helper `initdb`s and starts itself under `TMD_TEST_PG_DIR` (default
//! `/tmp/tmd-test-pg`), reused by later test processes while it runs.

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A database that exists for one test. Dropping it drops the database.
pub struct TestDb {
    name: String,
    url: String,
    admin_url: String,
    pool: PgPool,
    dropped: bool,
}

impl TestDb {
    /// Creates a fresh, empty database with a unique name and a pool connected to it.
    pub async fn new() -> TestDb {
        let admin_url = admin_url().to_string();
        let name = format!("tmd_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to test PostgreSQL at {admin_url}: {e}"));
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        admin.close().await.ok();
        let options = PgConnectOptions::from_str(&admin_url)
            .expect("admin url parses")
            .database(&name);
        let url = options.to_url_lossy().to_string();
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to test database {name}: {e}"));
        TestDb {
            name,
            url,
            admin_url,
            pool,
            dropped: false,
        }
    }

    /// A pool on this test's database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The URL of this test's database, for a child process such as `tmd-server`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Panics if a row of the coordinator's schema points at a row that does not exist, or two
    /// units hold one place in a campaign: what the hot writes keep without foreign keys and
    /// without a unique index (migration `20261123000001_hot_path_keys.sql`), a result's unit,
    /// lease and worker, a unit's lease, a unit's (campaign, seq). Nothing to check where the
    /// schema is not there (a test that never migrated).
    pub async fn assert_no_orphans(&self) {
        let migrated: bool = sqlx::query_scalar("SELECT to_regclass('results') IS NOT NULL")
            .fetch_one(&self.pool)
            .await
            .expect("the catalogue answers");
        if !migrated {
            return;
        }
        let orphans: Vec<(String, i64)> = sqlx::query_as(
            "SELECT 'result ' || r.id || ' of no unit ' || r.unit_id, 1::int8 FROM results r \
                 WHERE NOT EXISTS (SELECT 1 FROM units u WHERE u.id = r.unit_id) \
             UNION ALL SELECT 'result ' || r.id || ' of no lease ' || r.lease_id, 1 FROM results r \
                 WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = r.lease_id) \
             UNION ALL SELECT 'result ' || r.id || ' of no worker ' || r.worker_id, 1 FROM results r \
                 WHERE NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = r.worker_id) \
             UNION ALL SELECT 'unit ' || u.id || ' leased by no lease ' || u.lease_id, 1 \
                 FROM units u WHERE u.lease_id IS NOT NULL \
                   AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = u.lease_id) \
             UNION ALL SELECT 'campaign ' || campaign_id || ' has ' || count(*) \
                              || ' units at seq ' || seq, 1 \
                 FROM units GROUP BY campaign_id, seq HAVING count(*) > 1 \
             LIMIT 20",
        )
        .fetch_all(&self.pool)
        .await
        .expect("the orphan check runs");
        assert!(
            orphans.is_empty(),
            "rows that point nowhere in {}: {:?}",
            self.name,
            orphans.iter().map(|(o, _)| o).collect::<Vec<_>>()
        );
    }

    /// Checks that no row points nowhere ([`TestDb::assert_no_orphans`]), then closes the pool
    /// and drops the database now (also done on drop, less politely, without the check).
    pub async fn drop_db(mut self) {
        self.assert_no_orphans().await;
        self.pool.close().await;
        drop_database(&self.admin_url, &self.name).await;
        self.dropped = true;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // Drop runs inside a test's runtime, where blocking on it would deadlock: use a
        // thread with a runtime of its own. FORCE ends connections the pool still holds.
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let joined = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for dropping the test database")
                .block_on(drop_database(&admin_url, &name));
        })
        .join();
        if joined.is_err() {
            eprintln!("warning: could not drop test database {}", self.name);
        }
    }
}

async fn drop_database(admin_url: &str, name: &str) {
    match PgConnection::connect(admin_url).await {
        Ok(mut admin) => {
            if let Err(e) = admin
                .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await
            {
                eprintln!("warning: could not drop test database {name}: {e}");
            }
            admin.close().await.ok();
        }
        Err(e) => eprintln!("warning: could not connect to drop test database {name}: {e}"),
    }
}

/// The URL of a database on a server where tests may create databases, found or started once
/// per process.
pub fn admin_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("DATABASE_URL") {
            if !url.is_empty() {
                return url;
            }
        }
        if reachable(5432) {
            return "postgres://postgres@127.0.0.1:5432/postgres".to_string();
        }
        let dir = std::env::var_os("TMD_TEST_PG_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp/tmd-test-pg"));
        let port = start_own_cluster(&dir).unwrap_or_else(|e| {
            panic!(
                "no PostgreSQL for tests: nothing answers on 127.0.0.1:5432 and a private \
                     cluster could not start: {e}. Run `bash scripts/setup.sh` as root (it \
                     installs Debian's postgresql), or install it yourself (sudo apt-get install \
                     postgresql), or set DATABASE_URL"
            )
        });
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    })
}

fn reachable(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// Starts (or reuses) a private cluster in `dir` and returns its port.
fn start_own_cluster(dir: &Path) -> Result<u16, String> {
    let port_file = dir.join("port");
    if let Ok(text) = std::fs::read_to_string(&port_file) {
        if let Ok(port) = text.trim().parse::<u16>() {
            if reachable(port) {
                return Ok(port);
            }
        }
    }
    let cluster = PrivateCluster::init(dir)?;
    cluster.start()?;
    let port = cluster.port;
    // The shared cluster outlives this process: later test processes reuse it.
    std::mem::forget(cluster);
    std::fs::write(&port_file, port.to_string()).map_err(|e| e.to_string())?;
    Ok(port)
}

/// A PostgreSQL cluster of a test's own, in a folder of its own, that the test may stop and
/// start (a restart under a running coordinator); stopped when dropped. `initdb` runs as
/// `postgres` when the tests run as root.
pub struct PrivateCluster {
    pub dir: PathBuf,
    pub port: u16,
}

impl PrivateCluster {
    /// Creates the cluster in `dir` (its data in `dir/data`) on a free port, not started.
    pub fn init(dir: &Path) -> Result<PrivateCluster, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        if is_root() {
            // initdb refuses to run as root; the cluster belongs to `postgres`.
            run(Command::new("chown").arg("-R").arg("postgres").arg(dir))?;
        }
        let data = dir.join("data");
        if !data.join("PG_VERSION").exists() {
            run(pg_tool("initdb")
                .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "-D"])
                .arg(&data))?;
        }
        Ok(PrivateCluster {
            dir: dir.to_path_buf(),
            port: free_port()?,
        })
    }

    /// The URL of database `db` on this cluster.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Starts the cluster and waits until it takes connections.
    pub fn start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections=300 -c fsync=off",
            self.port,
            self.dir.display()
        );
        run(pg_tool("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-o", &options, "-w", "start"]))?;
        let start = Instant::now();
        while !reachable(self.port) {
            if start.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "cluster in {} did not open port {}",
                    self.dir.display(),
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Stops the cluster as an operator's restart does (`pg_ctl stop -m fast`: every
    /// connection is told 57P01, "terminating connection due to administrator command").
    pub fn stop(&self) -> Result<(), String> {
        PrivateCluster::stop_in(&self.dir)
    }

    /// [`PrivateCluster::stop`] of the cluster in `dir` (from another thread).
    pub fn stop_in(dir: &Path) -> Result<(), String> {
        run(pg_tool("pg_ctl")
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-m", "fast", "-w", "stop"]))
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A PostgreSQL tool, run as `postgres` when the tests run as root.
fn pg_tool(name: &str) -> Command {
    let bin = pg_bin(name);
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    } else {
        Command::new(bin)
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Finds a PostgreSQL server binary on PATH or in Debian's versioned directories.
fn pg_bin(name: &str) -> PathBuf {
    if let Ok(path) = std::env::var("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    versions.sort();
    versions
        .into_iter()
        .rev()
        .map(|v| v.join("bin").join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A lab's own certificate authority and a coordinator certificate it signed, for the HTTPS
/// tests: PEM files in one folder.
pub struct PrivateCa {
    /// The CA's certificate: what a client is told to trust (`--ca-cert`).
    pub ca: PathBuf,
    /// The server's certificate (for `localhost` and `127.0.0.1`) and its key.
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Makes a [`PrivateCa`] in `dir` with the `openssl` command (P-256 keys, valid one day).
pub fn private_ca(dir: &Path) -> PrivateCa {
    let p = |name: &str| dir.join(name).to_str().expect("a UTF-8 path").to_string();
    let (ca_key, ca, key, csr, ext, cert) = (
        p("ca.key"),
        p("ca.pem"),
        p("key.pem"),
        p("req.csr"),
        p("ext"),
        p("cert.pem"),
    );
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509", "-days", "1", "-subj", "/CN=tmd test CA"];
    a.extend(ec);
    a.extend(["-keyout", &ca_key, "-out", &ca]);
    openssl(&a);
    let mut a = vec!["req", "-subj", "/CN=localhost"];
    a.extend(ec);
    a.extend(["-keyout", &key, "-out", &csr]);
    openssl(&a);
    std::fs::write(
        &ext,
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .expect("write the certificate's extensions");
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &ext,
        "-out",
        &cert,
    ]);
    PrivateCa {
        ca: ca.into(),
        cert: cert.into(),
        key: key.into(),
    }
}

fn openssl(args: &[&str]) {
    let ok = Command::new("openssl")
        .args(args)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs")
        .success();
    assert!(ok, "openssl {args:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_test_gets_a_private_database_that_is_dropped() {
        let db = TestDb::new().await;
        let name = db.name().to_string();
        sqlx::query("CREATE TABLE t (v int)")
            .execute(db.pool())
            .await
            .unwrap();
        sqlx::query("INSERT INTO t VALUES (42)")
            .execute(db.pool())
            .await
            .unwrap();
        let v: i32 = sqlx::query_scalar("SELECT v FROM t")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(v, 42);

        let other = TestDb::new().await;
        assert_ne!(other.name(), name);
        let tables: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 't'",
        )
        .fetch_one(other.pool())
        .await
        .unwrap();
        assert_eq!(tables, 0, "a new database starts empty");
        other.drop_db().await;

        db.drop_db().await;
        let mut admin = PgConnection::connect(admin_url()).await.unwrap();
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
            .bind(&name)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert_eq!(left, 0, "the database is gone after drop_db");
    }

    #[tokio::test]
    async fn dropping_without_await_still_removes_the_database() {
        let name = {
            let db = TestDb::new().await;
            db.name().to_string()
        };
        let mut admin = PgConnection::connect(admin_url()).await.unwrap();
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
            .bind(&name)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert_eq!(left, 0);
    }
}
