-- Leases: table-backed locks with a TTL on the database clock. Re-applied by migrate() whenever
-- this file changes. Renewal and release are plain statements (src/lease/lease-sql.ts).

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
