-- Trust in results from machines we do not control: each campaign's replication policy, the
-- owner behind each worker, each worker's reputation, and each result's verdict.
--
-- A result's verdict says what its replicas made of it: `pending` (no decision yet), `agreed`
-- (a quorum of other workers' results agree with it), `alone` (accepted without a replica: a
-- trusted worker's result that was not audited), `outvoted` (the majority disagrees).
-- `void` results belong to a quarantined worker and count for nothing; units they were needed
-- for go back to the pool.

ALTER TABLE campaigns
    ADD COLUMN distinct_owners boolean          NOT NULL DEFAULT false,
    ADD COLUMN adaptive        boolean          NOT NULL DEFAULT false,
    ADD COLUMN audit_rate      double precision NOT NULL DEFAULT 0.1
                               CHECK (audit_rate > 0 AND audit_rate <= 1),
    ADD COLUMN trust_after     integer          NOT NULL DEFAULT 20 CHECK (trust_after >= 1);

-- Who stands behind the workers registered with a token (a lab, a volunteer).
ALTER TABLE enrollment_tokens ADD COLUMN owner text;

ALTER TABLE workers
    ADD COLUMN owner             text,
    -- Results confirmed by other workers, and results the majority outvoted.
    ADD COLUMN valid             bigint NOT NULL DEFAULT 0,
    ADD COLUMN invalid           bigint NOT NULL DEFAULT 0,
    -- Posts with a case that MPFR refutes.
    ADD COLUMN forged            bigint NOT NULL DEFAULT 0,
    ADD COLUMN leases_total      bigint NOT NULL DEFAULT 0,
    ADD COLUMN leases_expired    bigint NOT NULL DEFAULT 0,
    -- Agreed results since the last outvoted one: the measure of trust.
    ADD COLUMN streak            bigint NOT NULL DEFAULT 0,
    ADD COLUMN quarantined_at    timestamptz,
    ADD COLUMN quarantine_reason text;

UPDATE workers SET owner = 'token-' || COALESCE(enrollment_token_id::text, 'none');
ALTER TABLE workers ALTER COLUMN owner SET NOT NULL;

-- Agreeing results a unit needs, fixed by its first result (the campaign's replication, or 1
-- for an unaudited trusted worker); NULL before any result.
ALTER TABLE units ADD COLUMN replicas_needed integer CHECK (replicas_needed >= 1);

ALTER TABLE results
    -- The server's own digest of what was recorded (unit, statistics, verified cases): the
    -- thing replicas agree on. `digest` stays the worker's, to recognise a retried post.
    ADD COLUMN claim      text,
    ADD COLUMN verdict    text    NOT NULL DEFAULT 'pending'
                          CHECK (verdict IN ('pending', 'agreed', 'alone', 'outvoted')),
    ADD COLUMN void       boolean NOT NULL DEFAULT false;

UPDATE results SET claim = digest;
ALTER TABLE results ALTER COLUMN claim SET NOT NULL;

CREATE INDEX results_worker_live ON results (worker_id) WHERE NOT void;

-- A quarantined worker's leases end as `revoked`.
ALTER TABLE leases DROP CONSTRAINT leases_state_check;
ALTER TABLE leases ADD CONSTRAINT leases_state_check
    CHECK (state IN ('active', 'finished', 'expired', 'released', 'revoked'));
CREATE INDEX leases_worker_active ON leases (worker_id) WHERE state = 'active';
