//! A database outage seen from `tmd-server serve` (the real binary): PostgreSQL sits behind a
//! TCP relay this test cuts and restores. Requests in the outage get 503 `unavailable` with
//! Retry-After within the acquire timeout, and the log has one WARN for the outage, one line
//! for its end, and no ERROR.

use sqlx::Connection;
use std::process::Stdio;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tmd_test_support::TestDb;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

const ADMIN: &str = "admin-token-for-tests-0123456789";

/// Relays 127.0.0.1:`port` to PostgreSQL while up; cut, it refuses connections and has
/// dropped those it carried, as a stopped PostgreSQL would.
struct Relay {
    port: u16,
    target: String,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    async fn new(target: String) -> Relay {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Relay {
            port,
            target,
            tasks: Arc::default(),
            accept: None,
        };
        r.up();
        r
    }

    fn up(&mut self) {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket
            .bind(format!("127.0.0.1:{}", self.port).parse().unwrap())
            .unwrap();
        let listener: TcpListener = socket.listen(64).unwrap();
        let (target, tasks) = (self.target.clone(), self.tasks.clone());
        self.accept = Some(tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().await.push(task);
            }
        }));
    }

    async fn cut(&mut self) {
        if let Some(a) = self.accept.take() {
            a.abort();
            let _ = a.await;
        }
        for t in self.tasks.lock().await.drain(..) {
            t.abort();
        }
    }
}

/// The host:port of the tests' PostgreSQL.
fn postgres_addr(url: &str) -> String {
    let o = sqlx::postgres::PgConnectOptions::from_str(url).unwrap();
    format!("{}:{}", o.get_host(), o.get_port())
}

async fn get(http: &reqwest::Client, url: &str) -> Option<reqwest::Response> {
    http.get(url).bearer_auth(ADMIN).send().await.ok()
}

/// A real `tmd-server serve` on `database_url`, logging to a file, with a 1 s acquire
/// timeout and sweep.
struct Serving {
    child: tokio::process::Child,
    base: String,
    log_path: std::path::PathBuf,
    http: reqwest::Client,
}

impl Serving {
    async fn start(database_url: &str, name: &str) -> Serving {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log_path = std::env::temp_dir().join(format!("tmd-{name}-{}.log", std::process::id()));
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tmd-server"))
            .args(["serve", "--database-url", database_url])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-token", ADMIN])
            .args([
                "--db-acquire-timeout-seconds",
                "1",
                "--sweep-interval-seconds",
                "1",
            ])
            // As under systemd: no terminal, and nothing asking for plain output.
            .env_remove("NO_COLOR")
            .env("TMD_LOG", "info")
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let s = Serving {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log_path,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        };
        let start = Instant::now();
        while s.get().await.is_none_or(|r| !r.status().is_success()) {
            assert!(start.elapsed() < Duration::from_secs(30), "server not up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A few requests in parallel, so the pool holds several connections the outage
        // breaks.
        let warm: Vec<_> = (0..4).map(|_| s.get()).collect();
        for r in futures_util::future::join_all(warm).await {
            assert!(r.unwrap().status().is_success());
        }
        s
    }

    async fn get(&self) -> Option<reqwest::Response> {
        get(&self.http, &format!("{}/api/v1/campaigns", self.base)).await
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap()
    }

    /// Waits for the log line that ends the outage, then for a request to succeed.
    async fn wait_until_back(&self) {
        let start = Instant::now();
        while !self.log().contains("the database is back") {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the outage's end is never logged: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let r = self.get().await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }

    /// Stops the server and checks its log: one WARN for the outage, one line for its end,
    /// no ERROR, no colour codes.
    async fn stop_and_check_log(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let log = self.log();
        let _ = std::fs::remove_file(&self.log_path);
        eprintln!("{log}");
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
        assert_eq!(warnings.len(), 1, "one warning per outage:\n{log}");
        assert!(warnings[0].contains("the database is unavailable"), "{log}");
        assert!(!log.contains("ERROR"), "{log}");
        assert!(!log.contains("Broken pipe"), "{log}");
        assert!(
            !log.contains('\x1b'),
            "no colour codes in a log file: {log:?}"
        );
        assert_eq!(log.matches("the database is back").count(), 1, "{log}");
    }
}

/// A request in an outage: 503 `unavailable` with Retry-After, within the acquire timeout.
async fn assert_unavailable(r: reqwest::Response, took: Duration, what: &str) {
    assert_eq!(r.status().as_u16(), 503, "{what}");
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
        Some("5")
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "unavailable", "{what}: {body}");
    // The acquire timeout is 1 s; the default (5 s) or the old 10 s would show here.
    eprintln!("{what}: 503 after {took:?}");
    assert!(took < Duration::from_millis(2500), "{what} took {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_outage_is_one_warning_and_quick_503s() {
    let db = TestDb::new().await;
    let mut relay = Relay::new(postgres_addr(db.url())).await;
    let mut url = reqwest::Url::parse(db.url()).unwrap();
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(relay.port)).unwrap();
    let server = Serving::start(url.as_str(), "outage").await;

    relay.cut().await;
    for i in 0..8 {
        let t = Instant::now();
        let r = server.get().await.expect("the server answers");
        assert_unavailable(r, t.elapsed(), &format!("request {i} in the outage")).await;
    }

    relay.up();
    server.wait_until_back().await;
    server.stop_and_check_log().await;
    db.drop_db().await;
}

/// PostgreSQL itself restarted under a running coordinator (`pg_ctl stop -m fast`, then
/// start): the pooled connections are told 57P01 "terminating connection due to administrator
/// command" on their next use. Each request in the restart is a 503 with Retry-After, never a
/// 500, and the log holds the outage once.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_restart_is_one_warning_and_503s_never_500s() {
    let dir = std::env::temp_dir().join(format!("tmd-pg-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = tmd_test_support::PrivateCluster::init(&dir).expect("initdb");
    cluster.start().expect("start PostgreSQL");
    let mut admin = sqlx::PgConnection::connect(&cluster.url("postgres"))
        .await
        .unwrap();
    sqlx::query("CREATE DATABASE tmd")
        .execute(&mut admin)
        .await
        .unwrap();
    drop(admin);
    let server = Arc::new(Serving::start(&cluster.url("tmd"), "pg-restart").await);

    // Requests all through the restart: some land while PostgreSQL shuts down or starts up
    // (57P01, 57P03), which used to be 500s.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hammer = {
        let (server, stop) = (server.clone(), stop.clone());
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(r) = server.get().await {
                    statuses.push(r.status().as_u16());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            statuses
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stopping = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || tmd_test_support::PrivateCluster::stop_in(&dir)
    });
    stopping.await.unwrap().expect("stop PostgreSQL");
    // The first requests meet pooled connections closed by the shutdown; the later ones
    // find nothing listening.
    for i in 0..8 {
        let t = Instant::now();
        let r = server.get().await.expect("the server answers");
        assert_unavailable(r, t.elapsed(), &format!("request {i} while stopped")).await;
    }
    cluster.start().expect("start PostgreSQL again");
    server.wait_until_back().await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let statuses = hammer.await.unwrap();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 503),
        "only 200 and 503 through a restart: {statuses:?}"
    );
    assert!(
        statuses.contains(&503) && statuses.contains(&200),
        "{statuses:?}"
    );
    let Ok(server) = Arc::try_unwrap(server) else {
        panic!("the server is still shared")
    };
    server.stop_and_check_log().await;
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}
