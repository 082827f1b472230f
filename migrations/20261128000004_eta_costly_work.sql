-- The ETA counts work over the arguments that cost time, not over results' seconds.
--
-- * `campaign_snapshots.costly_done`: the campaign's done work when the snapshot was taken,
--   each unit counting for at most one unit's arguments (a block the plan collapsed, many
--   units' worth settled without a search, is one unit) and each binade's costly arguments
--   weighing what all its arguments weigh (`domain::eta::costly_work`). The ETA divides the
--   costly work left by the costly work done per second since (NULL for snapshots older than
--   this migration: the ETA then falls back to the rate of all work).
-- * `campaign_snapshots.seconds_done` goes: results' seconds are a unit's share of a GPU
--   running many side by side, not its cost, and no ETA reads them any more (each binade's
--   seconds stay in `binade_tallies.seconds`, for the times per binade the dashboard shows).

ALTER TABLE campaign_snapshots ADD COLUMN costly_done double precision;
ALTER TABLE campaign_snapshots DROP COLUMN seconds_done;
