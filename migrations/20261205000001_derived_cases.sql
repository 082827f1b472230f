-- Campaigns that derive binades from a base region (the function's reduction) instead of
-- searching them: what they derive, and each derived HR-case's base case.

-- The kernels' DerivationRecord (reduction, derived significands per binade, runs for
-- people); NULL where nothing is derived.
ALTER TABLE campaigns ADD COLUMN derivation jsonb;

-- The base case a derived HR-case comes from; NULL for a case a search found. A derived case
-- is recorded with its base case's unit and result: removed with them, never apart.
ALTER TABLE hr_cases ADD COLUMN derived_from text;

-- Progress counts a campaign's derived cases apart.
CREATE INDEX hr_cases_derived ON hr_cases (campaign_id) WHERE derived_from IS NOT NULL;
