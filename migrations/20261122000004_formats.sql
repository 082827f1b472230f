-- Campaigns in a named format (issue 14): results judged on the format's real grid, with
-- the arguments whose results overflow, underflow or hit a pole skipped and listed.

-- The named format (binary16, bfloat16, binary32, binary64, binary80); NULL for a bare
-- precision, whose exponent is unbounded (every campaign before this migration).
ALTER TABLE campaigns ADD COLUMN format text;

-- Runs of arguments not judged, as the server computed them for a unit (it recomputes what
-- the worker reports and refuses a result whose runs differ). `reason` is an open code and
-- `rule` its text for people, so new engine reasons need no new schema. Replicas of a unit
-- store the same runs once (the primary key).
CREATE TABLE skipped_runs (
    campaign_id bigint      NOT NULL REFERENCES campaigns (id),
    unit_id     bigint      NOT NULL REFERENCES units (id),
    result_id   bigint      NOT NULL REFERENCES results (id),
    first       text        NOT NULL,
    last        text        NOT NULL,
    count       bigint      NOT NULL CHECK (count > 0),
    reason      text        NOT NULL,
    rule        text        NOT NULL,
    found_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (campaign_id, first)
);

CREATE INDEX skipped_runs_unit ON skipped_runs (unit_id);
