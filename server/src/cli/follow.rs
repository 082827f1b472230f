//! The admin commands that follow a campaign from the terminal: `campaign watch` (live
//! progress bars, or plain lines when stdout is not a terminal) and `campaign export` (the
//! HR-cases, streamed from the server to stdout or a file).

use crate::cli::ApiArgs;
use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::de::DeserializeOwned;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;
use tmd_wire::{ApiError, CampaignProgress, CampaignState};

/// `campaign export` options.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// Campaign id.
    pub id: i64,
    /// The file format: json, csv (RFC 4180) or wc (one C99 hex argument per line, as
    /// CORE-MATH's worst-case files) [default: json].
    #[arg(long, value_name = "json|csv|wc")]
    pub output: Option<String>,
    /// For json: `array` (the cases alone) or `object` (the campaign's skipped runs too)
    /// [default: array].
    #[arg(long, value_parser = ["array", "object"])]
    pub shape: Option<String>,
    /// The former spelling of --output (--format is the number format elsewhere); still
    /// taken, with a warning.
    #[arg(long, hide = true, value_parser = ["json", "csv", "wc"])]
    pub format: Option<String>,
    /// Only cases with at least this many identical bits after the rounding bit.
    #[arg(long)]
    pub min_bits: Option<u32>,
    /// Only cases of this kind.
    #[arg(long, value_parser = ["fp", "mid"])]
    pub kind: Option<String>,
    /// Order: by argument value, or hardest first.
    #[arg(long, default_value = "argument", value_parser = ["argument", "hardness"])]
    pub sort: String,
    /// At most this many cases.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Write here instead of stdout (removed again if the export fails half-way).
    #[arg(long, short = 'o')]
    pub output_file: Option<PathBuf>,
}

/// What `campaign export` writes, and where, once old spellings are read.
#[derive(Debug, PartialEq)]
pub struct ExportTarget {
    pub output: String,
    pub shape: Option<String>,
    pub file: Option<PathBuf>,
    /// What the command line said in an old spelling, for a warning each.
    pub warnings: Vec<String>,
}

impl ExportArgs {
    /// The file format, the JSON shape and the file. `--format json|csv|wc` and `--output
    /// FILE` were the former spellings: both still work, each with a warning; `--output` with
    /// anything but a file format's name is taken for a file only when -o is absent.
    pub fn target(&self) -> anyhow::Result<ExportTarget> {
        let mut warnings = Vec::new();
        let mut file = self.output_file.clone();
        let mut output = None;
        match self.output.as_deref() {
            Some(f @ ("json" | "csv" | "wc")) => output = Some(f.to_string()),
            Some(other) if file.is_none() => {
                warnings.push(format!(
                    "--output {other}: --output is now the file format (json, csv or wc) and \
                     -o/--output-file the file; writing to {other}"
                ));
                file = Some(PathBuf::from(other));
            }
            Some(other) => bail!("--output is the file format: json, csv or wc, not {other:?}"),
            None => {}
        }
        if let Some(f) = &self.format {
            if output.as_deref().is_some_and(|o| o != f) {
                bail!(
                    "--format {f} and --output {} disagree: give --output alone",
                    output.unwrap_or_default()
                );
            }
            warnings.push(format!(
                "--format {f}: the file format is now --output {f} (--format is the number format \
                 of `campaign create` and `tmd-worker search`)"
            ));
            output = Some(f.clone());
        }
        let output = output.unwrap_or_else(|| "json".into());
        if self.shape.is_some() && output != "json" {
            bail!("--shape is for --output json only");
        }
        Ok(ExportTarget {
            output,
            shape: self.shape.clone(),
            file,
            warnings,
        })
    }
}

/// `campaign watch` options.
#[derive(Debug, Clone, Args)]
pub struct WatchArgs {
    /// Campaign id.
    pub id: i64,
    /// Seconds between two looks at the server.
    #[arg(long, default_value_t = 2.0)]
    pub interval: f64,
}

/// A small admin client for these commands: GET only, JSON or a raw byte stream.
struct Viewer {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// A failure worth retrying (the server is restarting, the network blinked), as opposed to
/// an answer that will not change (wrong token, no such campaign).
#[derive(Debug, thiserror::Error)]
#[error("cannot reach the server: {0}")]
struct Unreachable(String);

impl Viewer {
    fn new(api: &ApiArgs, timeout: Option<Duration>) -> anyhow::Result<Viewer> {
        let token = api.token()?;
        let mut http = api.http()?.connect_timeout(Duration::from_secs(10));
        if let Some(t) = timeout {
            http = http.timeout(t);
        }
        Ok(Viewer {
            base: api.server.trim_end_matches('/').to_string(),
            token,
            http: http.build()?,
        })
    }

    async fn get(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}/api/v1{path}", self.base);
        let resp = self
            .http
            .get(&url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| Unreachable(format!("{url}: {e}")))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        if status.is_server_error() {
            return Err(Unreachable(format!("{status} from {url}")).into());
        }
        match resp.json::<ApiError>().await {
            Ok(e) => bail!("{status}: {}: {}", e.code, e.message),
            Err(_) => bail!("{status} from {url}"),
        }
    }

    async fn json<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Ok(self.get(path).await?.json().await?)
    }
}

/// Runs `campaign export`: streams the server's export to stdout or `--output`.
pub async fn run_export(api: &ApiArgs, a: &ExportArgs) -> anyhow::Result<()> {
    // No overall timeout: a large export may take long; the connection timeout still holds.
    let target = a.target()?;
    for w in &target.warnings {
        eprintln!("tmd: warning: {w}");
    }
    let viewer = Viewer::new(api, None)?;
    let mut query = vec![("format", target.output.clone()), ("sort", a.sort.clone())];
    if let Some(shape) = &target.shape {
        query.push(("shape", shape.clone()));
    }
    if let Some(b) = a.min_bits {
        query.push(("min_bits", b.to_string()));
    }
    if let Some(k) = &a.kind {
        query.push(("kind", k.clone()));
    }
    if let Some(n) = a.limit {
        query.push(("limit", n.to_string()));
    }
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut resp = viewer
        .get(&format!("/campaigns/{}/hr-cases?{}", a.id, query.join("&")))
        .await?;
    if target.output == "csv" {
        // The csv holds cases alone; what they are judged as, and what was skipped, is said
        // here (the json and wc exports carry it themselves).
        for line in described(resp.headers()) {
            eprintln!("{line}");
        }
    }
    let mut out: Box<dyn Write> = match &target.file {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let copied = async {
        while let Some(chunk) = resp.chunk().await.context("the export broke off")? {
            out.write_all(&chunk)?;
        }
        out.flush()?;
        anyhow::Ok(())
    }
    .await;
    if copied.is_err() {
        drop(out);
        if let Some(path) = &target.file {
            // A partial export looks like a complete one with fewer cases: do not leave it.
            let _ = std::fs::remove_file(path);
        }
    }
    copied
}

/// The export's headers for people: the format the cases are judged on and the skipped
/// arguments, each line prefixed `tmd:`.
fn described(h: &reqwest::header::HeaderMap) -> Vec<String> {
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("?");
    use crate::views::export as x;
    vec![
        format!(
            "tmd: {} in {} (at least {} bits)",
            get(x::HEADER_FUNCTION),
            get(x::HEADER_JUDGED_AS),
            get(x::HEADER_MIN_BITS)
        ),
        format!(
            "tmd: {} arguments skipped in {} runs (listed by --output json --shape object, by \
             --output wc, and in the progress)",
            get(x::HEADER_SKIPPED_ARGUMENTS),
            get(x::HEADER_SKIPPED_RUNS)
        ),
    ]
}

/// Runs `campaign watch`: redraws progress every `--interval` seconds until the campaign is
/// complete or cancelled.
pub async fn run_watch(api: &ApiArgs, a: &WatchArgs) -> anyhow::Result<()> {
    if !(a.interval.is_finite() && a.interval >= 0.05) {
        bail!("--interval must be at least 0.05 seconds");
    }
    let viewer = Viewer::new(api, Some(Duration::from_secs(30)))?;
    let campaign: tmd_wire::Campaign = viewer.json(&format!("/campaigns/{}", a.id)).await?;
    let mut view = if std::io::stdout().is_terminal() {
        View::bars(&campaign)
    } else {
        View::Lines { last: None }
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(a.interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let p: CampaignProgress = match viewer.json(&format!("/campaigns/{}/progress", a.id)).await
        {
            Ok(p) => p,
            Err(e) if e.downcast_ref::<Unreachable>().is_some() => {
                view.note(&format!("{e:#}; retrying"));
                continue;
            }
            Err(e) => return Err(e),
        };
        view.show(&p)?;
        if p.complete || p.state == CampaignState::Cancelled {
            view.finish(&p)?;
            return Ok(());
        }
    }
}

/// How progress is shown: bars on a terminal, one line per change otherwise (logs, pipes).
enum View {
    Bars {
        done: ProgressBar,
        status: ProgressBar,
    },
    Lines {
        last: Option<String>,
    },
}

impl View {
    fn bars(c: &tmd_wire::Campaign) -> View {
        let multi = indicatif::MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let done = multi.add(ProgressBar::new(c.units_total.max(0) as u64));
        done.set_style(
            ProgressStyle::with_template(
                "{prefix:.bold} [{bar:40.green/blue}] {pos}/{len} units done {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        done.set_prefix(format!("campaign {} ({} {})", c.id, c.function, c.name));
        let status = multi.add(ProgressBar::new_spinner());
        status.set_style(ProgressStyle::with_template("  {msg}").expect("a valid template"));
        View::Bars { done, status }
    }

    fn show(&mut self, p: &CampaignProgress) -> std::io::Result<()> {
        match self {
            View::Bars { done, status } => {
                done.set_length(p.total.units.max(0) as u64);
                done.set_position(p.done.units.max(0) as u64);
                done.set_message(format!("({:.2}% of {})", p.percent_done, work_name(p)));
                status.set_message(status_text(p));
            }
            View::Lines { last } => {
                let line = summary(p);
                if last.as_deref() != Some(line.as_str()) {
                    outln!("{} {line}", chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ"))?;
                    *last = Some(line);
                }
            }
        }
        Ok(())
    }

    fn note(&mut self, text: &str) {
        match self {
            View::Bars { status, .. } => status.set_message(text.to_string()),
            View::Lines { .. } => eprintln!("{text}"),
        }
    }

    fn finish(&mut self, p: &CampaignProgress) -> std::io::Result<()> {
        let end = if p.complete { "complete" } else { "cancelled" };
        match self {
            View::Bars { done, status } => {
                done.finish();
                status.finish_with_message(format!("{}; campaign {end}", status_text(p)));
            }
            View::Lines { .. } => outln!("campaign {} {end}: {}", p.campaign_id, summary(p))?,
        }
        Ok(())
    }
}

/// Why units wait, as one clause (empty when none do).
fn waiting_text(p: &CampaignProgress) -> String {
    p.waiting
        .iter()
        .map(|w| format!("; {}", w.message))
        .collect()
}

/// The second line of the bars.
fn status_text(p: &CampaignProgress) -> String {
    format!(
        "leased {} · pending {} · quarantined {} · {} · ETA {} · {} · {}{}",
        p.leased.units,
        p.pending.units,
        p.quarantined.units,
        rate(p.arguments_per_second_last_hour),
        p.eta_seconds.map_or("unknown".into(), duration),
        cases_text(p),
        p.state.as_str(),
        waiting_text(p),
    )
}

/// The HR-cases so far, and how many of them were derived where the campaign derives.
fn cases_text(p: &CampaignProgress) -> String {
    let cases = match p.hr_cases_derived {
        0 => format!("{} HR-cases", p.hr_cases),
        d => format!("{} HR-cases ({d} derived)", p.hr_cases),
    };
    match (p.derivations_pending, p.derivations_failed) {
        (0, _) => cases,
        (n, 0) => format!("{cases}, {n} results to derive"),
        (n, f) => format!("{cases}, {n} results to derive ({f} failed: see the server's log)"),
    }
}

/// What the percentage counts: expected work (a cost estimate was posted) or arguments.
fn work_name(p: &CampaignProgress) -> &'static str {
    if p.work.basis == "estimate" {
        "expected work"
    } else if p.work.basis == "plan" {
        "planned work"
    } else {
        "arguments"
    }
}

/// One plain line: everything the bars show.
pub fn summary(p: &CampaignProgress) -> String {
    let of = if p.work.basis == "estimate" {
        " of expected work"
    } else if p.work.basis == "plan" {
        " of planned work"
    } else {
        ""
    };
    format!(
        "{}/{} units done ({:.2}%{of}), {} leased, {} pending, {} quarantined, {}, ETA {}, {}, {}{}",
        p.done.units,
        p.total.units,
        p.percent_done,
        p.leased.units,
        p.pending.units,
        p.quarantined.units,
        rate(p.arguments_per_second_last_hour),
        p.eta_seconds.map_or("unknown".into(), duration),
        cases_text(p),
        p.state.as_str(),
        waiting_text(p),
    )
}

/// Arguments per second with an SI prefix: `3.2 M arguments/s`.
fn rate(per_second: f64) -> String {
    let prefixes = ["", "k", "M", "G", "T", "P", "E"];
    let mut v = per_second.max(0.0);
    let mut i = 0;
    while v >= 1000.0 && i + 1 < prefixes.len() {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.1} {}arguments/s", prefixes[i])
}

/// A duration for people: `2d 3h`, `4h 05m`, `3m 20s`, `12s`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "unknown".into();
    }
    let s = seconds.max(0.0).round() as u64;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m:02}m")
    } else if m > 0 {
        format!("{m}m {sec:02}s")
    } else {
        format!("{sec}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export(words: &[&str]) -> ExportArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: ExportArgs,
        }
        let mut argv = vec!["export", "7"];
        argv.extend(words);
        Cli::try_parse_from(argv).unwrap().a
    }

    #[test]
    fn export_speaks_one_vocabulary_and_reads_the_old_one_with_a_warning() {
        let t = export(&["--output", "csv", "-o", "cases.csv"])
            .target()
            .unwrap();
        assert_eq!(
            (t.output.as_str(), t.file),
            ("csv", Some("cases.csv".into()))
        );
        assert!(t.warnings.is_empty());
        let t = export(&[]).target().unwrap();
        assert_eq!((t.output.as_str(), t.file, t.shape), ("json", None, None));
        let t = export(&["--shape", "object"]).target().unwrap();
        assert_eq!(t.shape.as_deref(), Some("object"));
        assert!(export(&["--output", "wc", "--shape", "object"])
            .target()
            .is_err());
        // The former spellings: --format as the file format, --output as the file.
        let t = export(&["--format", "csv", "--output", "old.csv"])
            .target()
            .unwrap();
        assert_eq!((t.output.as_str(), t.file), ("csv", Some("old.csv".into())));
        assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
        assert!(t.warnings.iter().any(|w| w.contains("--output csv")));
        assert!(t.warnings.iter().any(|w| w.contains("-o/--output-file")));
        assert!(export(&["--format", "csv", "--output", "json"])
            .target()
            .is_err());
    }

    #[test]
    fn rates_and_durations_read_well() {
        assert_eq!(rate(0.0), "0.0 arguments/s");
        assert_eq!(rate(1234.0), "1.2 karguments/s");
        assert_eq!(rate(3.2e9), "3.2 Garguments/s");
        assert_eq!(duration(12.4), "12s");
        assert_eq!(duration(200.0), "3m 20s");
        assert_eq!(duration(4.0 * 3600.0 + 300.0), "4h 05m");
        assert_eq!(duration(2.0 * 86_400.0 + 3.0 * 3600.0), "2d 3h");
        assert_eq!(duration(f64::INFINITY), "unknown");
    }
}
