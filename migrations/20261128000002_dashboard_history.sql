-- What the dashboard shows of a campaign's life and of the farm.
--
-- * `campaign_history`: a campaign's done work over its whole life, one reading per hour.
--   `campaign_snapshots` (one a minute) are kept two hours for the rate; the sweeper folds
--   those older than that into this table, the first of each hour, before dropping them, and
--   an estimate folds all of them before it drops them (work under two weightings would not
--   compare). A reading keeps the done fraction rather than the work, so readings taken under
--   the plan's weights and under an estimate's stay on one scale.
-- * `campaign_snapshots.work_total`: the campaign's work in all when the snapshot was taken,
--   for that fraction (NULL for snapshots older than this migration: the work of the
--   campaign's tallies then stands in).
-- * `binade_tallies.seconds` and `.results`: the seconds results report (`elapsed_seconds`,
--   the worker's wall clock on the unit, over the units it computes at once, `workers.slots`:
--   a GPU's side-by-side units share its time) and the results counted, per binade, so the time a
--   binade costs can be set against the estimate's without scanning results. Kept by a
--   statement trigger on results like the other counters (`20261124100001_work_tallies.sql`).
-- * `workers.backend` and `.device`: what the worker says it computes on, from its lease
--   requests (NULL for workers that do not say).

CREATE TABLE campaign_history (
    campaign_id   bigint           NOT NULL,
    -- The hour the reading stands for (one per campaign and hour).
    hour          timestamptz      NOT NULL,
    taken_at      timestamptz      NOT NULL,
    args_done     numeric          NOT NULL,
    -- Done work over the campaign's work in all, 0 to 1.
    fraction_done double precision NOT NULL,
    PRIMARY KEY (campaign_id, hour)
);

ALTER TABLE campaign_snapshots ADD COLUMN work_total numeric;

ALTER TABLE binade_tallies
    ADD COLUMN seconds double precision NOT NULL DEFAULT 0,
    ADD COLUMN results bigint           NOT NULL DEFAULT 0;

ALTER TABLE workers
    ADD COLUMN backend text,
    ADD COLUMN device  text;

-- Results' seconds per binade: one upsert per statement, a unit looked up by its key per row
-- (linear whatever the cached plan, as `tally_results`).
CREATE FUNCTION tally_result_seconds() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16)::smallint;
BEGIN
    INSERT INTO binade_tallies AS t (campaign_id, negative, exponent, shard, seconds, results)
    SELECT u.campaign_id, u.negative, u.exponent, s, sum(n.elapsed_seconds / w.slots), count(*)
    FROM new_results n, LATERAL (
        SELECT campaign_id, negative, exponent FROM units WHERE units.id = n.unit_id LIMIT 1) u,
        LATERAL (SELECT slots FROM workers WHERE workers.id = n.worker_id LIMIT 1) w
    GROUP BY u.campaign_id, u.negative, u.exponent
    ORDER BY u.campaign_id, u.negative, u.exponent
    ON CONFLICT (campaign_id, negative, exponent, shard) DO UPDATE SET
        seconds = t.seconds + EXCLUDED.seconds,
        results = t.results + EXCLUDED.results;
    RETURN NULL;
END $$;

CREATE TRIGGER results_seconds_tally AFTER INSERT ON results
    REFERENCING NEW TABLE AS new_results
    FOR EACH STATEMENT EXECUTE FUNCTION tally_result_seconds();

-- The results already there, from one scan (shard 0).
INSERT INTO binade_tallies AS t (campaign_id, negative, exponent, shard, seconds, results)
SELECT u.campaign_id, u.negative, u.exponent, 0, sum(r.elapsed_seconds / w.slots), count(*)
FROM results r JOIN units u ON u.id = r.unit_id JOIN workers w ON w.id = r.worker_id
GROUP BY u.campaign_id, u.negative, u.exponent
ON CONFLICT (campaign_id, negative, exponent, shard) DO UPDATE SET
    seconds = t.seconds + EXCLUDED.seconds,
    results = t.results + EXCLUDED.results;
