//! Test fixtures of the daemon's tests (`tests.rs`, `dispatch.rs`): the units and leases of a
//! small campaign, exp in 20-bit precision at 12 bits, 2^14 arguments a unit from 1.

use tmd_wire::{Lease, LeaseTask, LeasedUnit, UnitSpec};

/// `n` consecutive units, ids 100, 101, ...
pub(super) fn units(n: u64) -> Vec<LeasedUnit> {
    (0..n)
        .map(|i| LeasedUnit {
            unit_id: 100 + i as i64,
            spec: UnitSpec {
                negative: false,
                exponent: 0,
                first: (1 << 19) + (i << 14),
                count: 1 << 14,
            },
        })
        .collect()
}

/// A lease of `units` of the campaign, its fencing token its id, for five minutes.
pub(super) fn lease(id: i64, units: Vec<LeasedUnit>) -> Lease {
    Lease {
        lease_id: id,
        fencing_token: id,
        expires_at: chrono::Utc::now() + chrono::Duration::seconds(300),
        heartbeat_seconds: 100,
        task: LeaseTask {
            campaign_id: 1,
            function: "exp".into(),
            precision: 20,
            min_bits: 12,
            format: None,
        },
        units,
    }
}
