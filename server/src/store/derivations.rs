//! What each campaign derives instead of searching (its `derivation` column), read once per
//! process: the record never changes after the campaign's creation.

use crate::error::{Error, Result};
use sqlx::types::Json;
use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tmd_kernels::numbers::format::Format;
use tmd_kernels::plan::reduce::{Derivation, DerivationRecord};

/// The campaigns' derivations met so far (`None`: the campaign derives nothing).
#[derive(Debug, Default)]
pub struct DerivationCache {
    known: Mutex<HashMap<i64, Option<Arc<Derivation>>>>,
}

impl DerivationCache {
    /// Campaign `campaign_id`'s derivation on its format `fmt`, from the database the first
    /// time.
    pub async fn get(
        &self,
        pool: &PgPool,
        campaign_id: i64,
        fmt: Format,
    ) -> Result<Option<Arc<Derivation>>> {
        if let Some(d) = self.lock().get(&campaign_id) {
            return Ok(d.clone());
        }
        let record: Option<Json<DerivationRecord>> =
            sqlx::query_scalar("SELECT derivation FROM campaigns WHERE id = $1")
                .bind(campaign_id)
                .fetch_one(pool)
                .await?;
        let derivation = match record {
            None => None,
            Some(Json(r)) => Some(Arc::new(Derivation::from_record(&r, fmt).map_err(|e| {
                Error::Internal(format!("campaign {campaign_id}'s derivation: {e}"))
            })?)),
        };
        self.lock().insert(campaign_id, derivation.clone());
        Ok(derivation)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Option<Arc<Derivation>>>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}
