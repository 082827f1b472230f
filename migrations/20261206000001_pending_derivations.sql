-- Base units' accepted results whose HR-cases the coordinator has yet to derive into the
-- campaign's derived binades. A result post only queues its result here (in its own
-- transaction); a background task derives and inserts the cases, then removes the row in one
-- transaction, so a crash at any point leaves the row to be done again. A campaign with a row
-- here is not complete: its list lacks those cases.
CREATE TABLE pending_derivations (
    result_id   bigint      PRIMARY KEY REFERENCES results (id),
    campaign_id bigint      NOT NULL REFERENCES campaigns (id),
    queued_at   timestamptz NOT NULL DEFAULT now(),
    -- The last failure (a derived case MPFR judged apart from its base case: a fault of the
    -- coordinator, never of a worker) and when; the row waits for the next process then.
    failure     text,
    failed_at   timestamptz
);

CREATE INDEX pending_derivations_campaign ON pending_derivations (campaign_id);
