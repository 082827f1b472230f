-- The engine version that computed each result (issue 26's engine changes moved the counters a
-- result claims): results are compared only within one version. Results recorded before the
-- column existed are version 0, as are those of workers that do not say.
ALTER TABLE results ADD COLUMN engine integer NOT NULL DEFAULT 0;
