-- The seconds a campaign's results took, as a counter of the campaign and in its snapshots, so
-- that the ETA can divide the time its binades have left (each binade's measured seconds per
-- argument, `binade_tallies.seconds`) by the seconds of work the farm does per second now.
--
-- * `campaign_tallies.seconds`: the sum of `binade_tallies.seconds` over the campaign's
--   binades (the results' `elapsed_seconds` over their workers' slots), kept by the same
--   statement trigger on results.
-- * `campaign_snapshots.seconds_done`: that counter when the snapshot was taken (NULL for
--   snapshots older than this migration: the ETA then falls back to the rate of work).
-- * `campaigns.started_at`: when the campaign's first lease was claimed. The pace of a
--   campaign younger than the ETA's window is measured from then, not from its creation (an
--   estimate or a queue may hold it unleased for minutes). Campaigns with leases already get
--   their creation time.

ALTER TABLE campaign_tallies ADD COLUMN seconds double precision NOT NULL DEFAULT 0;
ALTER TABLE campaign_snapshots ADD COLUMN seconds_done double precision;
ALTER TABLE campaigns ADD COLUMN started_at timestamptz;
UPDATE campaigns c SET started_at = c.created_at
WHERE EXISTS (SELECT 1 FROM campaign_tallies t WHERE t.campaign_id = c.id
              AND t.units_leased + t.units_done + t.units_quarantined > 0);

-- Binades first, then the campaign, in two statements: the order every tally trigger locks its
-- rows in (the parts of one statement run in no set order).
CREATE OR REPLACE FUNCTION tally_result_seconds() RETURNS trigger LANGUAGE plpgsql AS $$
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
    INSERT INTO campaign_tallies AS t (campaign_id, shard, seconds)
    SELECT u.campaign_id, s, sum(n.elapsed_seconds / w.slots)
    FROM new_results n, LATERAL (
        SELECT campaign_id FROM units WHERE units.id = n.unit_id LIMIT 1) u,
        LATERAL (SELECT slots FROM workers WHERE workers.id = n.worker_id LIMIT 1) w
    GROUP BY u.campaign_id ORDER BY u.campaign_id
    ON CONFLICT (campaign_id, shard) DO UPDATE SET seconds = t.seconds + EXCLUDED.seconds;
    RETURN NULL;
END $$;

-- The results already there, from the binades' counters (shard 0).
UPDATE campaign_tallies t SET seconds = b.seconds
FROM (SELECT campaign_id, sum(seconds) AS seconds FROM binade_tallies GROUP BY campaign_id) b
WHERE t.campaign_id = b.campaign_id AND t.shard = 0;
