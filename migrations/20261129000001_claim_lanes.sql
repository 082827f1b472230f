-- Claim lanes: a campaign's units cut into stripes of seqs, each with its own cursor of fresh
-- units and its own turn (a lock on its row), so that claims of one campaign run side by side
-- on disjoint units instead of one at a time. A campaign's lanes are made at its first claim,
-- by the claiming coordinator's lane count, and keep their stripes for the campaign's life.
-- Replicated campaigns keep one turn (their replicas are drawn campaign-wide) and no lanes.
CREATE TABLE claim_lanes (
    campaign_id bigint  NOT NULL REFERENCES campaigns (id),
    lane        integer NOT NULL,
    -- The stripe: seqs in [lo, hi).
    lo          integer NOT NULL,
    hi          integer NOT NULL,
    -- Within the stripe, below it no unit was never leased (campaigns.fresh_from, per lane).
    fresh_from  integer NOT NULL,
    PRIMARY KEY (campaign_id, lane),
    CHECK (lo <= fresh_from AND lo < hi)
);


-- A claim's units change state under its own tally shards (16 to 31, set by the claim's
-- `SET LOCAL tmd.claim = 'on'`), apart from those of result posts (0 to 15). A post locks
-- its shard's campaign counters (its results) before its binade counters (its units done),
-- a claim its binade counters before its campaign counters: on one shard, a post and a
-- claim could each wait for the other, and with claims running side by side in lanes one
-- of them was rolled back after the deadlock timeout (a second) every few seconds.
-- Readers sum every shard.
CREATE OR REPLACE FUNCTION tally_units() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16
                   + CASE WHEN current_setting('tmd.claim', true) = 'on' THEN 16 ELSE 0 END)
                  ::smallint;
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
