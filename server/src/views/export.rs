//! Export of a campaign's HR-cases (`GET /api/v1/campaigns/{id}/hr-cases`) as JSON, CSV or a
//! CORE-MATH style worst-case file (`wc`), streamed from PostgreSQL row by row.
//!
//! The rows are read by a task that owns a pool handle and feeds a small bounded channel; the
//! response body drains the channel. The database is read only as fast as the client
//! reads, and at most a few chunks of the export are in memory at any time.

use crate::error::{Error, Result};
use crate::request::auth::Admin;
use crate::request::{ApiPath, ApiQuery};
use crate::store;
use crate::store::export::{self as store_export, HrFilter, HrOrder};
use crate::AppState;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use sqlx::PgPool;
use tmd_wire::{
    ApiError, Campaign, CampaignState, ExportedHrCase, HrCasesDocument, HrKind, SkippedRun,
};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The routes of this module, with their OpenAPI operations (nested under `/api/v1`).
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(hr_cases))
}

/// The query of an export. Every field is optional; an empty value (`min_bits=`) counts as
/// absent, so a form or script that leaves a filter blank gets everything.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// Only cases with at least this many identical bits after the rounding bit.
    #[param(value_type = Option<u32>)]
    pub min_bits: Option<String>,
    /// Only cases of this kind: `fp` (near a floating-point number) or `mid` (near a midpoint).
    #[param(value_type = Option<String>, pattern = "^(fp|mid)$")]
    pub kind: Option<String>,
    /// `json` (default), `csv` or `wc` (one C99 hex argument per line, `#` comments).
    #[param(value_type = Option<String>, pattern = "^(json|csv|wc)$")]
    pub format: Option<String>,
    /// `argument` (default: by value, negative first) or `hardness` (most identical bits
    /// first, then smallest distance).
    #[param(value_type = Option<String>, pattern = "^(argument|hardness)$")]
    pub sort: Option<String>,
    /// At most this many cases (all when absent).
    #[param(value_type = Option<i64>, minimum = 1)]
    pub limit: Option<String>,
    /// For `json`: `array` (default: the array of HR-cases) or `object` (an
    /// `HrCasesDocument`, version 1: the campaign's skipped runs and the cases).
    #[param(value_type = Option<String>, pattern = "^(array|object)$")]
    pub shape: Option<String>,
}

/// The `json` export's two shapes (OpenAPI: one of them, as `shape` asks).
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code)] // a schema only: the body is streamed, never built as this type
#[serde(untagged)]
pub enum JsonExport {
    /// `shape=array` (the default).
    Array(Vec<ExportedHrCase>),
    /// `shape=object`.
    Object(HrCasesDocument),
}

/// The output formats of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The array of HR-cases.
    Json,
    /// An [`HrCasesDocument`]: the skipped runs and the HR-cases.
    JsonObject,
    Csv,
    Wc,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "json" => Some(Format::Json),
            "csv" => Some(Format::Csv),
            "wc" => Some(Format::Wc),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::JsonObject => "json-object",
            Format::Csv => "csv",
            Format::Wc => "wc",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Json | Format::JsonObject => "application/json",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Wc => "text/plain; charset=utf-8",
        }
    }
}

/// A checked export request.
#[derive(Debug, Clone)]
pub struct ExportSpec {
    pub filter: HrFilter,
    pub format: Format,
}

fn present(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl ExportQuery {
    /// Checks the query; each refusal names the field and what it accepts.
    pub fn spec(&self, campaign_id: i64) -> Result<ExportSpec> {
        let bad = |m: &str| Error::BadRequest(m.to_string());
        let min_bits = match present(&self.min_bits) {
            None => 0,
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|b| *b <= 256)
                .ok_or_else(|| bad("min_bits must be an integer in 0..=256"))?,
        };
        let kind = match present(&self.kind) {
            None => None,
            Some(s) => Some(HrKind::parse(s).ok_or_else(|| bad("kind must be fp or mid"))?),
        };
        let format = match present(&self.format) {
            None => Format::Json,
            Some(s) => Format::parse(s).ok_or_else(|| bad("format must be json, csv or wc"))?,
        };
        let format = match (present(&self.shape), format) {
            (None | Some("array"), f) => f,
            (Some("object"), Format::Json) => Format::JsonObject,
            (Some("object"), _) => return Err(bad("shape=object is for format json only")),
            (Some(_), _) => return Err(bad("shape must be array or object")),
        };
        let order = match present(&self.sort) {
            None | Some("argument") => HrOrder::Argument,
            Some("hardness") => HrOrder::Hardness,
            Some(_) => return Err(bad("sort must be argument or hardness")),
        };
        let limit = match present(&self.limit) {
            None => None,
            Some(s) => Some(
                s.parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("limit must be a positive integer"))?,
            ),
        };
        Ok(ExportSpec {
            filter: HrFilter {
                campaign_id,
                min_bits,
                kind,
                order,
                limit,
            },
            format,
        })
    }
}

/// Lists a campaign's verified HR-cases, streamed: `json` (an array of objects; with
/// `shape=object` an `HrCasesDocument`, version 1, holding the skipped runs too), `csv` (RFC
/// 4180: the header `x,bits,neg_log2_d,kind,rounded`, then one row per case, CRLF line ends,
/// nothing else) or `wc` (a `#` comment header with the format and the skipped runs, then one
/// C99 hex argument per line, as CORE-MATH's worst-case files). All formats list the same
/// cases in the same order. Every answer says in its headers what the campaign is judged as
/// (`X-Tmd-Function`, `X-Tmd-Judged-As`, `X-Tmd-Min-Bits`) and how much was skipped
/// (`X-Tmd-Skipped-Runs`, `X-Tmd-Skipped-Arguments`); the runs themselves are in the json
/// object, the wc header and the campaign's progress.
#[utoipa::path(get, path = "/campaigns/{id}/hr-cases", tag = "campaigns",
    security(("admin" = [])),
    params(("id" = i64, Path, description = "campaign id"), ExportQuery),
    responses(
        (status = 200, description = "the HR-cases, in the format asked for", content(
            (JsonExport = "application/json"),
            (String = "text/csv"),
            (String = "text/plain")),
            headers(
                ("x-tmd-function" = String, description = "the campaign's function"),
                ("x-tmd-judged-as" = String, description = "the format and how results are judged on it"),
                ("x-tmd-min-bits" = u32, description = "the campaign's search threshold"),
                ("x-tmd-skipped-runs" = u64, description = "runs of arguments of done units that were skipped (overflow, pole, trivial, exact, ...)"),
                ("x-tmd-skipped-arguments" = u64, description = "arguments in those runs"))),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, body = ApiError)))]
async fn hr_cases(
    State(s): State<AppState>,
    _: Admin,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(q): ApiQuery<ExportQuery>,
) -> Result<Response> {
    let spec = q.spec(id)?;
    let campaign = store::get_campaign(&s.pool, id).await?;
    // The skipped runs are few (a run covers many arguments): read before the cases, and
    // before the status line, so a failure here is a JSON error like any other.
    let skipped = store_export::skipped_runs(&s.pool, campaign.id, None).await?;
    Ok(stream(s.pool.clone(), campaign, skipped, spec))
}

/// Bytes gathered before a chunk goes to the client: large enough to amortise the channel
/// and the HTTP framing, small enough that memory stays flat.
const CHUNK_BYTES: usize = 64 * 1024;

/// The streamed response of an export.
fn stream(
    pool: PgPool,
    campaign: Campaign,
    skipped: Vec<SkippedRun>,
    spec: ExportSpec,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let format = spec.format;
    let headers = described_in_headers(&campaign, &skipped);
    tokio::spawn(async move {
        let mut rows = store_export::hr_cases(&pool, &spec.filter);
        let mut buf = Vec::with_capacity(CHUNK_BYTES + 1024);
        write_prefix(&mut buf, &campaign, &spec);
        write_skipped(&mut buf, spec.format, &skipped);
        let mut first = true;
        while let Some(row) = rows.next().await {
            match row {
                Ok(case) => {
                    write_row(&mut buf, format, &case, first);
                    first = false;
                }
                Err(e) => {
                    // The status line is gone already: end the body with an error, so the
                    // client sees a broken transfer instead of a short but valid export.
                    tracing::error!(campaign.id = campaign.id, error = %e, "export failed");
                    let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                    return;
                }
            }
            if buf.len() >= CHUNK_BYTES
                && tx
                    .send(Ok(Bytes::from(std::mem::take(&mut buf))))
                    .await
                    .is_err()
            {
                return; // The client went away; dropping `rows` ends the query.
            }
        }
        write_suffix(&mut buf, format, first);
        let _ = tx.send(Ok(Bytes::from(buf))).await;
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = (
        [(header::CONTENT_TYPE, format.content_type())],
        Body::from_stream(body),
    )
        .into_response();
    response.headers_mut().extend(headers);
    response
}

/// What every export is judged as, in HTTP headers too: the csv rows hold cases alone (RFC
/// 4180, so every csv reader takes them), and a client of any format learns the format and
/// how much was skipped without parsing the body. The runs themselves are in the json
/// object export (`shape=object`) and the campaign's progress.
fn described_in_headers(c: &Campaign, skipped: &[SkippedRun]) -> HeaderMap {
    let mut h = HeaderMap::new();
    // A header value is visible ASCII: anything else (a name's accents) becomes '?'.
    let ascii = |s: &str| -> HeaderValue {
        let text: String = s
            .chars()
            .map(|ch| {
                if ch == ' ' || ch.is_ascii_graphic() {
                    ch
                } else {
                    '?'
                }
            })
            .collect();
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("?"))
    };
    h.insert(HEADER_FUNCTION, ascii(&c.function));
    h.insert(HEADER_JUDGED_AS, ascii(&c.judged_as));
    h.insert(HEADER_MIN_BITS, HeaderValue::from(c.min_bits));
    h.insert(HEADER_SKIPPED_RUNS, HeaderValue::from(skipped.len() as u64));
    let arguments: u64 = skipped.iter().map(|r| r.count).sum();
    h.insert(HEADER_SKIPPED_ARGUMENTS, HeaderValue::from(arguments));
    h
}

/// The function of an export's campaign.
pub const HEADER_FUNCTION: &str = "x-tmd-function";
/// The campaign's format and how it is judged (`Campaign::judged_as`).
pub const HEADER_JUDGED_AS: &str = "x-tmd-judged-as";
/// The campaign's search threshold (identical bits after the rounding bit).
pub const HEADER_MIN_BITS: &str = "x-tmd-min-bits";
/// How many runs of arguments of the campaign's done units were skipped (overflow, pole,
/// trivial, exact, ...), and how many arguments they hold.
pub const HEADER_SKIPPED_RUNS: &str = "x-tmd-skipped-runs";
pub const HEADER_SKIPPED_ARGUMENTS: &str = "x-tmd-skipped-arguments";

/// The name of a campaign's format as people write it: the named format, or the precision
/// with its unbounded exponent.
pub fn format_name(c: &Campaign) -> String {
    match &c.format {
        Some(f) => f.clone(),
        None => format!("{}-bit significand, exponent unbounded", c.precision),
    }
}

/// The skipped runs of a csv or wc export as `#` comment lines after the header (never
/// silent), of a json object export as its `skipped_runs` member (then `"cases":[` opens);
/// the array export is the cases alone (its readers take an array), and the runs are in the
/// campaign's progress.
fn write_skipped(buf: &mut Vec<u8>, format: Format, skipped: &[SkippedRun]) {
    use std::io::Write;
    match format {
        Format::Json => return,
        Format::JsonObject => {
            buf.extend_from_slice(b"\"skipped_runs\":");
            // Serialising plain strings and numbers cannot fail.
            let _ = serde_json::to_writer(&mut *buf, skipped);
            buf.extend_from_slice(b",\"cases\":[");
            return;
        }
        // RFC 4180: a csv holds its header and its rows, nothing else (the runs are in the
        // response's headers and the json object export).
        Format::Csv => return,
        Format::Wc => {}
    }
    for s in skipped {
        let _ = writeln!(
            buf,
            "# skipped [{}, {}] ({} arguments): {}: {}",
            s.first,
            s.last,
            s.count,
            s.reason,
            comment_safe(&s.rule)
        );
    }
}

/// A campaign's name for a comment line: control characters (a newline would end the
/// comment) become spaces.
fn comment_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn write_prefix(buf: &mut Vec<u8>, c: &Campaign, spec: &ExportSpec) {
    use std::io::Write;
    match spec.format {
        Format::Json => buf.push(b'['),
        Format::JsonObject => {
            // The document's head: every member but the runs and the cases, written with
            // serde (the campaign's texts escaped), its closing brace dropped.
            let mut head = serde_json::json!({
                "version": 1,
                "campaign_id": c.id,
                "function": c.function,
                "precision": c.precision,
                "format": c.format,
                "judged_as": c.judged_as,
                "min_bits": c.min_bits,
            });
            if !c.derived.is_empty() {
                head["derived_runs"] = serde_json::json!(c.derived);
            }
            let text = head.to_string();
            buf.extend_from_slice(&text.as_bytes()[..text.len() - 1]);
            buf.push(b',');
        }
        Format::Csv => buf.extend_from_slice(CSV_HEADER),
        Format::Wc => {
            let f = &spec.filter;
            let _ = writeln!(
                buf,
                "# Hard-to-round cases of {} in {}, found by tmd",
                c.function,
                format_name(c)
            );
            let _ = writeln!(buf, "# format {}", comment_safe(&c.judged_as));
            let _ = writeln!(
                buf,
                "# campaign {} \"{}\": {} (search threshold {} bits)",
                c.id,
                comment_safe(&c.name),
                c.ranges
                    .iter()
                    .map(|r| format!("[{}, {})", r.from, r.to))
                    .collect::<Vec<_>>()
                    .join(" "),
                c.min_bits
            );
            let _ = writeln!(
                buf,
                "# filters: bits >= {}, kind {}{}; sorted by {}",
                f.min_bits.max(c.min_bits),
                f.kind.map_or("fp and mid", HrKind::as_str),
                f.limit.map_or(String::new(), |n| format!(", at most {n}")),
                match f.order {
                    HrOrder::Argument => "argument",
                    HrOrder::Hardness => "hardness",
                }
            );
            if c.state != CampaignState::Complete {
                // A partial list reads like a complete one with fewer cases: say it is not.
                let _ = writeln!(
                    buf,
                    "# not complete (campaign {}): the cases of units not done yet, and of \
                     derivations not recorded yet, are missing",
                    c.state.as_str()
                );
            }
            for d in &c.derived {
                let _ = writeln!(
                    buf,
                    "# derived [{}, {}] ({} arguments) from {}: {}",
                    d.first,
                    d.last,
                    d.arguments,
                    d.base,
                    comment_safe(&d.rule)
                );
            }
            let _ = writeln!(buf, "# one argument per line, C99 hexadecimal");
        }
    }
}

/// The csv export's header row; rows end in CRLF, as RFC 4180 says.
const CSV_HEADER: &[u8] = b"x,bits,neg_log2_d,kind,rounded\r\n";

fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

fn write_row(buf: &mut Vec<u8>, format: Format, case: &ExportedHrCase, first: bool) {
    use std::io::Write;
    match format {
        Format::Json | Format::JsonObject => {
            buf.extend_from_slice(if first { b"\n" } else { b",\n" });
            // Serialising plain strings and numbers cannot fail.
            let _ = serde_json::to_writer(&mut *buf, case);
        }
        Format::Csv => {
            let _ = write!(
                buf,
                "{},{},{},{},{}\r\n",
                csv_field(&case.x),
                case.bits,
                case.neg_log2_d,
                case.kind.as_str(),
                csv_field(&case.rounded)
            );
        }
        Format::Wc => {
            let _ = writeln!(buf, "{}", case.x);
        }
    }
}

fn write_suffix(buf: &mut Vec<u8>, format: Format, empty: bool) {
    match format {
        Format::Json => buf.extend_from_slice(if empty { b"]\n" } else { b"\n]\n" }),
        Format::JsonObject => buf.extend_from_slice(if empty { b"]}\n" } else { b"\n]}\n" }),
        Format::Csv | Format::Wc => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Result<ExportSpec> {
        let mut q = ExportQuery::default();
        for (k, v) in pairs {
            let v = Some(v.to_string());
            match *k {
                "min_bits" => q.min_bits = v,
                "kind" => q.kind = v,
                "format" => q.format = v,
                "sort" => q.sort = v,
                "limit" => q.limit = v,
                _ => unreachable!(),
            }
        }
        q.spec(1)
    }

    #[test]
    fn the_query_is_checked_and_blank_fields_mean_absent() {
        let s = query(&[]).unwrap();
        assert_eq!(s.format, Format::Json);
        assert_eq!(
            (s.filter.min_bits, s.filter.kind, s.filter.limit),
            (0, None, None)
        );
        assert_eq!(s.filter.order, HrOrder::Argument);
        let s = query(&[("min_bits", ""), ("kind", " "), ("format", "wc")]).unwrap();
        assert_eq!(
            (s.filter.min_bits, s.filter.kind, s.format),
            (0, None, Format::Wc)
        );
        let s = query(&[
            ("min_bits", "20"),
            ("kind", "mid"),
            ("sort", "hardness"),
            ("limit", "5"),
        ])
        .unwrap();
        assert_eq!(s.filter.min_bits, 20);
        assert_eq!(s.filter.kind, Some(HrKind::Mid));
        assert_eq!(s.filter.order, HrOrder::Hardness);
        assert_eq!(s.filter.limit, Some(5));
        for (k, v, needle) in [
            ("min_bits", "-1", "min_bits"),
            ("min_bits", "257", "min_bits"),
            ("min_bits", "x", "min_bits"),
            ("kind", "FP", "kind"),
            ("format", "xml", "format"),
            ("sort", "random", "sort"),
            ("limit", "0", "limit"),
        ] {
            match query(&[(k, v)]) {
                Err(Error::BadRequest(m)) => assert!(m.contains(needle), "{k}={v}: {m}"),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
    }

    #[test]
    fn rows_are_written_in_each_format() {
        let case = ExportedHrCase {
            x: "-0x1.8p+0".into(),
            bits: 21,
            neg_log2_d: 45.25,
            kind: HrKind::Mid,
            rounded: "0x1.2p-2".into(),
            unit_id: 7,
        };
        let mut json = b"[".to_vec();
        write_row(&mut json, Format::Json, &case, true);
        write_row(&mut json, Format::Json, &case, false);
        write_suffix(&mut json, Format::Json, false);
        let back: Vec<ExportedHrCase> = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, vec![case.clone(), case.clone()]);
        let mut empty = b"[".to_vec();
        write_suffix(&mut empty, Format::Json, true);
        assert_eq!(
            serde_json::from_slice::<Vec<ExportedHrCase>>(&empty).unwrap(),
            vec![]
        );

        let mut csv = Vec::new();
        write_row(&mut csv, Format::Csv, &case, true);
        assert_eq!(
            String::from_utf8(csv).unwrap(),
            "-0x1.8p+0,21,45.25,mid,0x1.2p-2\r\n"
        );
        let mut wc = Vec::new();
        write_row(&mut wc, Format::Wc, &case, true);
        assert_eq!(String::from_utf8(wc).unwrap(), "-0x1.8p+0\n");
        assert_eq!(csv_field("a,b\"c"), "\"a,b\"\"c\"");
        assert_eq!(comment_safe("a\nb"), "a b");
    }
}
