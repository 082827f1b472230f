-- The coordinator's schema: campaigns cut into units, leases on runs of units, results,
-- verified hard-to-round cases, workers and their enrollment tokens.
--
-- Invariants enforced here rather than in code:
--  * a unit is in exactly one state, and holds a lease exactly when it is `leased`;
--  * one result per (unit, lease): a retried post cannot record twice;
--  * one HR-case per (campaign, argument), however many replicas report it.
--
-- A significand can be 2^64 - 1 at precision 64, beyond bigint: `units.first` is
-- numeric(20,0), read and written as decimal text by the server.

CREATE TABLE campaigns (
    id              bigserial PRIMARY KEY,
    name            text        NOT NULL,
    function        text        NOT NULL,
    precision       integer     NOT NULL CHECK (precision BETWEEN 8 AND 64),
    min_bits        integer     NOT NULL CHECK (min_bits BETWEEN 1 AND 256),
    ranges          jsonb       NOT NULL,
    unit_bits       integer     NOT NULL CHECK (unit_bits BETWEEN 0 AND 62),
    replication     integer     NOT NULL DEFAULT 1 CHECK (replication BETWEEN 1 AND 16),
    priority        integer     NOT NULL DEFAULT 0,
    state           text        NOT NULL DEFAULT 'active'
                                CHECK (state IN ('active', 'paused', 'cancelled')),
    units_total     bigint      NOT NULL,
    arguments_total numeric     NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE enrollment_tokens (
    id          bigserial PRIMARY KEY,
    token_hash  bytea       NOT NULL UNIQUE,
    note        text,
    uses_left   integer     CHECK (uses_left >= 0),
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE workers (
    id                  bigserial PRIMARY KEY,
    name                text        NOT NULL,
    token_hash          bytea       NOT NULL UNIQUE,
    enrollment_token_id bigint      REFERENCES enrollment_tokens (id),
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_seen           timestamptz,
    -- Arguments per second, an exponential moving average over the worker's results.
    speed               double precision,
    units_done          bigint      NOT NULL DEFAULT 0
);

-- Fencing tokens grow across all leases, so a newer lease of a unit always holds a larger one.
CREATE SEQUENCE fencing_tokens;

CREATE TABLE leases (
    id            bigserial PRIMARY KEY,
    fencing_token bigint      NOT NULL UNIQUE DEFAULT nextval('fencing_tokens'),
    worker_id     bigint      NOT NULL REFERENCES workers (id),
    campaign_id   bigint      NOT NULL REFERENCES campaigns (id),
    -- The lease covers units seq in [first_seq, first_seq + unit_count) of its campaign.
    first_seq     integer     NOT NULL,
    unit_count    integer     NOT NULL CHECK (unit_count > 0),
    state         text        NOT NULL DEFAULT 'active'
                              CHECK (state IN ('active', 'finished', 'expired', 'released')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    ended_at      timestamptz
);

CREATE INDEX leases_active_expiry ON leases (expires_at) WHERE state = 'active';
CREATE INDEX leases_worker ON leases (worker_id);

CREATE TABLE units (
    id            bigserial PRIMARY KEY,
    campaign_id   bigint        NOT NULL REFERENCES campaigns (id),
    -- Position in the campaign: consecutive seq are consecutive arguments within a binade.
    seq           integer       NOT NULL,
    negative      boolean       NOT NULL,
    exponent      integer       NOT NULL,
    first         numeric(20,0) NOT NULL CHECK (first >= 0 AND first < 18446744073709551616),
    count         bigint        NOT NULL CHECK (count > 0),
    state         text          NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'leased', 'done', 'quarantined')),
    lease_id      bigint        REFERENCES leases (id),
    -- The fencing token of the last lease that held the unit.
    fence         bigint,
    -- Failures and expiries so far; at the limit the unit is quarantined.
    attempts      integer       NOT NULL DEFAULT 0,
    replicas_done integer       NOT NULL DEFAULT 0,
    done_at       timestamptz,
    UNIQUE (campaign_id, seq),
    CHECK ((state = 'leased') = (lease_id IS NOT NULL)),
    CHECK ((state = 'done') = (done_at IS NOT NULL))
);

CREATE INDEX units_pending ON units (campaign_id, seq) WHERE state = 'pending';
CREATE INDEX units_lease ON units (lease_id) WHERE lease_id IS NOT NULL;
CREATE INDEX units_done_at ON units (campaign_id, done_at) WHERE state = 'done';
CREATE INDEX units_quarantined ON units (campaign_id, seq) WHERE state = 'quarantined';

CREATE TABLE results (
    id              bigserial PRIMARY KEY,
    unit_id         bigint           NOT NULL REFERENCES units (id),
    lease_id        bigint           NOT NULL REFERENCES leases (id),
    worker_id       bigint           NOT NULL REFERENCES workers (id),
    fencing_token   bigint           NOT NULL,
    digest          text             NOT NULL,
    stats           jsonb            NOT NULL,
    exact_cases     jsonb            NOT NULL,
    elapsed_seconds double precision NOT NULL,
    hr_count        integer          NOT NULL,
    received_at     timestamptz      NOT NULL DEFAULT now(),
    UNIQUE (unit_id, lease_id)
);

CREATE INDEX results_unit_worker ON results (unit_id, worker_id);

CREATE TABLE hr_cases (
    id          bigserial PRIMARY KEY,
    campaign_id bigint           NOT NULL REFERENCES campaigns (id),
    unit_id     bigint           NOT NULL REFERENCES units (id),
    result_id   bigint           NOT NULL REFERENCES results (id),
    x           text             NOT NULL,
    bits        integer          NOT NULL,
    neg_log2_d  double precision NOT NULL,
    kind        text             NOT NULL CHECK (kind IN ('fp', 'mid')),
    rounded     text             NOT NULL,
    found_at    timestamptz      NOT NULL DEFAULT now(),
    UNIQUE (campaign_id, x)
);

CREATE INDEX hr_cases_hardest ON hr_cases (campaign_id, bits DESC, neg_log2_d DESC);
