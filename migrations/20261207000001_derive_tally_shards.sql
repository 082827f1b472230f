-- The background derivation counts its HR-cases on tally shards of its own (32 to 47, set by
-- its transaction's `SET LOCAL tmd.derive = 'on'`). A derivation's transaction inserts a few
-- hundred thousand rows and holds its shard's campaign counter until it commits, seconds
-- later; on the posts' shards (0 to 15, by backend) a post whose connection fell on the same
-- shard waited for it (a whole cbrt campaign on one H100: result posts' p99 2.5 s).
-- Readers sum every shard.
CREATE OR REPLACE FUNCTION tally_hr_cases() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16
                   + CASE WHEN current_setting('tmd.derive', true) = 'on' THEN 32 ELSE 0 END)
                  ::smallint;
BEGIN
    INSERT INTO campaign_tallies AS t (campaign_id, shard, hr_cases)
    SELECT campaign_id, s, count(*) FROM new_cases GROUP BY campaign_id ORDER BY campaign_id
    ON CONFLICT (campaign_id, shard) DO UPDATE SET hr_cases = t.hr_cases + EXCLUDED.hr_cases;
    RETURN NULL;
END $$;
