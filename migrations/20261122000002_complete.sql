-- A campaign whose units are all done is `complete` (issue 12), with the time it completed.
-- The server marks it in the transaction that records its last unit (and its sweeper catches
-- one that two concurrent transactions finished together); a done unit reopened (a quarantined
-- worker was part of its quorum, an admin requeue) makes the campaign active again.

ALTER TABLE campaigns DROP CONSTRAINT campaigns_state_check;
ALTER TABLE campaigns ADD CONSTRAINT campaigns_state_check
    CHECK (state IN ('active', 'paused', 'cancelled', 'complete'));
ALTER TABLE campaigns ADD COLUMN completed_at timestamptz;
ALTER TABLE campaigns ADD CONSTRAINT campaigns_completed_at_check
    CHECK ((state = 'complete') = (completed_at IS NOT NULL));

-- Whether a campaign has a unit not done: one index probe instead of a scan of its done units.
CREATE INDEX units_open ON units (campaign_id) WHERE state <> 'done';
