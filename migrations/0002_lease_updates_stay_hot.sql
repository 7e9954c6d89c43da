-- Every lease grant and renewal rewrites expires_at: an index on it made each of those updates a
-- non-HOT update (new index entries, more WAL per durable commit). Nothing looks leases up by expiry.
DROP INDEX IF EXISTS pgfence.leases_expires_at_idx;
