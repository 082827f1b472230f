-- A foreign key from leases to campaigns makes every lease grant take a KEY SHARE lock on its
-- campaign's row: one hot row that all concurrent grants lock together (a MultiXact per grant).
-- Campaigns are never deleted, and a lease's campaign is always read from its units in the
-- same statement that creates it, so the key adds no safety that is not already there.
ALTER TABLE leases DROP CONSTRAINT leases_campaign_id_fkey;
