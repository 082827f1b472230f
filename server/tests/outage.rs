//! A database outage seen from `tmd-server serve` (the real binary): PostgreSQL sits behind a
//! TCP relay this test cuts and restores. Requests in the outage get 503 `unavailable` with
//! Retry-After within the acquire timeout, and the log has one WARN for the outage, one line
//! for its end, and no ERROR.

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

#[tokio::test(flavor = "multi_thread")]
async fn a_database_outage_is_one_warning_and_quick_503s() {
    let db = TestDb::new().await;
    let mut relay = Relay::new(postgres_addr(db.url())).await;
    let mut url = reqwest::Url::parse(db.url()).unwrap();
    url.set_host(Some("127.0.0.1")).unwrap();
    url.set_port(Some(relay.port)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log_path = std::env::temp_dir().join(format!("tmd-outage-{}.log", std::process::id()));
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_tmd-server"))
        .args(["serve", "--database-url", url.as_str()])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-token", ADMIN])
        .args([
            "--db-acquire-timeout-seconds",
            "1",
            "--sweep-interval-seconds",
            "1",
        ])
        .env("NO_COLOR", "1")
        .env("TMD_LOG", "info")
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let campaigns = format!("{base}/api/v1/campaigns");
    let start = Instant::now();
    while get(&http, &campaigns)
        .await
        .is_none_or(|r| !r.status().is_success())
    {
        assert!(start.elapsed() < Duration::from_secs(30), "server not up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A few requests in parallel, so the pool holds several connections the outage breaks.
    let warm: Vec<_> = (0..4).map(|_| get(&http, &campaigns)).collect();
    for r in futures_util::future::join_all(warm).await {
        assert!(r.unwrap().status().is_success());
    }

    relay.cut().await;
    for i in 0..8 {
        let t = Instant::now();
        let r = get(&http, &campaigns).await.expect("the server answers");
        let took = t.elapsed();
        assert_eq!(r.status().as_u16(), 503, "request {i}");
        assert_eq!(
            r.headers().get("retry-after").map(|v| v.to_str().unwrap()),
            Some("5")
        );
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["code"], "unavailable", "{body}");
        // The acquire timeout is 1 s; the default (5 s) or the old 10 s would show here.
        eprintln!("request {i} in the outage: 503 after {took:?}");
        assert!(
            took < Duration::from_millis(2500),
            "request {i} took {took:?}"
        );
    }

    relay.up();
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(&log_path).unwrap();
        if log.contains("the database is back") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the outage's end is never logged: {log}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = get(&http, &campaigns).await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());

    let _ = server.start_kill();
    let _ = server.wait().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    let _ = std::fs::remove_file(&log_path);
    eprintln!("{log}");
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 1, "one warning per outage:\n{log}");
    assert!(warnings[0].contains("the database is unavailable"), "{log}");
    assert!(!log.contains("ERROR"), "{log}");
    assert!(!log.contains("Broken pipe"), "{log}");
    assert_eq!(log.matches("the database is back").count(), 1, "{log}");
    db.drop_db().await;
}
