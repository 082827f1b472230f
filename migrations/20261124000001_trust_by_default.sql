-- Trust by default (issue 24): no volunteer's word stands alone, proof beats votes, one token
-- cannot hold a campaign.
--
-- * Enrollment tokens can be `trusted`: a lab's own machines, whose results settle a unit alone
--   and decide a dispute. Workers copy the flag at registration; results keep their poster's.
-- * Campaigns say `trust_all_workers` to let any one result settle a unit (a farm of machines
--   the operator controls). Campaigns created before this migration with replication 1 had
--   exactly that behaviour, so they keep it, and now say so.
-- * A result that omits an HR-case the server verified in its unit (another replica's, or a
--   known case loaded by the admin) is `refuted`: proven wrong whatever the vote.
-- * `units.proven`: some verified case lies in the unit (so a post must read them); without it
--   the hot path reads nothing more.
-- * Known cases (ringers): HR-cases loaded and verified by the server, secret from workers.

ALTER TABLE enrollment_tokens ADD COLUMN trusted boolean NOT NULL DEFAULT false;

ALTER TABLE workers
    ADD COLUMN trusted     boolean NOT NULL DEFAULT false,
    -- Results that omitted a verified case of their unit.
    ADD COLUMN refuted     bigint  NOT NULL DEFAULT 0,
    -- Leases given back with none of their units computed.
    ADD COLUMN leases_idle bigint  NOT NULL DEFAULT 0;

ALTER TABLE campaigns ADD COLUMN trust_all_workers boolean NOT NULL DEFAULT false;
UPDATE campaigns SET trust_all_workers = true WHERE replication = 1;

ALTER TABLE results ADD COLUMN by_trusted boolean NOT NULL DEFAULT false;
ALTER TABLE results DROP CONSTRAINT IF EXISTS results_verdict_check;
ALTER TABLE results ADD CONSTRAINT results_verdict_check
    CHECK (verdict IN ('pending', 'agreed', 'alone', 'outvoted', 'refuted'));

CREATE INDEX hr_cases_unit ON hr_cases (unit_id);

CREATE TABLE known_cases (
    campaign_id bigint           NOT NULL REFERENCES campaigns (id),
    unit_id     bigint           NOT NULL REFERENCES units (id),
    x           text             NOT NULL,
    bits        integer          NOT NULL,
    neg_log2_d  double precision NOT NULL,
    kind        text             NOT NULL CHECK (kind IN ('fp', 'mid')),
    rounded     text             NOT NULL,
    loaded_at   timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (campaign_id, x)
);
CREATE INDEX known_cases_unit ON known_cases (unit_id);

ALTER TABLE units ADD COLUMN proven boolean NOT NULL DEFAULT false;
UPDATE units SET proven = true WHERE id IN (SELECT unit_id FROM hr_cases);
