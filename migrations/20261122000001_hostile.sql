-- Defences against hostile volunteers (issue 13).
--
-- `unit_failures`: who reported which unit as failed. A worker adds at most one attempt to a
-- unit however often it reports it, and quarantining the worker takes its reports back.
CREATE TABLE unit_failures (
    unit_id     bigint      NOT NULL REFERENCES units (id),
    worker_id   bigint      NOT NULL REFERENCES workers (id),
    reported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (unit_id, worker_id)
);
CREATE INDEX unit_failures_worker ON unit_failures (worker_id);

ALTER TABLE workers
    -- Units the worker reported as failed (each report counts, repeated or not).
    ADD COLUMN units_failed   bigint NOT NULL DEFAULT 0,
    -- When its last result was recorded: the server's own clock bounds its speed.
    ADD COLUMN last_result_at timestamptz,
    -- A revoked worker's token no longer authenticates.
    ADD COLUMN revoked_at     timestamptz;

ALTER TABLE enrollment_tokens ADD COLUMN revoked_at timestamptz;
CREATE INDEX workers_enrollment ON workers (enrollment_token_id);
