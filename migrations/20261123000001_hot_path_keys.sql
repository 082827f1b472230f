-- Foreign keys off the two hottest writes (issue 12, the farm bench's p99): a profile of
-- PostgreSQL at 10,000 unit results/s put 21% of its CPU in the referential-integrity triggers
-- (`AfterTriggerEndQuery`, one SPI query per key per row): three per recorded result (its unit,
-- lease and worker) and one per unit a lease claims (5,400 per one-minute lease of an H100).
--
-- They add no safety the writes do not already have. Units, leases, workers and results are
-- never deleted (no statement deletes them; campaigns end by state, not by removal). A result
-- row is inserted only in the transaction that holds its unit's and its lease's rows
-- `FOR UPDATE` and for the worker the request authenticated; a unit's `lease_id` is set only in
-- the statement that inserts that lease. The whole-system tests check that no row points
-- nowhere (`tmd_test_support::assert_no_orphans`).
--
-- The uniqueness of a unit's place in its campaign goes too, for the same reason: a unit row is
-- rewritten twice in its life (leased by a claim, done by its result), each time as a new
-- version with a new entry in every index, and a unique index checks each new entry against the
-- heap for a live duplicate (the version it replaces). No query reads units by (campaign_id,
-- seq) through it (the claims walk `units_pending`); `seq` is written once, 0, 1, 2, ... in the
-- transaction that creates the campaign, and never updated. On a copy of the farm bench's
-- table (a million units), a claim of 5,400 units took 43-62 ms without it against 64-95 ms
-- with it. The tests' integrity check looks for duplicate places as well.
ALTER TABLE units DROP CONSTRAINT IF EXISTS units_campaign_id_seq_key;

-- The keys of rarer rows stay: HR-cases, skipped runs and unit failures keep theirs, and a lease
-- keeps its worker's.
ALTER TABLE results DROP CONSTRAINT IF EXISTS results_unit_id_fkey;
ALTER TABLE results DROP CONSTRAINT IF EXISTS results_lease_id_fkey;
ALTER TABLE results DROP CONSTRAINT IF EXISTS results_worker_id_fkey;
ALTER TABLE units DROP CONSTRAINT IF EXISTS units_lease_id_fkey;
