-- Leases: table-backed locks with a TTL on the database clock. Re-applied by migrate() whenever
-- this file changes. Taking, renewing and releasing a lease are the functions below, called by the
-- Node API (src/lease/lease-sql.ts) and by the SQL interface (sql/interface.sql) alike.

-- The one rule of a lease's life: the time until which the lease holds its name (database clock), NULL
-- when it holds nothing. Until its expiry while it is not released; and in any case until its
-- at-least-for hold ends (held_until, set when it was taken or released with a minimum hold), however
-- its holder ends. Used by every statement that asks whether a lease is live (lease_live).
CREATE OR REPLACE FUNCTION pgfence.lease_live_until(l pgfence.leases) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT greatest(CASE WHEN l.released_at IS NULL THEN l.expires_at END, l.held_until)
$$;

-- Whether the lease l holds its name at p_at.
CREATE OR REPLACE FUNCTION pgfence.lease_live(l pgfence.leases, p_at timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(pgfence.lease_live_until(l) > p_at, false)
$$;

-- Whether a live lease holds p_key now. VOLATILE: its query takes a snapshot of its own (see
-- admit_session_lock).
CREATE OR REPLACE FUNCTION pgfence.lease_holds(p_key bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM FROM pgfence.leases l WHERE l.key = p_key AND pgfence.lease_live(l, clock_timestamp());
  RETURN FOUND;
END $$;

-- Takes the lease of p_key when it is free, released or expired (lease_live), with a new fencing
-- token, held at least p_min_hold_ms from now (held_until) however the holder ends. A busy lease is
-- reported with its owner and until when it holds the name, without writing anything, and never with
-- its token: the token is its holder's alone, the proof that renews and releases it.
DROP FUNCTION IF EXISTS pgfence.lease_acquire(bigint, text, text, bigint, jsonb);
CREATE OR REPLACE FUNCTION pgfence.lease_acquire(p_key bigint, p_name text, p_owner text, p_ttl_ms bigint, p_data jsonb,
  p_min_hold_ms bigint DEFAULT 0)
RETURNS TABLE (granted boolean, token bigint, owner text, acquired_at timestamptz, expires_at timestamptz, remaining_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  now_ts timestamptz := clock_timestamp();
  cur pgfence.leases;
  issued bigint;
BEGIN
  SELECT * INTO cur FROM pgfence.leases l WHERE l.key = p_key;
  IF FOUND AND pgfence.lease_live(cur, now_ts) THEN
    RETURN QUERY SELECT false, NULL::bigint, cur.owner, cur.acquired_at, pgfence.lease_live_until(cur),
      ceil(extract(epoch FROM pgfence.lease_live_until(cur) - now_ts) * 1000)::bigint;
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
         expires_at = now_ts + p_ttl_ms * interval '1 millisecond', released_at = NULL, data = p_data,
         held_until = CASE WHEN p_min_hold_ms > 0 THEN now_ts + p_min_hold_ms * interval '1 millisecond' END
   WHERE l.key = p_key AND NOT pgfence.lease_live(l, clock_timestamp())
  RETURNING l.token INTO issued;
  IF issued IS NULL THEN
    SELECT * INTO cur FROM pgfence.leases l WHERE l.key = p_key;
    RETURN QUERY SELECT false, NULL::bigint, cur.owner, cur.acquired_at, pgfence.lease_live_until(cur),
      ceil(extract(epoch FROM pgfence.lease_live_until(cur) - clock_timestamp()) * 1000)::bigint;
    RETURN;
  END IF;
  RETURN QUERY SELECT true, issued, p_owner, now_ts, now_ts + p_ttl_ms * interval '1 millisecond', p_ttl_ms;
END $$;

-- Extends the lease held with p_token by p_ttl_ms from now (database clock): the new expiry, or NULL
-- when it is no longer this token's; taken_over then says whether another holder has taken it since.
CREATE OR REPLACE FUNCTION pgfence.lease_renew(p_key bigint, p_token bigint, p_ttl_ms bigint)
RETURNS TABLE (expires_at timestamptz, taken_over boolean)
LANGUAGE plpgsql AS $$
DECLARE
  renewed timestamptz;
BEGIN
  UPDATE pgfence.leases l
     SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
   WHERE l.key = p_key AND l.token = p_token AND l.released_at IS NULL AND pgfence.lease_live(l, clock_timestamp())
  RETURNING l.expires_at INTO renewed;
  IF FOUND THEN
    RETURN QUERY SELECT renewed, false;
  ELSE
    RETURN QUERY SELECT NULL::timestamptz, EXISTS (SELECT FROM pgfence.leases l WHERE l.key = p_key AND l.token <> p_token);
  END IF;
END $$;

-- Releases the lease held with p_token; true when it was this token's and live. With p_min_hold_ms
-- (at-least-for, ShedLock's lockAtLeastFor) the hold is kept until acquired_at + p_min_hold_ms when
-- that is later than the hold it was taken with: nobody can take the name before then, so a job that
-- ran quickly is not run again by a node whose schedule fired later. Waiters of other sessions are
-- woken (notify_waiters) only by a release that frees the name now; a kept one wakes nobody.
CREATE OR REPLACE FUNCTION pgfence.lease_release(p_key bigint, p_token bigint, p_min_hold_ms bigint DEFAULT 0)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  now_ts constant timestamptz := clock_timestamp();
  freed boolean;
BEGIN
  UPDATE pgfence.leases l
     SET released_at = now_ts,
         held_until = CASE WHEN l.acquired_at + p_min_hold_ms * interval '1 millisecond' > now_ts
                           THEN greatest(l.held_until, l.acquired_at + p_min_hold_ms * interval '1 millisecond')
                           ELSE l.held_until END
   WHERE l.key = p_key AND l.token = p_token AND l.released_at IS NULL AND pgfence.lease_live(l, now_ts)
  RETURNING NOT pgfence.lease_live(l, now_ts) INTO freed;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  IF freed THEN
    PERFORM pgfence.notify_waiters(p_key);
  END IF;
  RETURN true;
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
  PERFORM FROM pgfence.leases l WHERE l.key = p_key AND pgfence.lease_live(l, clock_timestamp());
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
