//! The daemon's settings: flags, their environment variables and the TOML configuration file,
//! in that order of precedence.

use super::misbehave::Misbehave;
use crate::local::BackendArg;
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use tmd_kernels::cuda::MemoryBudget;

/// The enrollment token `deploy/worker.env` ships with: refused here, before any request, so
/// that a forgotten template says so instead of the server's 401.
pub const PLACEHOLDER_TOKEN: &str = "paste-the-enrollment-token-here";

/// Refuses the placeholder of `deploy/worker.env` as an enrollment token.
pub fn check_enrollment_token(token: &str) -> Result<()> {
    if token.trim() == PLACEHOLDER_TOKEN || token.contains("paste-the") {
        bail!(
            "the enrollment token is the placeholder of deploy/worker.env: put the token that \
             `tmd-server token create` printed in TMD_TOKEN (or pass --token)"
        );
    }
    Ok(())
}

/// Seconds of work a lease is asked for when nothing says otherwise: long enough that lease
/// requests are rare on the server, short enough that a lost worker's lease is a small loss
/// and that a claim stays quick: a claim costs the coordinator about 30 us a unit, and claims
/// of one campaign take turns, so 16 fast GPUs (40 units/s each) asking for 60 s claimed 2,400
/// units at a time in 80 ms (p99 260 ms), for 30 s in 45 ms (p99 67 ms; `tmd-server bench
/// farm`, BENCHMARKS.md).
pub const DEFAULT_LEASE_SECONDS: u32 = 30;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Base URL of the coordinator, e.g. http://coordinator:8080.
    #[arg(long, env = "TMD_SERVER")]
    pub server: Option<String>,
    /// Enrollment token from the admin (`tmd-server token create`), used once to register;
    /// the worker's own token is then kept in the state directory.
    #[arg(long, env = "TMD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Name shown to the admin [default: the host name].
    #[arg(long, env = "TMD_WORKER_NAME")]
    pub name: Option<String>,
    /// Where credentials, the current lease and unsent results are kept
    /// [default: ./tmd-worker-state].
    #[arg(long, env = "TMD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Engine threads [default: all cores].
    #[arg(long, env = "TMD_THREADS")]
    pub threads: Option<usize>,
    /// About how many seconds of work to ask for per lease, at this worker's measured speed
    /// [default: 30]. The next lease is asked for while this one's last seconds run.
    #[arg(long, env = "TMD_LEASE_SECONDS")]
    pub lease_seconds: Option<u32>,
    /// Units computed at once [default: the engine threads, as `tmd-worker search` does]:
    /// while one unit's arguments are generated or verified on the CPU, the others' kernels
    /// keep the GPUs busy.
    #[arg(long, env = "TMD_UNITS_IN_FLIGHT")]
    pub units_in_flight: Option<usize>,
    /// Seconds to wait for the state directory while another tmd-worker holds it (a
    /// predecessor killed a moment ago may still be exiting) before giving up.
    #[arg(long, env = "TMD_STATE_LOCK_WAIT", default_value_t = 60)]
    pub state_lock_wait: u64,
    /// A TOML file with any of: server, token, name, state_dir, threads, lease_seconds,
    /// units_in_flight, backend, devices, gpu_memory, insecure_http, ca_cert.
    /// Flags and environment variables take precedence over it.
    #[arg(long, env = "TMD_WORKER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Stop after computing this many units (default: run until stopped).
    #[arg(long)]
    pub max_units: Option<u64>,
    /// Exit when the server has no work left: none to lease, and no unit pending or leased to
    /// another worker (a lease that expires would bring work back), instead of waiting for
    /// more.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// Seconds between status lines in the log.
    #[arg(long, default_value_t = 30)]
    pub status_seconds: u64,
    /// Print the settings (token redacted) and exit: checks a configuration.
    #[arg(long)]
    pub dry_run: bool,
    /// Where units are computed: auto (the GPUs that pass the self-test, else the CPU), cpu,
    /// or cuda (an error if no GPU passes) [default: auto].
    #[arg(long, value_enum, env = "TMD_BACKEND")]
    pub backend: Option<BackendArg>,
    /// CUDA devices to use, e.g. 0,1 [default: every device].
    #[arg(long, value_delimiter = ',', env = "TMD_DEVICES")]
    pub devices: Vec<usize>,
    /// Device memory the GPU back end may use per device: bytes with a unit (8G, 512M) or a
    /// share of the memory free at start (60%). Units with more work than fits are cut into
    /// chunks that do [default: auto, half the free memory].
    #[arg(long, env = "TMD_GPU_MEMORY")]
    pub gpu_memory: Option<MemoryBudget>,
    /// Allow a plain http:// server that is not on this machine: the worker's token would
    /// cross the network in clear. Off by default; use https:// instead.
    #[arg(long, env = "TMD_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// An extra CA certificate (PEM) to trust for the server's HTTPS (a lab's own CA), besides
    /// the built-in web roots.
    #[arg(long, env = "TMD_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// For the trust tests only: misbehave (lazy, forge, flip, late) so they can check the
    /// server catches it. See misbehave.rs.
    #[arg(long, value_enum, env = "TMD_MISBEHAVE", hide = true)]
    pub misbehave: Option<Misbehave>,
}

impl Default for RunArgs {
    /// What the command line gives with no flag and no environment (the tests build on it).
    fn default() -> RunArgs {
        RunArgs {
            server: None,
            token: None,
            name: None,
            state_dir: None,
            threads: None,
            lease_seconds: None,
            units_in_flight: None,
            state_lock_wait: 60,
            config: None,
            max_units: None,
            exit_when_idle: false,
            status_seconds: 30,
            dry_run: false,
            backend: None,
            devices: Vec::new(),
            gpu_memory: None,
            insecure_http: false,
            ca_cert: None,
            misbehave: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    server: Option<String>,
    token: Option<String>,
    name: Option<String>,
    state_dir: Option<PathBuf>,
    threads: Option<usize>,
    lease_seconds: Option<u32>,
    units_in_flight: Option<usize>,
    backend: Option<String>,
    devices: Option<Vec<usize>>,
    gpu_memory: Option<String>,
    insecure_http: Option<bool>,
    ca_cert: Option<PathBuf>,
}

/// The daemon's settings after flags, environment and the configuration file.
#[derive(Clone)]
pub struct Settings {
    pub server: String,
    pub enrollment_token: Option<String>,
    pub name: String,
    pub state_dir: PathBuf,
    pub threads: Option<usize>,
    pub lease_seconds: u32,
    pub units_in_flight: Option<usize>,
    pub state_lock_wait: Duration,
    pub max_units: Option<u64>,
    pub exit_when_idle: bool,
    pub status_every: Duration,
    pub backend: BackendArg,
    pub devices: Vec<usize>,
    pub gpu_memory: MemoryBudget,
    pub misbehave: Option<Misbehave>,
    pub ca_cert: Option<PathBuf>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("server", &self.server)
            .field(
                "enrollment_token",
                &self.enrollment_token.as_ref().map(|_| "<redacted>"),
            )
            .field("name", &self.name)
            .field("state_dir", &self.state_dir)
            .field("threads", &self.threads)
            .field("lease_seconds", &self.lease_seconds)
            .field("units_in_flight", &self.units_in_flight)
            .field("state_lock_wait", &self.state_lock_wait)
            .field("backend", &self.backend)
            .field("devices", &self.devices)
            .field("gpu_memory", &self.gpu_memory)
            .field("misbehave", &self.misbehave)
            .field("ca_cert", &self.ca_cert)
            .finish()
    }
}

impl Settings {
    /// The settings for people, one per line (`run --dry-run`): the token redacted, each
    /// default named as such.
    pub fn describe(&self) -> String {
        let or = |v: Option<String>, default: &str| v.unwrap_or_else(|| default.to_string());
        let token = match &self.enrollment_token {
            Some(_) => "set (redacted)".to_string(),
            None => format!(
                "none (the worker's own token in {} is used)",
                self.state_dir.join("credentials.json").display()
            ),
        };
        let lines = [
            ("server", self.server.clone()),
            ("enrollment token", token),
            ("name", self.name.clone()),
            ("state directory", self.state_dir.display().to_string()),
            (
                "engine threads",
                or(self.threads.map(|n| n.to_string()), "all cores"),
            ),
            ("lease seconds", self.lease_seconds.to_string()),
            (
                "units in flight",
                or(
                    self.units_in_flight.map(|n| n.to_string()),
                    "one per engine thread",
                ),
            ),
            ("back end", format!("{:?}", self.backend).to_lowercase()),
            (
                "devices",
                if self.devices.is_empty() {
                    "every device".into()
                } else {
                    format!("{:?}", self.devices)
                },
            ),
            ("GPU memory", self.gpu_memory.to_string()),
            (
                "extra CA",
                or(
                    self.ca_cert.as_ref().map(|p| p.display().to_string()),
                    "none",
                ),
            ),
            (
                "stop after",
                or(self.max_units.map(|n| format!("{n} units")), "never"),
            ),
            ("exit when idle", self.exit_when_idle.to_string()),
            (
                "status line every",
                format!("{} s", self.status_every.as_secs()),
            ),
        ];
        lines
            .iter()
            .map(|(k, v)| format!("{k:<18} {v}\n"))
            .collect()
    }

    /// Refuses what a start would fail on without asking the server: the placeholder token,
    /// and no token at all for a worker not registered yet (no credentials in its state
    /// directory).
    pub fn check_token(&self) -> Result<()> {
        match &self.enrollment_token {
            Some(t) => check_enrollment_token(t),
            None if self.state_dir.join("credentials.json").exists() => Ok(()),
            None => bail!(
                "no enrollment token, and {} holds no credentials: pass --token (or \
                 TMD_TOKEN) with a token from `tmd-server token create`",
                self.state_dir.display()
            ),
        }
    }

    pub fn resolve(a: RunArgs) -> Result<Settings> {
        let file: FileConfig = match &a.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let Some(server) = a.server.or(file.server) else {
            bail!("no server: pass --server URL (or TMD_SERVER, or `server` in --config)");
        };
        if !(server.starts_with("http://") || server.starts_with("https://")) {
            bail!("--server must be an http:// or https:// URL, got '{server}'");
        }
        let insecure_http = a.insecure_http || file.insecure_http.unwrap_or(false);
        if server.starts_with("http://") && !insecure_http && !is_loopback_url(&server) {
            bail!(
                "--server {server} is plain HTTP to another machine: the worker's token would \
                 cross the network in clear. Use https:// (with --ca-cert for a private CA), or \
                 pass --insecure-http if the network is trusted"
            );
        }
        let name = a
            .name
            .or(file.name)
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "tmd-worker".into());
        let backend = match (a.backend, file.backend) {
            (Some(b), _) => b,
            (None, Some(text)) => BackendArg::from_str(&text, true)
                .map_err(|e| anyhow::anyhow!("backend = \"{text}\" in the configuration: {e}"))?,
            (None, None) => BackendArg::Auto,
        };
        let devices = if a.devices.is_empty() {
            file.devices.unwrap_or_default()
        } else {
            a.devices
        };
        let gpu_memory = match (a.gpu_memory, file.gpu_memory) {
            (Some(b), _) => b,
            (None, Some(text)) => text
                .parse()
                .with_context(|| format!("gpu_memory = \"{text}\" in the configuration"))?,
            (None, None) => MemoryBudget::default(),
        };
        Ok(Settings {
            backend,
            devices,
            gpu_memory,
            server,
            enrollment_token: a.token.or(file.token),
            name,
            state_dir: a
                .state_dir
                .or(file.state_dir)
                .unwrap_or_else(|| PathBuf::from("tmd-worker-state")),
            threads: a.threads.or(file.threads),
            lease_seconds: a
                .lease_seconds
                .or(file.lease_seconds)
                .unwrap_or(DEFAULT_LEASE_SECONDS)
                .max(1),
            units_in_flight: a.units_in_flight.or(file.units_in_flight).map(|n| n.max(1)),
            state_lock_wait: Duration::from_secs(a.state_lock_wait),
            max_units: a.max_units,
            exit_when_idle: a.exit_when_idle,
            status_every: Duration::from_secs(a.status_seconds.max(1)),
            misbehave: a.misbehave,
            ca_cert: a.ca_cert.or(file.ca_cert),
        })
    }
}

/// Whether `url`'s host is this machine (`localhost`, 127.0.0.0/8, ::1).
fn is_loopback_url(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
    else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_come_from_flags_then_the_file() {
        let dir = std::env::temp_dir().join(format!("tmd-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("worker.toml");
        std::fs::write(
            &file,
            "server = \"http://from-file:8080\"\nname = \"filename\"\nthreads = 3\ntoken = \"tok\"\ninsecure_http = true\n",
        )
        .unwrap();
        let s = Settings::resolve(RunArgs {
            config: Some(file.clone()),
            name: Some("flagname".into()),
            ..RunArgs::default()
        })
        .unwrap();
        assert_eq!(s.server, "http://from-file:8080");
        assert_eq!(s.name, "flagname");
        assert_eq!(s.threads, Some(3));
        assert_eq!(s.lease_seconds, DEFAULT_LEASE_SECONDS);
        assert_eq!(s.state_lock_wait, Duration::from_secs(60));
        assert!(!format!("{s:?}").contains("tok\""));
        assert_eq!(s.gpu_memory, MemoryBudget::default());
        std::fs::write(
            &file,
            "server = \"https://from-file:8080\"\ngpu_memory = \"6G\"\n",
        )
        .unwrap();
        let from_file = |gpu_memory| {
            Settings::resolve(RunArgs {
                config: Some(file.clone()),
                gpu_memory,
                ..RunArgs::default()
            })
        };
        assert_eq!(
            from_file(None).unwrap().gpu_memory,
            MemoryBudget::Bytes(6 << 30)
        );
        assert_eq!(
            from_file(Some(MemoryBudget::FreeShare(0.25)))
                .unwrap()
                .gpu_memory,
            MemoryBudget::FreeShare(0.25)
        );
        std::fs::write(&file, "server = \"https://x\"\ngpu_memory = \"lots\"\n").unwrap();
        let e = format!("{:#}", from_file(None).unwrap_err());
        assert!(
            e.contains("gpu_memory") && e.contains("not a memory budget"),
            "{e}"
        );
        std::fs::write(&file, "sever = \"typo\"\n").unwrap();
        assert!(Settings::resolve(RunArgs {
            config: Some(file.clone()),
            server: Some("http://x".into()),
            ..RunArgs::default()
        })
        .is_err());
        assert!(Settings::resolve(RunArgs::default()).is_err());
        assert!(Settings::resolve(RunArgs {
            server: Some("ftp://x".into()),
            ..RunArgs::default()
        })
        .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_dry_run_reads_well_and_checks_the_token() {
        let dir = std::env::temp_dir().join(format!("tmd-dry-{}", std::process::id()));
        let with = |token: Option<&str>| {
            Settings::resolve(RunArgs {
                server: Some("http://127.0.0.1:8080".into()),
                token: token.map(String::from),
                state_dir: Some(dir.clone()),
                ..RunArgs::default()
            })
            .unwrap()
        };
        let s = with(Some("a-real-enrollment-token"));
        s.check_token().unwrap();
        let text = s.describe();
        assert!(
            text.contains("server             http://127.0.0.1:8080"),
            "{text}"
        );
        assert!(
            text.contains("set (redacted)") && !text.contains("a-real"),
            "{text}"
        );
        assert!(
            !text.contains("misbehave") && !text.contains("Some("),
            "{text}"
        );
        let e = with(None).check_token().unwrap_err().to_string();
        assert!(e.contains("--token"), "{e}");
        let shipped = include_str!("../../../deploy/worker.env")
            .lines()
            .find_map(|l| l.strip_prefix("TMD_TOKEN="))
            .expect("worker.env sets TMD_TOKEN");
        let e = with(Some(shipped)).check_token().unwrap_err().to_string();
        assert!(e.contains("placeholder"), "{e}");
        // Registered already: no token needed.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("credentials.json"), "{}").unwrap();
        with(None).check_token().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plain_http_is_refused_off_this_machine_unless_asked() {
        let with = |server: &str, insecure_http: bool| {
            Settings::resolve(RunArgs {
                server: Some(server.into()),
                insecure_http,
                ..RunArgs::default()
            })
        };
        let err = with("http://coordinator.example:8080", false).unwrap_err();
        assert!(err.to_string().contains("--insecure-http"), "{err}");
        assert!(with("http://coordinator.example:8080", true).is_ok());
        assert!(with("https://coordinator.example", false).is_ok());
        for local in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://[::1]:8080",
        ] {
            assert!(with(local, false).is_ok(), "{local}");
        }
    }
}
