//! Transactions abandoned as a request is cut off (by its deadline or its client): whatever
//! the moment, no connection of the pool is left inside a transaction, where it would run its
//! next users' statements and hold their locks.

use sqlx::postgres::PgPoolOptions;
use std::time::Duration;
use tmd_test_support::TestDb;

/// The connections of the database sitting inside a transaction.
async fn idle_in_transaction(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(db.pool())
    .await
    .unwrap()
}

/// A begin abandoned while its `BEGIN` is on the server (held there by a sleep, as a loaded
/// database holds it): the connection goes back to the pool outside any transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_abandoned_while_it_begins_leaves_no_connection_inside_it() {
    let db = TestDb::new().await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(db.url())
        .await
        .unwrap();
    const SLOW_BEGIN: &str = "BEGIN; SELECT pg_sleep(0.3)";
    for _ in 0..2 {
        let cut = Duration::from_millis(50);
        let begun = tokio::time::timeout(cut, tmd_server::store::begin(&pool, Some(SLOW_BEGIN)));
        assert!(begun.await.is_err(), "the begin was cut off");
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(idle_in_transaction(&db).await, 0);
    // Each connection of the pool: a savepoint is refused outside a transaction block.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = pool.acquire().await.unwrap();
        let inside = sqlx::query("SAVEPOINT probe")
            .execute(&mut *c)
            .await
            .is_ok();
        assert!(
            !inside,
            "a pooled connection runs inside an earlier transaction"
        );
        held.push(c);
    }
    drop(held);
    pool.close().await;
    db.drop_db().await;
}
