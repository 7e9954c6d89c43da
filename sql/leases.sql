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

-- A transaction lock of p_key (shared with p_shared) for the caller's transaction, kept only while no
-- live lease holds the name, since a name is one lock whatever its kind. A transaction lock cannot be
-- given back before its transaction ends, except by rolling back the subtransaction that took it: it
-- is taken inside the EXCEPTION block below, which rolls back (and so releases it) when a lease holds
-- the name and the caller only tries, or when the wait ends at its bound. The lease is read by a query of
-- its own after the grant: in READ COMMITTED its snapshot sees every lease committed before the grant, and
-- a lease committed after it could not be taken (lease_acquire's lock try fails). Under REPEATABLE READ or
-- SERIALIZABLE the transaction's snapshot may be older than the grant: a lease row changed since that
-- snapshot (by a commit, or by a transaction still running) raises 40001, retry the transaction. Costs one
-- subtransaction (no transaction id, nothing written) and one index lookup.
-- p_wait false: one try; 1 = granted, 0 = a lock holds the name, 8 = a live lease holds it.
-- p_wait true: waits, bounded by the caller's lock_timeout (0: no bound), for the lock, then, keeping it,
-- for a lease to end (a lease is not a lock PostgreSQL can queue on: looked at again every 50 ms at most,
-- or at its expiry), as lock_fenced does: holding the name's lock meanwhile, the waiter keeps its turn
-- (nobody takes the name past it; a lease's renewal and release need no lock). Returns 1, or raises 55P03
-- at the bound.
CREATE OR REPLACE FUNCTION pgfence.admit_xact_lock(p_key bigint, p_shared boolean, p_wait boolean)
RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  bound constant text := current_setting('lock_timeout');
  deadline timestamptz;
  lease_left_ms float8;
  changed_by xid;
BEGIN
  IF p_wait AND bound <> '0' THEN
    deadline := clock_timestamp() + bound::interval;
  END IF;
  BEGIN
    IF NOT p_wait THEN
      IF NOT (CASE WHEN p_shared THEN pg_try_advisory_xact_lock_shared(p_key) ELSE pg_try_advisory_xact_lock(p_key) END) THEN
        RETURN 0;
      END IF;
    ELSIF p_shared THEN
      PERFORM pg_advisory_xact_lock_shared(p_key);
    ELSE
      PERFORM pg_advisory_xact_lock(p_key);
    END IF;
    LOOP
      SELECT CASE WHEN pgfence.lease_live_until(l) > clock_timestamp()
                  THEN extract(epoch FROM pgfence.lease_live_until(l) - clock_timestamp()) * 1000 END, l.xmax
        INTO lease_left_ms, changed_by
        FROM pgfence.leases l WHERE l.key = p_key;
      IF FOUND AND changed_by <> '0'::xid AND current_setting('transaction_isolation') <> 'read committed'
         AND pgfence.xid_status(changed_by) <> 'aborted' THEN
        RAISE EXCEPTION 'pgfence: the lease of key % changed after this transaction''s snapshot: retry the transaction', p_key
          USING ERRCODE = '40001';
      END IF;
      IF lease_left_ms IS NULL THEN
        RETURN 1;
      END IF;
      IF NOT p_wait THEN
        RAISE EXCEPTION USING ERRCODE = 'PGF08';  -- a live lease: roll back, and the lock with it
      END IF;
      -- At the bound the error rolls the subtransaction back, and the lock with it.
      IF deadline IS NOT NULL AND clock_timestamp() >= deadline THEN
        RAISE EXCEPTION 'pgfence: a lease of key % held the name past lock_timeout (%)', p_key, bound USING ERRCODE = '55P03';
      END IF;
      PERFORM pg_sleep(least(0.05, greatest(0.001, lease_left_ms / 1000.0),
                             coalesce(greatest(0.001, extract(epoch FROM deadline - clock_timestamp())), 0.05)));
    END LOOP;
  EXCEPTION WHEN SQLSTATE 'PGF08' THEN
    RETURN 8;
  END;
END $$;

-- The status of a transaction by its 32-bit id, as seen in a row's xmax: 'committed', 'aborted' or
-- 'in progress' (pg_xact_status wants the 64-bit id: the epoch is taken from this snapshot's, the id
-- being within 2^31 of it).
CREATE OR REPLACE FUNCTION pgfence.xid_status(p_xid xid) RETURNS text
LANGUAGE sql VOLATILE AS $$
  SELECT pg_xact_status((CASE WHEN f.full_id > s.at + 2147483648 THEN f.full_id - 4294967296
                              WHEN f.full_id < s.at - 2147483648 THEN f.full_id + 4294967296
                              ELSE f.full_id END)::text::xid8)
  FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS at) AS s,
       LATERAL (SELECT (s.at & ~4294967295::bigint) | p_xid::text::bigint AS full_id) AS f
$$;

-- Waits in PostgreSQL's queue for the transaction lock of p_key, up to p_timeout_ms (NULL: no bound),
-- and keeps it for the caller's transaction: true, or false at the bound (holding nothing). The queue
-- is FIFO for every kind that waits in it (session locks, transaction locks, and lease waiters through
-- this), and a queued waiter makes every later try fail, so nobody barges: a lease waiter that finds
-- the name held by a lock comes in after the lockers queued before it, never starved by lockers that
-- hand the lock over among themselves. lock_timeout is as it was when this returns.
CREATE OR REPLACE FUNCTION pgfence.queue_for_key(p_key bigint, p_timeout_ms bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  bound constant text := current_setting('lock_timeout');
BEGIN
  BEGIN
    PERFORM set_config('lock_timeout', CASE WHEN p_timeout_ms IS NULL THEN '0' ELSE greatest(1, p_timeout_ms) || 'ms' END, true);
    PERFORM pg_advisory_xact_lock(p_key);
    PERFORM set_config('lock_timeout', bound, true);
    RETURN true;
  EXCEPTION WHEN lock_not_available THEN
    RETURN false;  -- the subtransaction's rollback put lock_timeout back
  END;
END $$;

-- lease_acquire after waiting (up to p_wait_ms) in PostgreSQL's queue for the key (queue_for_key), for a
-- lease waiter that found the name held by a lock. Run it in its own transaction (autocommit): the
-- queued lock is held until the lease row commits. Busy at the bound as a lock (NULL time left).
DROP FUNCTION IF EXISTS pgfence.lease_acquire_queued(bigint, text, text, bigint, jsonb, bigint);
CREATE OR REPLACE FUNCTION pgfence.lease_acquire_queued(p_key bigint, p_name text, p_owner text, p_ttl_ms bigint, p_data jsonb,
  p_min_hold_ms bigint, p_wait_ms bigint)
RETURNS TABLE (granted boolean, token bigint, owner text, acquired_at timestamptz, expires_at timestamptz, remaining_ms bigint)
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT pgfence.queue_for_key(p_key, p_wait_ms) THEN
    RETURN QUERY SELECT false, NULL::bigint, NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::bigint;
    RETURN;
  END IF;
  RETURN QUERY SELECT * FROM pgfence.lease_acquire(p_key, p_name, p_owner, p_ttl_ms, p_data, p_min_hold_ms);
END $$;
