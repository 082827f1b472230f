//! A worker pointed at the wrong place says what is wrong: nothing listening (it waits and
//! says "connection refused"), a web server that is not a coordinator (it stops at once and
//! says so), TLS spoken to a plain HTTP server (it stops and says TLS failed); and a worker
//! repointed at another server keeps its token to itself there.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tmd_tests::{bin, free_port, scratch};

/// An HTTP server that answers 501 with a plain-text body to everything, as `python3 -m
/// http.server` does to a POST.
fn not_a_coordinator() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            s.set_read_timeout(Some(Duration::from_millis(200))).ok();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "Unsupported method ('POST')";
            let _ = write!(
                s,
                "HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// Runs `tmd-worker run` against `server` for at most `limit`; kills it then.
fn run_worker(server: &str, dir: &Path, limit: Duration) -> (Option<i32>, String) {
    let log = dir.join("worker.log");
    let mut child = Command::new(bin("tmd-worker"))
        .args(["run", "--server", server, "--token", "enroll-me"])
        // The unknown host is not this machine: plain HTTP to it needs the opt-in,
        // or the worker would stop before it looks the name up.
        .arg("--insecure-http")
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("RUST_BACKTRACE", "0")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status, std::fs::read_to_string(&log).unwrap())
}

fn finished(out: &(Option<i32>, String)) -> bool {
    out.0.is_some()
}

#[test]
fn nothing_listening_is_named_and_waited_for() {
    let dir = scratch("worker-refused");
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = run_worker(&url, &dir, Duration::from_secs(4));
    assert!(
        !finished(&out),
        "a server that is down is waited for: {}",
        out.1
    );
    assert!(out.1.contains("connection refused"), "{}", out.1);
    assert!(out.1.contains("waiting to register"), "{}", out.1);
}

#[test]
fn a_server_that_is_not_a_coordinator_stops_the_worker() {
    let dir = scratch("worker-not-coordinator");
    let url = format!("http://127.0.0.1:{}", not_a_coordinator());
    let out = run_worker(&url, &dir, Duration::from_secs(20));
    assert_eq!(out.0, Some(1), "{}", out.1);
    assert!(out.1.contains("is not a tmd coordinator"), "{}", out.1);
    assert!(out.1.contains("501"), "{}", out.1);
    assert!(out.1.contains("/readyz"), "{}", out.1);
}

#[test]
fn tls_to_a_plain_http_server_stops_the_worker() {
    let dir = scratch("worker-tls");
    let url = format!("https://127.0.0.1:{}", not_a_coordinator());
    let out = run_worker(&url, &dir, Duration::from_secs(20));
    assert_eq!(out.0, Some(1), "{}", out.1);
    assert!(out.1.contains("TLS failed"), "{}", out.1);
}

#[test]
fn an_unknown_host_is_named() {
    let dir = scratch("worker-dns");
    // `.invalid` never resolves (RFC 6761).
    let out = run_worker(
        "http://coordinator.invalid:8080",
        &dir,
        Duration::from_secs(4),
    );
    assert!(out.1.contains("cannot resolve the host name"), "{}", out.1);
}

/// A worker registered at one server and pointed at another asks the new one whether it knows
/// it with its token's SHA-256 only: a server that is not a replica of its coordinator (here
/// not a coordinator at all) never sees the token, which would let it post as this worker.
#[test]
fn a_repointed_worker_does_not_send_its_token_to_the_new_server() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            s.set_read_timeout(Some(Duration::from_millis(300))).ok();
            let mut buf = [0u8; 16384];
            let n = s.read(&mut buf).unwrap_or(0);
            log.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
            let body = "Unsupported method ('POST')";
            let _ = write!(
                s,
                "HTTP/1.1 501 Not Implemented\r\nContent-Type: text/plain\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let dir = scratch("worker-repointed-token");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let token = "tmdw_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    std::fs::write(
        state.join("credentials.json"),
        format!(r#"{{"server":"http://127.0.0.1:1","worker_id":7,"token":"{token}"}}"#),
    )
    .unwrap();
    let out = run_worker(
        &format!("http://127.0.0.1:{port}"),
        &dir,
        Duration::from_secs(20),
    );
    assert!(finished(&out), "the worker must stop: {}", out.1);
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.contains("POST /api/v1/workers/identify"),
        "it asked: {seen}"
    );
    assert!(!seen.contains(token), "the token was sent: {seen}");
    assert!(
        !seen.to_ascii_lowercase().contains("authorization"),
        "a bearer was sent: {seen}"
    );
}
