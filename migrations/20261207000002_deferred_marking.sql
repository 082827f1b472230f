-- A claim of a trusted worker marks only the units it takes back from expired or released
-- leases; its fresh units (those past its lane's cursor, which no other claim can reach) are
-- marked leased in a transaction of their own right after the claim commits. Until then the
-- lease is `deferred` and its fresh units read `pending` with no fence. Whatever acts on such
-- a lease next (that transaction, a result post, a release, the expiry, a revocation) locks
-- it and marks its units first, so every other path sees rows as if the claim had marked
-- them itself.
ALTER TABLE leases ADD COLUMN deferred boolean NOT NULL DEFAULT false;

-- The sweeper's catch-up: deferred leases left so by a coordinator that stopped.
CREATE INDEX leases_deferred ON leases (created_at) WHERE deferred;
