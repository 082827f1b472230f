//! The claim phases a bench reports: `tmd_lease_claim_phase_seconds` read from the
//! coordinators' `/metrics` before and after a window, summed over coordinators, so a bench
//! says where its claims' time went (a lock, a connection, the statement, the commit).

use anyhow::bail;
use std::collections::BTreeMap;

const METRIC: &str = "tmd_lease_claim_phase_seconds";

/// One phase's histogram: cumulative counts per upper bound, the sum and the count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseHistogram {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

/// Every phase's histogram, by phase name.
pub type Phases = BTreeMap<String, PhaseHistogram>;

/// The claim phases in a `/metrics` text.
pub fn parse(text: &str) -> Phases {
    let mut phases = Phases::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(METRIC) else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let Some(phase) = label(labels, "phase") else {
            continue;
        };
        let h = phases.entry(phase.to_string()).or_default();
        match kind {
            "_sum" => h.sum = value.parse().unwrap_or(f64::NAN),
            "_count" => h.count = value.parse().unwrap_or(0),
            "_bucket" => {
                let bound = match label(labels, "le") {
                    Some("+Inf") | None => continue,
                    Some(b) => b.parse().unwrap_or(f64::INFINITY),
                };
                h.buckets.push((bound, value.parse().unwrap_or(0)));
            }
            _ => {}
        }
    }
    phases
}

fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k == name).then(|| v.trim_matches('"'))
    })
}

/// `later` less `earlier`, phase by phase; several coordinators' scrapes are summed with
/// [`add`].
pub fn since(later: &Phases, earlier: &Phases) -> Phases {
    let mut out = Phases::new();
    for (phase, h) in later {
        let before = earlier.get(phase).cloned().unwrap_or_default();
        let buckets = h
            .buckets
            .iter()
            .map(|(bound, n)| {
                let was = before
                    .buckets
                    .iter()
                    .find(|(b, _)| b == bound)
                    .map_or(0, |(_, m)| *m);
                (*bound, n.saturating_sub(was))
            })
            .collect();
        out.insert(
            phase.clone(),
            PhaseHistogram {
                buckets,
                sum: h.sum - before.sum,
                count: h.count.saturating_sub(before.count),
            },
        );
    }
    out
}

/// Adds `other`'s phases into `into`.
pub fn add(into: &mut Phases, other: &Phases) {
    for (phase, h) in other {
        let mine = into.entry(phase.clone()).or_default();
        for (bound, n) in &h.buckets {
            match mine.buckets.iter_mut().find(|(b, _)| b == bound) {
                Some((_, m)) => *m += n,
                None => mine.buckets.push((*bound, *n)),
            }
        }
        mine.sum += h.sum;
        mine.count += h.count;
    }
}

/// The smallest bucket bound that holds a share `p` of the observations (infinite when
/// only the overflow bucket does).
fn quantile_bound(h: &PhaseHistogram, p: f64) -> f64 {
    let need = (p * h.count as f64).ceil() as u64;
    h.buckets
        .iter()
        .find(|(_, n)| *n >= need.max(1))
        .map_or(f64::INFINITY, |(b, _)| *b)
}

/// One line per phase: claims that went through it, mean, and the bucket bounds below which
/// half and 99% of them fell.
pub fn report(phases: &Phases) -> Vec<String> {
    phases
        .iter()
        .filter(|(_, h)| h.count > 0)
        .map(|(phase, h)| {
            format!(
                "claim phase {phase:<10} n={:<6} mean_ms={:>7.2} p50_ms<={:<6} p99_ms<={:<6} total_s={:.2}",
                h.count,
                h.sum / h.count as f64 * 1e3,
                quantile_bound(h, 0.5) * 1e3,
                quantile_bound(h, 0.99) * 1e3,
                h.sum,
            )
        })
        .collect()
}

/// The claim phases of the coordinators at `bases`, summed.
pub async fn scrape(
    http: &reqwest::Client,
    bases: &[String],
    token: &str,
) -> anyhow::Result<Phases> {
    let mut all = Phases::new();
    for base in bases {
        let resp = http
            .get(format!("{base}/metrics"))
            .bearer_auth(token)
            .send()
            .await?;
        if !resp.status().is_success() {
            bail!("{base}/metrics: {}", resp.status());
        }
        add(&mut all, &parse(&resp.text().await?));
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
tmd_lease_claim_phase_seconds_bucket{phase=\"statement\",le=\"0.001\"} 1
tmd_lease_claim_phase_seconds_bucket{phase=\"statement\",le=\"0.01\"} 3
tmd_lease_claim_phase_seconds_bucket{phase=\"statement\",le=\"+Inf\"} 4
tmd_lease_claim_phase_seconds_sum{phase=\"statement\"} 2.5
tmd_lease_claim_phase_seconds_count{phase=\"statement\"} 4
tmd_http_request_duration_seconds_count{method=\"POST\",route=\"/x\",status=\"200\"} 9
";

    #[test]
    fn phases_are_read_diffed_and_summed() {
        let later = parse(TEXT);
        let h = &later["statement"];
        assert_eq!(h.buckets, vec![(0.001, 1), (0.01, 3)]);
        assert_eq!((h.sum, h.count), (2.5, 4));
        assert_eq!(later.len(), 1);
        let earlier = parse(&TEXT.replace("} 3", "} 2").replace("} 4", "} 2"));
        let d = since(&later, &earlier);
        assert_eq!(d["statement"].buckets, vec![(0.001, 0), (0.01, 1)]);
        assert_eq!(d["statement"].count, 2);
        let mut both = Phases::new();
        add(&mut both, &later);
        add(&mut both, &later);
        assert_eq!(both["statement"].count, 8);
        // Half of four fall at or below 10 ms; the fourth only in +Inf.
        assert_eq!(quantile_bound(&later["statement"], 0.5), 0.01);
        assert_eq!(quantile_bound(&later["statement"], 0.99), f64::INFINITY);
        assert!(report(&later)[0].contains("n=4"));
    }
}
