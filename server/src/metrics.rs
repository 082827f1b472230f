//! Prometheus metrics, hand-written: counters of the lease protocol, a latency histogram per
//! route, and unit counts per state, per campaign and per worker read from the database at
//! scrape time (a bounded number of each: label values never grow without bound).

use crate::store::tallies::{CampaignSeries, WorkerSeries};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Upper bounds of the claim phases' buckets, in seconds: most phases take well under a
/// millisecond when the coordinator is idle, so the low end is finer than a request's.
const PHASE_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Counts of observations per bucket (not cumulative: rendering adds them up).
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            count: 0,
            sum: 0.0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        self.count += 1;
        self.sum += seconds;
        if let Some(i) = self.bounds.iter().position(|b| seconds <= *b) {
            self.counts[i] += 1;
        }
    }

    /// The series of metric `name` with `labels` (without braces), buckets cumulative.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut below = 0;
        for (bound, n) in self.bounds.iter().zip(&self.counts) {
            below += n;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {below}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// The server's counters. Cheap to update from any task.
#[derive(Default)]
pub struct Metrics {
    pub leases_granted: AtomicU64,
    pub lease_requests_without_work: AtomicU64,
    pub units_leased: AtomicU64,
    pub heartbeats: AtomicU64,
    pub results_accepted: AtomicU64,
    pub results_replayed: AtomicU64,
    pub hr_cases_verified: AtomicU64,
    pub forged_cases: AtomicU64,
    pub units_expired: AtomicU64,
    pub units_quarantined: AtomicU64,
    pub leases_released: AtomicU64,
    pub results_outvoted: AtomicU64,
    pub workers_quarantined: AtomicU64,
    pub units_reopened: AtomicU64,
    pub campaigns_completed: AtomicU64,
    /// Results being verified with MPFR now, and the most at once since the start.
    pub verifications_in_flight: AtomicU64,
    pub verifications_in_flight_max: AtomicU64,
    http: Mutex<BTreeMap<(String, String, u16), Histogram>>,
    /// Lease claims' time per phase ([`crate::store::Laps`]), by phase name.
    claim_phases: Mutex<BTreeMap<&'static str, Histogram>>,
    /// The unit counts of the last scrape and when they were read: anyone may scrape, so the
    /// units table is scanned at most once per [`UNIT_COUNTS_SECONDS`].
    pub unit_counts: tokio::sync::Mutex<Option<(std::time::Instant, Scrape)>>,
}

/// What a scrape reads from the database.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// Units per state, all campaigns.
    pub units_by_state: Vec<(String, i64)>,
    /// At most [`MAX_CAMPAIGN_SERIES`] campaigns.
    pub campaigns: Vec<CampaignSeries>,
    /// At most [`MAX_WORKER_SERIES`] workers.
    pub workers: Vec<WorkerSeries>,
}

/// Campaigns with series of their own: a farm runs a few at once; past this many the rest
/// (lowest priority, oldest, finished) are left out rather than the series count growing
/// with every campaign ever made.
pub const MAX_CAMPAIGN_SERIES: i64 = 100;

/// Workers with series of their own, those seen in the last hour, most recent first: a
/// thousand GPUs fit; an unbounded fleet of volunteers does not become unbounded series.
pub const MAX_WORKER_SERIES: i64 = 2000;

/// A verification in flight; dropping it ends it.
pub struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How long the unit counts of `/metrics` are served from memory.
pub const UNIT_COUNTS_SECONDS: u64 = 15;

/// The method as a label: the standard ones, and `other` for anything a client makes up (an
/// unbounded label would grow the histogram map for ever).
pub fn method_label(m: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

impl Metrics {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a verification in flight until the guard is dropped.
    pub fn verification_started(&self) -> InFlight<'_> {
        let now = self.verifications_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.verifications_in_flight_max
            .fetch_max(now, Ordering::SeqCst);
        InFlight(&self.verifications_in_flight)
    }

    /// Records one HTTP request.
    pub fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut map = self.http.lock().unwrap_or_else(|e| e.into_inner());
        map.entry((method.to_string(), route.to_string(), status))
            .or_insert_with(|| Histogram::new(&BUCKETS))
            .observe(seconds);
    }

    /// Records one lease claim's time per phase.
    pub fn observe_claim(&self, phases: &[(&'static str, f64)]) {
        let mut map = self.claim_phases.lock().unwrap_or_else(|e| e.into_inner());
        for (phase, seconds) in phases {
            map.entry(phase)
                .or_insert_with(|| Histogram::new(&PHASE_BUCKETS))
                .observe(*seconds);
        }
    }

    /// The Prometheus text exposition, with what the scrape read from the database.
    pub fn render(&self, scrape: &Scrape) -> String {
        let mut out = String::new();
        let counters: [(&str, &str, &AtomicU64); 15] = [
            (
                "tmd_leases_granted_total",
                "Leases handed out.",
                &self.leases_granted,
            ),
            (
                "tmd_lease_requests_without_work_total",
                "Lease requests answered with no work.",
                &self.lease_requests_without_work,
            ),
            (
                "tmd_units_leased_total",
                "Units handed out in leases.",
                &self.units_leased,
            ),
            (
                "tmd_heartbeats_total",
                "Lease heartbeats accepted.",
                &self.heartbeats,
            ),
            (
                "tmd_results_accepted_total",
                "Unit results recorded.",
                &self.results_accepted,
            ),
            (
                "tmd_results_replayed_total",
                "Retried result posts answered from the record.",
                &self.results_replayed,
            ),
            (
                "tmd_hr_cases_verified_total",
                "HR-cases re-verified with MPFR and recorded.",
                &self.hr_cases_verified,
            ),
            (
                "tmd_forged_cases_total",
                "Reported HR-cases that failed re-verification.",
                &self.forged_cases,
            ),
            (
                "tmd_results_outvoted_total",
                "Results the majority of a unit's replicas disagreed with.",
                &self.results_outvoted,
            ),
            (
                "tmd_workers_quarantined_total",
                "Workers quarantined (forged case, outvoted or expired too often, or by an admin).",
                &self.workers_quarantined,
            ),
            (
                "tmd_units_reopened_total",
                "Done units reopened because a quarantined worker was part of their quorum.",
                &self.units_reopened,
            ),
            (
                "tmd_campaigns_completed_total",
                "Campaigns whose last unit this server recorded.",
                &self.campaigns_completed,
            ),
            (
                "tmd_units_expired_total",
                "Units returned to the pool by lease expiry.",
                &self.units_expired,
            ),
            (
                "tmd_units_quarantined_total",
                "Units quarantined after too many failures or expiries.",
                &self.units_quarantined,
            ),
            (
                "tmd_leases_released_total",
                "Leases released by workers.",
                &self.leases_released,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP tmd_verifications_in_flight_max Most results verified with MPFR at once.\n\
             # TYPE tmd_verifications_in_flight_max gauge\n\
             tmd_verifications_in_flight_max {}",
            self.verifications_in_flight_max.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP tmd_units Units per state, all campaigns (cancelled: a cancelled campaign's \
             units not done).\n# TYPE tmd_units gauge"
        );
        for (state, n) in &scrape.units_by_state {
            let _ = writeln!(out, "tmd_units{{state=\"{state}\"}} {n}");
        }
        render_campaigns(&mut out, &scrape.campaigns);
        render_workers(&mut out, &scrape.workers);
        let _ = writeln!(
            out,
            "# HELP tmd_http_request_duration_seconds HTTP requests by method, route and status.\n\
             # TYPE tmd_http_request_duration_seconds histogram"
        );
        let map = self.http.lock().unwrap_or_else(|e| e.into_inner());
        for ((method, route, status), h) in map.iter() {
            let labels = format!("method=\"{method}\",route=\"{route}\",status=\"{status}\"");
            h.render(&mut out, "tmd_http_request_duration_seconds", &labels);
        }
        drop(map);
        let _ = writeln!(
            out,
            "# HELP tmd_lease_claim_phase_seconds Lease requests' time by phase: checks, expiry \
             (the lazy expiry pass, when due), standing (the worker's), campaigns (those with \
             work), owner_room (a volunteer's share), turn (waiting for a claim slot of this \
             process), connection (a pooled connection and BEGIN), lock (the lane's or the \
             campaign's turn), statement (the claim), commit, answer (what a worker told no \
             work is told).\n# TYPE tmd_lease_claim_phase_seconds histogram"
        );
        let map = self.claim_phases.lock().unwrap_or_else(|e| e.into_inner());
        for (phase, h) in map.iter() {
            h.render(
                &mut out,
                "tmd_lease_claim_phase_seconds",
                &format!("phase=\"{phase}\""),
            );
        }
        out
    }
}

/// A metric of one campaign or worker: name, help, type and its value.
type Series<T> = (&'static str, &'static str, &'static str, fn(&T) -> f64);

/// Per-campaign series, labelled by campaign id (and state).
fn render_campaigns(out: &mut String, campaigns: &[CampaignSeries]) {
    let _ = writeln!(
        out,
        "# HELP tmd_campaign_units A campaign's units per state.\n# TYPE tmd_campaign_units gauge"
    );
    for c in campaigns {
        for (state, n) in [
            ("pending", c.units_pending),
            ("leased", c.units_leased),
            ("done", c.units_done),
            ("quarantined", c.units_quarantined),
        ] {
            let _ = writeln!(
                out,
                "tmd_campaign_units{{campaign=\"{}\",state=\"{state}\"}} {n}",
                c.id
            );
        }
    }
    let gauges: [Series<CampaignSeries>; 4] = [
        (
            "tmd_campaign_arguments_done_total",
            "Arguments of a campaign's done units (rate() gives its speed).",
            "counter",
            |c| c.arguments_done,
        ),
        (
            "tmd_campaign_arguments",
            "Arguments of a campaign in all.",
            "gauge",
            |c| c.arguments_total,
        ),
        (
            "tmd_campaign_hr_cases",
            "HR-cases a campaign has recorded.",
            "gauge",
            |c| c.hr_cases as f64,
        ),
        (
            "tmd_campaign_active",
            "1 while a campaign's units are handed out, 0 while it is paused.",
            "gauge",
            |c| f64::from(u8::from(c.state == "active")),
        ),
    ];
    for (name, help, kind, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for c in campaigns {
            let _ = writeln!(out, "{name}{{campaign=\"{}\"}} {}", c.id, value(c));
        }
    }
}

/// Per-worker series, labelled by worker id.
fn render_workers(out: &mut String, workers: &[WorkerSeries]) {
    let series: [Series<WorkerSeries>; 3] = [
        (
            "tmd_worker_units_done_total",
            "Units a worker finished (rate() gives its speed).",
            "counter",
            |w| w.units_done as f64,
        ),
        (
            "tmd_worker_last_seen_timestamp_seconds",
            "When a worker last called the coordinator (time() minus it: its silence).",
            "gauge",
            |w| w.last_seen_seconds,
        ),
        (
            "tmd_worker_quarantined",
            "1 while a worker is quarantined.",
            "gauge",
            |w| f64::from(u8::from(w.quarantined)),
        ),
    ];
    for (name, help, kind, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for w in workers {
            let _ = writeln!(out, "{name}{{worker=\"{}\"}} {}", w.id, value(w));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.observe("POST", "/api/v1/leases", 200, 0.003);
        m.observe("POST", "/api/v1/leases", 200, 0.2);
        Metrics::add(&m.leases_granted, 2);
        let text = m.render(&Scrape {
            units_by_state: vec![("pending".into(), 7)],
            ..Scrape::default()
        });
        assert!(text.contains("tmd_leases_granted_total 2"));
        assert!(text.contains("tmd_units{state=\"pending\"} 7"));
        assert!(text.contains("route=\"/api/v1/leases\",status=\"200\",le=\"0.005\"} 1"));
        assert!(text.contains("route=\"/api/v1/leases\",status=\"200\",le=\"0.25\"} 2"));
        assert!(text.contains("tmd_http_request_duration_seconds_count{method=\"POST\",route=\"/api/v1/leases\",status=\"200\"} 2"));
    }

    #[test]
    fn claim_phases_are_histograms_of_their_own() {
        let m = Metrics::default();
        m.observe_claim(&[("statement", 0.0003), ("commit", 0.002)]);
        m.observe_claim(&[("statement", 0.03)]);
        let text = m.render(&Scrape::default());
        assert!(text
            .contains("tmd_lease_claim_phase_seconds_bucket{phase=\"statement\",le=\"0.0005\"} 1"));
        assert!(text
            .contains("tmd_lease_claim_phase_seconds_bucket{phase=\"statement\",le=\"0.05\"} 2"));
        assert!(text.contains("tmd_lease_claim_phase_seconds_count{phase=\"commit\"} 1"));
        assert!(
            text.contains("tmd_lease_claim_phase_seconds_bucket{phase=\"commit\",le=\"+Inf\"} 1")
        );
    }

    #[test]
    fn made_up_methods_share_one_label() {
        let m = axum::http::Method::from_bytes(b"FOOBAR").unwrap();
        assert_eq!(method_label(&m), "other");
        assert_eq!(method_label(&axum::http::Method::POST), "POST");
    }
}
