-- Weights from the plan. A campaign's binades are weighed at creation by the cost the engine's
-- plan predicts for them (trivial regions, skipped runs, pieces, domains), so that leases are
-- sized by time before any estimate is posted. Such a weight has no measured seconds behind
-- it: `seconds_per_argument` is NULL for it, and `campaigns.seconds_per_work` stays NULL until
-- an estimate replaces the plan's weights.
ALTER TABLE campaign_costs ALTER COLUMN seconds_per_argument DROP NOT NULL;
