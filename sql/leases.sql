-- Leases: table-backed locks with a TTL on the database clock. Re-applied by migrate() whenever
-- this file changes. Renewal and release are plain statements (src/lease/lease-sql.ts).

-- The one rule of a lease's life: the time until which the lease holds its name (database clock), NULL
-- when it holds nothing. Used by every statement that asks whether a lease is live.
CREATE OR REPLACE FUNCTION pgfence.lease_live_until(l pgfence.leases) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN l.released_at IS NULL THEN l.expires_at END
$$;

-- Whether a live lease holds p_key now. VOLATILE: its query takes a snapshot of its own (see
-- admit_session_lock).
CREATE OR REPLACE FUNCTION pgfence.lease_holds(p_key bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM FROM pgfence.leases l WHERE l.key = p_key AND pgfence.lease_live_until(l) > clock_timestamp();
  RETURN FOUND;
END $$;

-- Takes the lease of p_key when it is free, released or expired, with a new fencing token.
-- A busy lease is reported (with its holder and time left) without writing anything.
CREATE OR REPLACE FUNCTION pgfence.lease_acquire(p_key bigint, p_name text, p_owner text, p_ttl_ms bigint, p_data jsonb)
RETURNS TABLE (granted boolean, token bigint, owner text, acquired_at timestamptz, expires_at timestamptz, remaining_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  now_ts timestamptz := clock_timestamp();
  cur pgfence.leases;
  issued bigint;
BEGIN
  SELECT * INTO cur FROM pgfence.leases l WHERE l.key = p_key;
  IF FOUND AND cur.released_at IS NULL AND cur.expires_at > now_ts THEN
    RETURN QUERY SELECT false, cur.token, cur.owner, cur.acquired_at, cur.expires_at,
      ceil(extract(epoch FROM cur.expires_at - now_ts) * 1000)::bigint;
    RETURN;
  END IF;
  -- A name is one lock whatever its kind: a session advisory lock (either mode) or a transaction lock
  -- on the key makes the lease busy, for as long as nobody knows (NULL time left). Held until this
  -- transaction commits, so that a session lock granted later sees the lease (admit_session_lock).
  IF NOT pg_try_advisory_xact_lock(p_key) THEN
    RETURN QUERY SELECT false, NULL::bigint, NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::bigint;
    RETURN;
  END IF;
  IF NOT FOUND THEN
    -- A placeholder row to take over: rows are never deleted, so tokens never restart.
    INSERT INTO pgfence.leases (key, name, owner, token, acquired_at, renewed_at, expires_at, released_at)
    VALUES (p_key, p_name, '', 0, now_ts, now_ts, now_ts, now_ts)
    ON CONFLICT (key) DO NOTHING;
  END IF;
  -- Take it over only if it is still free when the row is locked (a concurrent taker re-checks this
  -- condition after waiting); the token is issued only for the row that is taken.
  now_ts := clock_timestamp();
  UPDATE pgfence.leases l
     SET name = p_name, owner = p_owner, token = pgfence.next_token(p_key),
         acquired_at = now_ts, renewed_at = now_ts,
         expires_at = now_ts + p_ttl_ms * interval '1 millisecond', released_at = NULL, data = p_data
   WHERE l.key = p_key AND (l.released_at IS NOT NULL OR l.expires_at <= clock_timestamp())
  RETURNING l.token INTO issued;
  IF issued IS NULL THEN
    SELECT * INTO cur FROM pgfence.leases l WHERE l.key = p_key;
    RETURN QUERY SELECT false, cur.token, cur.owner, cur.acquired_at, cur.expires_at,
      ceil(extract(epoch FROM cur.expires_at - clock_timestamp()) * 1000)::bigint;
    RETURN;
  END IF;
  RETURN QUERY SELECT true, issued, p_owner, now_ts, now_ts + p_ttl_ms * interval '1 millisecond', p_ttl_ms;
END $$;

-- A session advisory lock of p_key was just tried (p_granted: it was granted, in mode p_shared): it
-- gives way to a live lease of the same key, since a name is one lock whatever its kind. Returns 1
-- (kept), 0 (not granted) or 8 (a lease holds the name: the lock was given back).
-- VOLATILE and plpgsql on purpose: the lease is read by a query of its own, whose snapshot is taken
-- after the grant (pinned sessions run in READ COMMITTED). A lease committed before the grant is
-- therefore seen, and one that commits after it could not be taken (lease_acquire's lock try fails).
CREATE OR REPLACE FUNCTION pgfence.admit_session_lock(p_key bigint, p_shared boolean, p_granted boolean)
RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF NOT p_granted THEN
    RETURN 0;
  END IF;
  -- PERFORM, not IF EXISTS (...): a plain query, which costs about half as much as a subquery expression.
  PERFORM FROM pgfence.leases l WHERE l.key = p_key AND l.released_at IS NULL AND l.expires_at > clock_timestamp();
  IF FOUND THEN
    IF p_shared THEN
      PERFORM pg_advisory_unlock_shared(p_key);
    ELSE
      PERFORM pg_advisory_unlock(p_key);
    END IF;
    RETURN 8;
  END IF;
  RETURN 1;
END $$;
