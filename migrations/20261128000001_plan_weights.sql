-- Weights from the plan. A campaign's binades are weighed at creation by the cost the engine's
-- plan predicts for them (trivial regions, skipped runs, pieces, domains), so that leases are
-- sized by time before any estimate is posted. Such a weight has no measured seconds behind
-- it: `seconds_per_argument` is NULL for it, and `campaigns.seconds_per_work` stays NULL until
-- an estimate replaces the plan's weights.
ALTER TABLE campaign_costs ALTER COLUMN seconds_per_argument DROP NOT NULL;

-- The units a worker computes at once (its slots), as its last lease request said. A GPU runs
-- dozens of units side by side, each reporting its own elapsed time: a batch's elapsed times
-- add up to the slots times the wall they took, so a worker's speed is measured over their sum
-- divided by the slots (and never faster than the server's clock allows).
ALTER TABLE workers ADD COLUMN slots integer NOT NULL DEFAULT 1 CHECK (slots BETWEEN 1 AND 4096);
