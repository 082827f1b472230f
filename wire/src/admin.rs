//! The admin's remedies on a campaign: quarantined units back to the pool, known cases to judge
//! workers by, planted cases taken out.

use serde::{Deserialize, Serialize};

#[cfg(feature = "openapi")]
use utoipa::ToSchema;

/// `POST /api/v1/campaigns/{id}/requeue` (admin): quarantined units back to the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RequeueUnits {
    /// The units to put back (each must be quarantined); all the campaign's quarantined units
    /// when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 100000))]
    pub unit_ids: Option<Vec<i64>>,
}

/// What a requeue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Requeued {
    /// Units put back in the pool with no attempts and no failure reports.
    pub requeued: u32,
}

/// `POST /api/v1/campaigns/{id}/known-cases` (admin): known HR-cases (ringers) to judge
/// results by. The lines of a CORE-MATH worst-case file (`.wc`) or C99 hexadecimal arguments,
/// one a line; `#` starts a comment; a line's first field is the argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LoadKnownCases {
    #[cfg_attr(feature = "openapi", schema(max_items = 100000))]
    pub lines: Vec<String>,
}

/// An argument that was not loaded as a known case, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct KnownCaseRefused {
    pub x: String,
    pub why: String,
}

/// What loading known cases did. Only cases MPFR verifies as HR-cases of the campaign (its
/// function, format and `min_bits`) inside one of its units count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct KnownCasesLoaded {
    /// Arguments read from the lines.
    pub submitted: u64,
    /// New known cases stored.
    pub loaded: u64,
    pub already_known: u64,
    /// Of the cases submitted, those of a binade the campaign derives, loaded (or already
    /// known) as the base case they are a copy of.
    #[serde(default)]
    pub derived_to_base: u64,
    /// Not HR-cases of the campaign, or outside its units (at most 100 listed).
    pub refused: Vec<KnownCaseRefused>,
    pub refused_total: u64,
    /// Done units reopened: their results lacked a known case.
    pub units_reopened: u64,
    /// Workers whose results a known case refuted (quarantined).
    pub workers_caught: Vec<i64>,
    /// Known cases the campaign holds now.
    pub known_total: i64,
}

/// `POST /api/v1/campaigns/{id}/cases/remove` (admin): HR-cases to take out of a campaign (a
/// planted case: one MPFR confirms but that no engine reports). They are kept in the record,
/// every later result reporting one is refused as forged, and their units are judged again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RemoveCases {
    /// The arguments, C99 hexadecimal (any spelling of the campaign's numbers).
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub xs: Vec<String>,
    /// Why, for the record.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 500))]
    pub reason: String,
}

/// What removing cases did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CasesRemoved {
    /// Cases taken out (recorded or known cases).
    pub removed: u64,
    /// Arguments that are no case of the campaign (at most 100 listed).
    pub not_found: Vec<String>,
    /// Units judged again, and those of them now done.
    pub units_rejudged: u64,
    pub units_done: u64,
}
