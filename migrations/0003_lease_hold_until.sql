-- At-least-for holds (minHoldMs, the SQL interface's min_hold_ms, `pgfence run --at-least`) are
-- recorded when the lease is taken, so that the hold lasts however the holder ends: released early,
-- paused, or dead without a release. A lease holds its name until its expiry while it is not
-- released, and in any case until held_until (pgfence.lease_live_until, sql/leases.sql).
ALTER TABLE pgfence.leases ADD COLUMN held_until timestamptz;
