-- Progress by work, at scale (issue 25).
--
-- * `campaign_costs`: each binade's expected cost, from an estimate an admin posted
--   (`tmd_wire::CostEstimate`). `weight` is the binade's cost per argument relative to the
--   campaign's mean (the mean over all its arguments is 1), so a unit's work is
--   `count * weight` "weighted arguments" and a campaign's total work equals its arguments.
--   A binade without a row weighs 1: without an estimate, work is counted in arguments (the
--   behaviour before this migration).
-- * `campaign_tallies` and `binade_tallies`: counters maintained in the transactions that
--   change units, results and HR-cases (statement-level triggers with transition tables: one
--   multi-row upsert per statement, whatever the number of rows), so progress, the dashboard,
--   `campaign watch` and `/metrics` read a few rows instead of scanning units. Each is split
--   into 16 shards (`pg_backend_pid() % 16`): concurrent result batches of one campaign update
--   different rows instead of queuing on one; a reader sums the shards.
-- * `campaign_snapshots`: the done work of each active campaign, written by the sweeper about
--   once a minute and kept two hours: the rate (and the ETA) is the difference to the snapshot
--   about an hour old, one row read instead of the units done in the last hour.
--
-- The units of a new campaign are counted by the statement that creates it (`create_campaign`
-- writes the binades' counters itself): there is no insert trigger on `units`, which would
-- spill a transition table of every unit of a large campaign.
--
-- No foreign keys on the counters: a key's check would lock the campaign's row for every
-- upsert (the hot row of `20261121000002_leases_campaign_not_fk.sql`), and campaigns are
-- never deleted.

ALTER TABLE campaigns
    -- The estimate as posted (NULL: none; work is counted in arguments).
    ADD COLUMN estimate         jsonb,
    -- Seconds of the estimate's back end per weighted argument (total seconds over total
    -- arguments); NULL without an estimate.
    ADD COLUMN seconds_per_work double precision,
    -- The smallest weight of its binades: how far a claim may have to look ahead to fill a
    -- lease with work (1 without an estimate).
    ADD COLUMN min_weight       double precision NOT NULL DEFAULT 1
                                CHECK (min_weight > 0);

CREATE TABLE campaign_costs (
    campaign_id          bigint           NOT NULL,
    negative             boolean          NOT NULL,
    exponent             integer          NOT NULL,
    weight               double precision NOT NULL
                         CHECK (weight > 0 AND weight < 'Infinity'::float8),
    -- The estimate's seconds per argument of this binade, for people.
    seconds_per_argument double precision NOT NULL CHECK (seconds_per_argument >= 0),
    PRIMARY KEY (campaign_id, negative, exponent)
);

CREATE TABLE campaign_tallies (
    campaign_id             bigint           NOT NULL,
    shard                   smallint         NOT NULL,
    units_pending           bigint           NOT NULL DEFAULT 0,
    units_leased            bigint           NOT NULL DEFAULT 0,
    units_done              bigint           NOT NULL DEFAULT 0,
    units_quarantined       bigint           NOT NULL DEFAULT 0,
    args_pending            numeric          NOT NULL DEFAULT 0,
    args_leased             numeric          NOT NULL DEFAULT 0,
    args_done               numeric          NOT NULL DEFAULT 0,
    args_quarantined        numeric          NOT NULL DEFAULT 0,
    work_pending            double precision NOT NULL DEFAULT 0,
    work_leased             double precision NOT NULL DEFAULT 0,
    work_done               double precision NOT NULL DEFAULT 0,
    work_quarantined        double precision NOT NULL DEFAULT 0,
    hr_cases                bigint           NOT NULL DEFAULT 0,
    results                 bigint           NOT NULL DEFAULT 0,
    results_void            bigint           NOT NULL DEFAULT 0,
    results_outvoted        bigint           NOT NULL DEFAULT 0,
    results_alone           bigint           NOT NULL DEFAULT 0,
    results_alone_untrusted bigint           NOT NULL DEFAULT 0,
    results_refuted         bigint           NOT NULL DEFAULT 0,
    -- Arguments computed over all results (void ones included): the replication's cost.
    results_arguments       numeric          NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign_id, shard)
);

CREATE TABLE binade_tallies (
    campaign_id       bigint   NOT NULL,
    negative          boolean  NOT NULL,
    exponent          integer  NOT NULL,
    shard             smallint NOT NULL,
    units_pending     bigint   NOT NULL DEFAULT 0,
    units_leased      bigint   NOT NULL DEFAULT 0,
    units_done        bigint   NOT NULL DEFAULT 0,
    units_quarantined bigint   NOT NULL DEFAULT 0,
    args_pending      numeric  NOT NULL DEFAULT 0,
    args_leased       numeric  NOT NULL DEFAULT 0,
    args_done         numeric  NOT NULL DEFAULT 0,
    args_quarantined  numeric  NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign_id, negative, exponent, shard)
);

CREATE TABLE campaign_snapshots (
    campaign_id bigint           NOT NULL,
    taken_at    timestamptz      NOT NULL DEFAULT now(),
    work_done   double precision NOT NULL,
    args_done   numeric          NOT NULL,
    PRIMARY KEY (campaign_id, taken_at)
);

-- Units that changed state in one statement, counted once per campaign and once per binade.
-- Only `state` moves a unit between counters (campaign, binade and count never change): each
-- new row counts +1 in its state and each old row -1 in its own, so an unchanged row cancels
-- out. No join of the two transition tables: PL/pgSQL keeps the plan of a trigger's statement
-- for the session, made for the first statement's row counts (a claim of one unit), and a
-- nested loop over the two tables is quadratic at the next claim of 20,000 units. Every step
-- here is linear in the rows whatever the plan; the weights are looked up per binade.
CREATE FUNCTION tally_units() RETURNS trigger LANGUAGE plpgsql AS $$
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
                           AND k.exponent = g0.exponent), 1) AS w
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
           sum(ap::float8 * w), sum(al::float8 * w), sum(ad::float8 * w), sum(aq::float8 * w)
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

CREATE TRIGGER units_tally AFTER UPDATE ON units
    REFERENCING OLD TABLE AS old_units NEW TABLE AS new_units
    FOR EACH STATEMENT EXECUTE FUNCTION tally_units();

-- Results recorded (their campaign is their unit's), and verdicts or voids that changed. As
-- above, linear whatever the cached plan: a unit is looked up by its key per result row, and
-- old and new rows are added with opposite signs instead of joined.
CREATE FUNCTION tally_results() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16)::smallint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO campaign_tallies AS t (campaign_id, shard, results, results_void,
            results_outvoted, results_alone, results_alone_untrusted, results_refuted,
            results_arguments)
        SELECT u.campaign_id, s, count(*), count(*) FILTER (WHERE n.void),
               count(*) FILTER (WHERE n.verdict = 'outvoted'),
               count(*) FILTER (WHERE n.verdict = 'alone' AND NOT n.void),
               count(*) FILTER (WHERE n.verdict = 'alone' AND NOT n.void AND NOT n.by_trusted),
               count(*) FILTER (WHERE n.verdict = 'refuted'),
               sum(u.count)
        FROM new_results n, LATERAL (
            SELECT campaign_id, count FROM units WHERE units.id = n.unit_id LIMIT 1) u
        GROUP BY u.campaign_id ORDER BY u.campaign_id
        ON CONFLICT (campaign_id, shard) DO UPDATE SET
            results = t.results + EXCLUDED.results,
            results_void = t.results_void + EXCLUDED.results_void,
            results_outvoted = t.results_outvoted + EXCLUDED.results_outvoted,
            results_alone = t.results_alone + EXCLUDED.results_alone,
            results_alone_untrusted = t.results_alone_untrusted + EXCLUDED.results_alone_untrusted,
            results_refuted = t.results_refuted + EXCLUDED.results_refuted,
            results_arguments = t.results_arguments + EXCLUDED.results_arguments;
    ELSE
        WITH d AS (
            SELECT unit_id, void, verdict, by_trusted, 1 AS sign FROM new_results
            UNION ALL
            SELECT unit_id, void, verdict, by_trusted, -1 AS sign FROM old_results),
        per_unit AS (
            SELECT unit_id,
                   sum(sign * void::int) AS dv,
                   sum(sign * (verdict = 'outvoted')::int) AS dout,
                   sum(sign * (verdict = 'alone' AND NOT void)::int) AS da,
                   sum(sign * (verdict = 'alone' AND NOT void AND NOT by_trusted)::int) AS dau,
                   sum(sign * (verdict = 'refuted')::int) AS dr
            FROM d GROUP BY unit_id),
        ch AS (
            SELECT * FROM per_unit
            WHERE dv <> 0 OR dout <> 0 OR da <> 0 OR dau <> 0 OR dr <> 0)
        INSERT INTO campaign_tallies AS t (campaign_id, shard, results_void, results_outvoted,
            results_alone, results_alone_untrusted, results_refuted)
        SELECT u.campaign_id, s, sum(dv), sum(dout), sum(da), sum(dau), sum(dr)
        FROM ch, LATERAL (SELECT campaign_id FROM units WHERE units.id = ch.unit_id LIMIT 1) u
        GROUP BY u.campaign_id ORDER BY u.campaign_id
        ON CONFLICT (campaign_id, shard) DO UPDATE SET
            results_void = t.results_void + EXCLUDED.results_void,
            results_outvoted = t.results_outvoted + EXCLUDED.results_outvoted,
            results_alone = t.results_alone + EXCLUDED.results_alone,
            results_alone_untrusted = t.results_alone_untrusted + EXCLUDED.results_alone_untrusted,
            results_refuted = t.results_refuted + EXCLUDED.results_refuted;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER results_tally_insert AFTER INSERT ON results
    REFERENCING NEW TABLE AS new_results
    FOR EACH STATEMENT EXECUTE FUNCTION tally_results();
CREATE TRIGGER results_tally_update AFTER UPDATE ON results
    REFERENCING OLD TABLE AS old_results NEW TABLE AS new_results
    FOR EACH STATEMENT EXECUTE FUNCTION tally_results();

-- HR-cases recorded (a case already known is not inserted, so not counted twice).
CREATE FUNCTION tally_hr_cases() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16)::smallint;
BEGIN
    INSERT INTO campaign_tallies AS t (campaign_id, shard, hr_cases)
    SELECT campaign_id, s, count(*) FROM new_cases GROUP BY campaign_id ORDER BY campaign_id
    ON CONFLICT (campaign_id, shard) DO UPDATE SET hr_cases = t.hr_cases + EXCLUDED.hr_cases;
    RETURN NULL;
END $$;

CREATE TRIGGER hr_cases_tally AFTER INSERT ON hr_cases
    REFERENCING NEW TABLE AS new_cases
    FOR EACH STATEMENT EXECUTE FUNCTION tally_hr_cases();

-- The counters of the campaigns already there, from one scan (shard 0).
INSERT INTO binade_tallies (campaign_id, negative, exponent, shard,
    units_pending, units_leased, units_done, units_quarantined,
    args_pending, args_leased, args_done, args_quarantined)
SELECT campaign_id, negative, exponent, 0,
       count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'leased'),
       count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'quarantined'),
       COALESCE(sum(count) FILTER (WHERE state = 'pending'), 0),
       COALESCE(sum(count) FILTER (WHERE state = 'leased'), 0),
       COALESCE(sum(count) FILTER (WHERE state = 'done'), 0),
       COALESCE(sum(count) FILTER (WHERE state = 'quarantined'), 0)
FROM units GROUP BY campaign_id, negative, exponent;

INSERT INTO campaign_tallies (campaign_id, shard,
    units_pending, units_leased, units_done, units_quarantined,
    args_pending, args_leased, args_done, args_quarantined,
    work_pending, work_leased, work_done, work_quarantined)
SELECT campaign_id, 0, sum(units_pending), sum(units_leased), sum(units_done),
       sum(units_quarantined), sum(args_pending), sum(args_leased), sum(args_done),
       sum(args_quarantined), sum(args_pending)::float8, sum(args_leased)::float8,
       sum(args_done)::float8, sum(args_quarantined)::float8
FROM binade_tallies GROUP BY campaign_id;

INSERT INTO campaign_tallies AS t (campaign_id, shard, hr_cases)
SELECT campaign_id, 0, count(*) FROM hr_cases GROUP BY campaign_id
ON CONFLICT (campaign_id, shard) DO UPDATE SET hr_cases = EXCLUDED.hr_cases;

INSERT INTO campaign_tallies AS t (campaign_id, shard, results, results_void, results_outvoted,
    results_alone, results_alone_untrusted, results_refuted, results_arguments)
SELECT u.campaign_id, 0, count(*), count(*) FILTER (WHERE r.void),
       count(*) FILTER (WHERE r.verdict = 'outvoted'),
       count(*) FILTER (WHERE r.verdict = 'alone' AND NOT r.void),
       count(*) FILTER (WHERE r.verdict = 'alone' AND NOT r.void AND NOT r.by_trusted),
       count(*) FILTER (WHERE r.verdict = 'refuted'), sum(u.count)
FROM results r JOIN units u ON u.id = r.unit_id GROUP BY u.campaign_id
ON CONFLICT (campaign_id, shard) DO UPDATE SET
    results = EXCLUDED.results, results_void = EXCLUDED.results_void,
    results_outvoted = EXCLUDED.results_outvoted, results_alone = EXCLUDED.results_alone,
    results_alone_untrusted = EXCLUDED.results_alone_untrusted,
    results_refuted = EXCLUDED.results_refuted, results_arguments = EXCLUDED.results_arguments;
