-- Fewer index entries per recorded result (issue 12, the farm bench): every index of `results`
-- costs one more entry for each unit result, the coordinator's hottest write.
--
-- `results_unit_worker` (unit_id, worker_id) duplicated the leading column of the unique
-- (unit_id, lease_id) index: every query by unit (a unit's results when it is settled, a
-- post's prior result, the claim's "not a unit this worker already computed") reads a unit's
-- few results through that index and filters the worker on them.
DROP INDEX IF EXISTS results_unit_worker;
