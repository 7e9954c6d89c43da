-- pgfence from psql, through its SQL interface: a lease and a write fenced by its token, then a
-- fenced session lock on the same name and a write fenced by its (higher) token, then a write with
-- the lease's token, now stale, which the guard refuses.
--
--   psql -X -f examples/other-languages/invoice.sql "$DATABASE_URL"
--   (with DATABASE_URL unset, psql reads PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD)
--
-- Needs pgfence's schema (`pgfence migrate`). Any failure ends the script with an error: psql exits 3.
\set ON_ERROR_STOP 1
\set QUIET 1
-- Bounds every wait below (lock_fenced waits for the lock as long as this allows).
SET statement_timeout = '30s';
SET client_min_messages = warning;  -- no NOTICE for a table that exists already
CREATE FUNCTION pg_temp.fail(message text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '%', message;
END $$;

CREATE TABLE IF NOT EXISTS example_invoices (id int PRIMARY KEY, status text, fencing_token bigint);
INSERT INTO example_invoices (id, status) VALUES (42, 'open') ON CONFLICT (id) DO NOTHING;
-- The guarded write: false (0 rows) means a newer holder (a higher token) has written the row.
CREATE FUNCTION pg_temp.fenced_write(p_status text, p_token bigint) RETURNS boolean LANGUAGE sql AS $$
  WITH written AS (
    UPDATE example_invoices SET status = p_status, fencing_token = p_token
     WHERE id = 42 AND (fencing_token IS NULL OR fencing_token <= p_token)
    RETURNING 1)
  SELECT count(*) = 1 FROM written
$$;

SELECT pgfence.lock_key('invoice:42') AS key \gset
\echo 'key of invoice:42:' :key

-- 1. A lease: waits up to 10 s, held for at most 30 s unless renewed (renew_lease).
SELECT token IS NOT NULL AS granted, token AS lease_token
  FROM pgfence.lease(p_key => :key, p_ttl_ms => 30000, p_timeout_ms => 10000,
                     p_owner => 'invoice.sql', p_name => 'invoice:42') AS token \gset
\if :granted
  \echo 'lease: token' :lease_token
\else
  SELECT pg_temp.fail('lease: not granted within 10 s');
\endif
SELECT pg_temp.fenced_write('paid', :lease_token) AS applied \gset
\if :applied
  \echo 'lease: fenced write applied (invoice 42 paid)'
\else
  SELECT pgfence.release_lease(:key, :lease_token) AS released \gset
  SELECT pg_temp.fail('lease: fenced write refused: a newer holder wrote invoice 42');
\endif
SELECT pgfence.release_lease(:key, :lease_token) AS released \gset
\if :released
  \echo 'lease: released'
\else
  SELECT pg_temp.fail('lease: lost before its release (expired or taken over)');
\endif

-- 2. A fenced session lock of this connection (autocommit: held from here until unlock; on a
-- failure below, psql exits and the lock ends with its connection).
SELECT pgfence.lock_fenced(:key) AS lock_token \gset
\echo 'session lock: token' :lock_token
SELECT pg_temp.fenced_write('shipped', :lock_token) AS applied \gset
\if :applied
  \echo 'session lock: fenced write applied (invoice 42 shipped)'
\else
  SELECT pg_temp.fail('session lock: fenced write refused: a newer holder wrote invoice 42');
\endif

-- 3. A holder that paused past its lease writes with its old token: refused.
SELECT NOT pg_temp.fenced_write('cancelled', :lease_token) AS refused,
       (SELECT fencing_token FROM example_invoices WHERE id = 42) AS holds \gset
\if :refused
  \echo 'stale token' :lease_token': write refused (invoice 42 holds token' :holds')'
\else
  SELECT pg_temp.fail('stale token ' || :lease_token || ': write applied');
\endif

SELECT pgfence.unlock(:key) AS unlocked \gset
\if :unlocked
  \echo 'session lock: released'
\else
  SELECT pg_temp.fail('session lock: not held at unlock');
\endif
