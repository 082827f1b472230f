-- Trust under attack: what the coordinator needs to judge a result's cases as a set, to hold a
-- disputed unit for a person, to choose who computes a unit's further replicas, to audit the
-- counts volunteers claim, to bound the verification each worker costs, and to count attempts
-- and idle units per worker rather than per lease.

-- Each result's verified HR-cases (canonical arguments): completeness is judged as a set (every
-- standing verified case of the unit present), so a case an admin removes, or one outside the
-- set a result may carry, cannot stand in for a missing one. NULL for results recorded before:
-- those are judged by their count, as they were.
ALTER TABLE results ADD COLUMN case_xs jsonb;
-- The digest of the cases alone (without the engine's counters): results of different engine
-- versions are compared by it. NULL for results recorded before: their `claim`.
ALTER TABLE results ADD COLUMN cases_claim text;
-- The poster's owner (its enrollment token's): shares of settled results are counted per owner.
ALTER TABLE results ADD COLUMN owner text;
UPDATE results r SET owner = w.owner FROM workers w WHERE w.id = r.worker_id;
-- The count audit: the cases the unit was expected to hold, and whether the result's count is
-- improbably low for it (such a result settles nothing without a further replica).
ALTER TABLE results ADD COLUMN expected_cases double precision;
ALTER TABLE results ADD COLUMN implausible boolean NOT NULL DEFAULT false;

-- Why a unit is quarantined, for the person who looks at it.
ALTER TABLE units ADD COLUMN hold_reason text;
-- The owner (or worker, `w<id>`) the coordinator chose for the unit's next replica, and when:
-- a unit that has a result but is not settled is leased only to whom it is reserved for.
ALTER TABLE units ADD COLUMN reserved_for text;
ALTER TABLE units ADD COLUMN reserved_at timestamptz;
CREATE INDEX units_reserved ON units (campaign_id, reserved_for, seq)
    WHERE state = 'pending' AND reserved_for IS NOT NULL;
CREATE INDEX units_awaiting_replica ON units (campaign_id, id)
    WHERE state = 'pending' AND replicas_done > 0 AND reserved_for IS NULL;

-- A lease whose units are not one contiguous run lists their seqs (NULL: the run
-- `[first_seq, first_seq + unit_count)`).
ALTER TABLE leases ADD COLUMN seqs int4[];

-- The claim's sources, each a partial index in seq order: units never leased (`fence` is set
-- by a unit's first lease), units back from an expired or released lease with no live result,
-- and (above) units reserved for an owner's next replica. Claims in seq order start at
-- `campaigns.fresh_from`, below which no unit was never leased: a scan does not step over the
-- entries of units leased since the last vacuum.
CREATE INDEX units_fresh ON units (campaign_id, seq) WHERE state = 'pending' AND fence IS NULL;
CREATE INDEX units_returned ON units (campaign_id, seq)
    WHERE state = 'pending' AND fence IS NOT NULL AND replicas_done = 0;
ALTER TABLE campaigns ADD COLUMN fresh_from integer NOT NULL DEFAULT 0;

-- One attempt per unit and actor (a trusted worker, or an untrusted owner), whether it failed
-- the unit or let its lease expire: one worker, or the identities of one owner, cannot
-- quarantine a unit alone. Replaces `unit_failures`.
CREATE TABLE unit_attempts (
    unit_id   bigint      NOT NULL REFERENCES units (id),
    actor     text        NOT NULL,
    worker_id bigint      NOT NULL REFERENCES workers (id),
    kind      text        NOT NULL CHECK (kind IN ('failed', 'expired')),
    at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (unit_id, actor)
);
CREATE INDEX unit_attempts_worker ON unit_attempts (worker_id);
INSERT INTO unit_attempts (unit_id, actor, worker_id, kind, at)
SELECT unit_id, 'w' || worker_id, worker_id, 'failed', reported_at FROM unit_failures;
DROP TABLE unit_failures;

-- HR-cases an admin removed from a campaign (planted ones): kept for the record, and refused
-- when a result reports them again.
CREATE TABLE removed_cases (
    campaign_id bigint           NOT NULL REFERENCES campaigns (id),
    unit_id     bigint           NOT NULL REFERENCES units (id),
    x           text             NOT NULL,
    bits        integer          NOT NULL,
    neg_log2_d  double precision NOT NULL,
    kind        text             NOT NULL,
    rounded     text             NOT NULL,
    reason      text             NOT NULL,
    removed_at  timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (campaign_id, x)
);
CREATE INDEX removed_cases_unit ON removed_cases (unit_id);

ALTER TABLE workers
    -- Units taken in leases, and those given back untouched (no result, no failure report).
    ADD COLUMN units_leased    bigint           NOT NULL DEFAULT 0,
    ADD COLUMN units_idle      bigint           NOT NULL DEFAULT 0,
    -- Seconds of MPFR verification its posts cost the coordinators, and how often a post of it
    -- ran out of its verification budget.
    ADD COLUMN verify_seconds  double precision NOT NULL DEFAULT 0,
    ADD COLUMN verify_overruns bigint           NOT NULL DEFAULT 0;

-- A token with too many quarantined workers is suspended: its live identities with it.
ALTER TABLE enrollment_tokens ADD COLUMN suspended_at timestamptz;

-- The count audit per owner and campaign: cases expected and reported over its audited results.
CREATE TABLE owner_audit (
    campaign_id bigint           NOT NULL,
    owner       text             NOT NULL,
    expected    double precision NOT NULL DEFAULT 0,
    observed    bigint           NOT NULL DEFAULT 0,
    results     bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign_id, owner)
);

-- An estimate's expected HR-cases per argument of each binade: the count audit's expectation
-- where one was posted.
ALTER TABLE campaign_costs ADD COLUMN cases_per_argument double precision
    CHECK (cases_per_argument >= 0 AND cases_per_argument < 'Infinity'::float8);

ALTER TABLE campaign_tallies ADD COLUMN results_implausible bigint NOT NULL DEFAULT 0;

-- Settled results per owner of untrusted workers (live, agreed or alone): an owner's share of
-- what settled a campaign, kept by the results' triggers like the campaign's counters.
CREATE TABLE owner_tallies (
    campaign_id bigint   NOT NULL,
    owner       text     NOT NULL,
    shard       smallint NOT NULL,
    settled     bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (campaign_id, owner, shard)
);

CREATE FUNCTION tally_owner_results() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16)::smallint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO owner_tallies AS t (campaign_id, owner, shard, settled)
        SELECT u.campaign_id, n.owner, s, count(*)
        FROM new_results n, LATERAL (
            SELECT campaign_id FROM units WHERE units.id = n.unit_id LIMIT 1) u
        WHERE n.owner IS NOT NULL AND NOT n.by_trusted AND NOT n.void
          AND n.verdict IN ('agreed', 'alone')
        GROUP BY u.campaign_id, n.owner ORDER BY u.campaign_id, n.owner
        ON CONFLICT (campaign_id, owner, shard) DO UPDATE SET settled = t.settled + EXCLUDED.settled;
    ELSE
        WITH d AS (
            SELECT unit_id, owner, 1 AS sign FROM new_results
            WHERE owner IS NOT NULL AND NOT by_trusted AND NOT void
              AND verdict IN ('agreed', 'alone')
            UNION ALL
            SELECT unit_id, owner, -1 AS sign FROM old_results
            WHERE owner IS NOT NULL AND NOT by_trusted AND NOT void
              AND verdict IN ('agreed', 'alone')),
        per AS (SELECT unit_id, owner, sum(sign) AS n FROM d GROUP BY unit_id, owner),
        ch AS (SELECT * FROM per WHERE n <> 0)
        INSERT INTO owner_tallies AS t (campaign_id, owner, shard, settled)
        SELECT u.campaign_id, ch.owner, s, sum(ch.n)
        FROM ch, LATERAL (SELECT campaign_id FROM units WHERE units.id = ch.unit_id LIMIT 1) u
        GROUP BY u.campaign_id, ch.owner ORDER BY u.campaign_id, ch.owner
        ON CONFLICT (campaign_id, owner, shard) DO UPDATE SET settled = t.settled + EXCLUDED.settled;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER results_owner_tally_insert AFTER INSERT ON results
    REFERENCING NEW TABLE AS new_results
    FOR EACH STATEMENT EXECUTE FUNCTION tally_owner_results();
CREATE TRIGGER results_owner_tally_update AFTER UPDATE ON results
    REFERENCING OLD TABLE AS old_results NEW TABLE AS new_results
    FOR EACH STATEMENT EXECUTE FUNCTION tally_owner_results();

INSERT INTO owner_tallies (campaign_id, owner, shard, settled)
SELECT u.campaign_id, r.owner, 0, count(*)
FROM results r JOIN units u ON u.id = r.unit_id
WHERE r.owner IS NOT NULL AND NOT r.by_trusted AND NOT r.void
  AND r.verdict IN ('agreed', 'alone')
GROUP BY u.campaign_id, r.owner;

-- The campaign's counters count the results the audit flagged.
CREATE OR REPLACE FUNCTION tally_results() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s smallint := (pg_backend_pid() % 16)::smallint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO campaign_tallies AS t (campaign_id, shard, results, results_void,
            results_outvoted, results_alone, results_alone_untrusted, results_refuted,
            results_arguments, results_implausible)
        SELECT u.campaign_id, s, count(*), count(*) FILTER (WHERE n.void),
               count(*) FILTER (WHERE n.verdict = 'outvoted'),
               count(*) FILTER (WHERE n.verdict = 'alone' AND NOT n.void),
               count(*) FILTER (WHERE n.verdict = 'alone' AND NOT n.void AND NOT n.by_trusted),
               count(*) FILTER (WHERE n.verdict = 'refuted'),
               sum(u.count),
               count(*) FILTER (WHERE n.implausible)
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
            results_arguments = t.results_arguments + EXCLUDED.results_arguments,
            results_implausible = t.results_implausible + EXCLUDED.results_implausible;
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
