-- Work counters kept exactly (a flaky counter: a campaign's leased work read -1.08e-9 where a
-- scan said 0).
--
-- `20261124100001_work_tallies.sql` kept each state's work (`count * weight`) as a
-- double-precision sum of per-statement deltas: a unit leased and released adds and takes away
-- the same product, but rounded against different running totals, so a counter whose true
-- value is 0 drifted to about 1e-16 of the largest total it passed through. The counters are
-- now `numeric`, and every product is `count * weight::numeric`: the weight's cast is the same
-- decimal wherever it is made (15 significant digits), and numeric sums and products are exact,
-- so a counter is exactly the sum of its units' products whatever order they came and went in.
-- The existing counters are recomputed from the binades' arguments (shard 0 holds a campaign's
-- work, as when an estimate is posted).

ALTER TABLE campaign_tallies
    ALTER COLUMN work_pending TYPE numeric USING 0,
    ALTER COLUMN work_leased TYPE numeric USING 0,
    ALTER COLUMN work_done TYPE numeric USING 0,
    ALTER COLUMN work_quarantined TYPE numeric USING 0;

WITH w AS (
    SELECT b.campaign_id,
           sum(b.args_pending * COALESCE(k.weight::numeric, 1)) AS p,
           sum(b.args_leased * COALESCE(k.weight::numeric, 1)) AS l,
           sum(b.args_done * COALESCE(k.weight::numeric, 1)) AS d,
           sum(b.args_quarantined * COALESCE(k.weight::numeric, 1)) AS q
    FROM binade_tallies b LEFT JOIN campaign_costs k ON k.campaign_id = b.campaign_id
         AND k.negative = b.negative AND k.exponent = b.exponent
    GROUP BY b.campaign_id)
UPDATE campaign_tallies t SET work_pending = w.p, work_leased = w.l, work_done = w.d,
       work_quarantined = w.q
FROM w WHERE t.campaign_id = w.campaign_id AND t.shard = 0;

ALTER TABLE campaign_snapshots ALTER COLUMN work_done TYPE numeric;

CREATE OR REPLACE FUNCTION tally_units() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16)::smallint;
BEGIN
    WITH d AS (
        SELECT campaign_id, negative, exponent, count, state, 1 AS sign FROM new_units
        UNION ALL
        SELECT campaign_id, negative, exponent, count, state, -1 AS sign FROM old_units),
    g0 AS (
        SELECT campaign_id, negative, exponent,
               COALESCE(sum(sign) FILTER (WHERE state = 'pending'), 0) AS up,
               COALESCE(sum(sign) FILTER (WHERE state = 'leased'), 0) AS ul,
               COALESCE(sum(sign) FILTER (WHERE state = 'done'), 0) AS ud,
               COALESCE(sum(sign) FILTER (WHERE state = 'quarantined'), 0) AS uq,
               COALESCE(sum(sign * count) FILTER (WHERE state = 'pending'), 0) AS ap,
               COALESCE(sum(sign * count) FILTER (WHERE state = 'leased'), 0) AS al,
               COALESCE(sum(sign * count) FILTER (WHERE state = 'done'), 0) AS ad,
               COALESCE(sum(sign * count) FILTER (WHERE state = 'quarantined'), 0) AS aq
        FROM d GROUP BY campaign_id, negative, exponent),
    g AS (
        SELECT g0.*,
               COALESCE((SELECT k.weight FROM campaign_costs k
                         WHERE k.campaign_id = g0.campaign_id AND k.negative = g0.negative
                           AND k.exponent = g0.exponent)::numeric, 1) AS w
        FROM g0 WHERE up <> 0 OR ul <> 0 OR ud <> 0 OR uq <> 0),
    b AS (
        INSERT INTO binade_tallies AS t (campaign_id, negative, exponent, shard,
            units_pending, units_leased, units_done, units_quarantined,
            args_pending, args_leased, args_done, args_quarantined)
        SELECT campaign_id, negative, exponent, s, up, ul, ud, uq, ap, al, ad, aq
        FROM g ORDER BY campaign_id, negative, exponent
        ON CONFLICT (campaign_id, negative, exponent, shard) DO UPDATE SET
            units_pending = t.units_pending + EXCLUDED.units_pending,
            units_leased = t.units_leased + EXCLUDED.units_leased,
            units_done = t.units_done + EXCLUDED.units_done,
            units_quarantined = t.units_quarantined + EXCLUDED.units_quarantined,
            args_pending = t.args_pending + EXCLUDED.args_pending,
            args_leased = t.args_leased + EXCLUDED.args_leased,
            args_done = t.args_done + EXCLUDED.args_done,
            args_quarantined = t.args_quarantined + EXCLUDED.args_quarantined)
    INSERT INTO campaign_tallies AS t (campaign_id, shard,
        units_pending, units_leased, units_done, units_quarantined,
        args_pending, args_leased, args_done, args_quarantined,
        work_pending, work_leased, work_done, work_quarantined)
    SELECT campaign_id, s, sum(up), sum(ul), sum(ud), sum(uq),
           sum(ap), sum(al), sum(ad), sum(aq),
           sum(ap * w), sum(al * w), sum(ad * w), sum(aq * w)
    FROM g GROUP BY campaign_id ORDER BY campaign_id
    ON CONFLICT (campaign_id, shard) DO UPDATE SET
        units_pending = t.units_pending + EXCLUDED.units_pending,
        units_leased = t.units_leased + EXCLUDED.units_leased,
        units_done = t.units_done + EXCLUDED.units_done,
        units_quarantined = t.units_quarantined + EXCLUDED.units_quarantined,
        args_pending = t.args_pending + EXCLUDED.args_pending,
        args_leased = t.args_leased + EXCLUDED.args_leased,
        args_done = t.args_done + EXCLUDED.args_done,
        args_quarantined = t.args_quarantined + EXCLUDED.args_quarantined,
        work_pending = t.work_pending + EXCLUDED.work_pending,
        work_leased = t.work_leased + EXCLUDED.work_leased,
        work_done = t.work_done + EXCLUDED.work_done,
        work_quarantined = t.work_quarantined + EXCLUDED.work_quarantined;
    RETURN NULL;
END $$;
