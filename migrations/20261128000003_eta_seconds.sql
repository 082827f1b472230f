-- What the ETA needs besides the binades' measured seconds (`binade_tallies.seconds`): the
-- campaign's results' seconds at each snapshot, and when its work began.
--
-- * `campaign_snapshots.seconds_done`: the sum of `binade_tallies.seconds` over the campaign
--   when the snapshot was taken (the results' `elapsed_seconds` over their workers' slots), so
--   that the ETA can divide the time its binades have left by the seconds of work the farm did
--   per second since (NULL for snapshots older than this migration: the ETA then falls back to
--   the rate of work).
-- * `campaigns.started_at`: when the campaign's first lease was claimed. The pace of a
--   campaign younger than the ETA's window is measured from then, not from its creation (an
--   estimate or a queue may hold it unleased for minutes). Campaigns with leases already get
--   their creation time.

ALTER TABLE campaign_snapshots ADD COLUMN seconds_done double precision;
ALTER TABLE campaigns ADD COLUMN started_at timestamptz;
UPDATE campaigns c SET started_at = c.created_at
WHERE EXISTS (SELECT 1 FROM campaign_tallies t WHERE t.campaign_id = c.id
              AND t.units_leased + t.units_done + t.units_quarantined > 0);
