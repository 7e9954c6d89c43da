-- pgfence's SQL interface: the functions other languages (psql, Python, Go, ...) call to take the
-- same leases, fenced locks and tokens as the Node API. PUBLIC and versioned: the functions below
-- marked "public" keep their names, parameters and results within an interface version
-- (pgfence.interface_version()); a change to any of them is a new version, announced in the README.
-- Everything named mm3_* is internal. Re-applied by migrate() whenever this file changes.
--
-- Built on the same definitions the Node API runs (lease_acquire, admit_session_lock, admit_xact_lock,
-- next_token): one table of leases, one token counter per key, so Node and SQL holders exclude each other.

-- public: the interface version. Bumped only by a change to a public function.
CREATE OR REPLACE FUNCTION pgfence.interface_version() RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 2 $$;

-- ---- keys: MurmurHash3_x64_128, h1, seed 0 (DESIGN.md "Key derivation") ----
-- int8 arithmetic raises on overflow, so products and sums are taken in numeric and wrapped to
-- 64 bits; shifts and xor are bitwise on int8 already.

CREATE OR REPLACE FUNCTION pgfence.mm3_wrap(n numeric) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  m numeric := mod(mod(n, 18446744073709551616) + 18446744073709551616, 18446744073709551616);
BEGIN
  IF m >= 9223372036854775808 THEN m := m - 18446744073709551616; END IF;
  RETURN m::bigint;
END $$;

-- Rotate left by r (1..63): the right shift is arithmetic on int8, so its sign bits are masked off.
CREATE OR REPLACE FUNCTION pgfence.mm3_rotl(x bigint, r int) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT (x << r) | ((x >> (64 - r)) & ((1::int8 << r) - 1))
$$;

CREATE OR REPLACE FUNCTION pgfence.mm3_fmix(k bigint) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  k := k # ((k >> 33) & 2147483647);
  k := pgfence.mm3_wrap(k::numeric * -49064778989728563);
  k := k # ((k >> 33) & 2147483647);
  k := pgfence.mm3_wrap(k::numeric * -4265267296055464877);
  k := k # ((k >> 33) & 2147483647);
  RETURN k;
END $$;

-- h1 of MurmurHash3_x64_128(bytes, seed 0), as a signed int64.
CREATE OR REPLACE FUNCTION pgfence.mm3_h1(b bytea) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  c1 constant numeric := -8663945395140668459;  -- 0x87c37b91114253d5
  c2 constant numeric := 5545529020109919103;   -- 0x4cf5ad432745937f
  len constant int := length(b);
  nblocks constant int := len / 16;
  h1 bigint := 0;
  h2 bigint := 0;
  k1 bigint;
  k2 bigint;
  i int;
  j int;
  tail int;
BEGIN
  FOR i IN 0 .. nblocks - 1 LOOP
    k1 := 0;
    k2 := 0;
    FOR j IN 0 .. 7 LOOP
      k1 := k1 | (get_byte(b, i * 16 + j)::int8 << (8 * j));
      k2 := k2 | (get_byte(b, i * 16 + 8 + j)::int8 << (8 * j));
    END LOOP;
    k1 := pgfence.mm3_wrap(pgfence.mm3_rotl(pgfence.mm3_wrap(k1 * c1), 31) * c2);
    h1 := h1 # k1;
    h1 := pgfence.mm3_wrap(pgfence.mm3_rotl(h1, 27)::numeric + h2);
    h1 := pgfence.mm3_wrap(h1::numeric * 5 + 1390208809);  -- 0x52dce729
    k2 := pgfence.mm3_wrap(pgfence.mm3_rotl(pgfence.mm3_wrap(k2 * c2), 33) * c1);
    h2 := h2 # k2;
    h2 := pgfence.mm3_wrap(pgfence.mm3_rotl(h2, 31)::numeric + h1);
    h2 := pgfence.mm3_wrap(h2::numeric * 5 + 944331445);  -- 0x38495ab5
  END LOOP;
  tail := len - nblocks * 16;
  k1 := 0;
  k2 := 0;
  FOR j IN 0 .. tail - 1 LOOP
    IF j < 8 THEN
      k1 := k1 | (get_byte(b, nblocks * 16 + j)::int8 << (8 * j));
    ELSE
      k2 := k2 | (get_byte(b, nblocks * 16 + j)::int8 << (8 * (j - 8)));
    END IF;
  END LOOP;
  IF tail > 8 THEN
    h2 := h2 # pgfence.mm3_wrap(pgfence.mm3_rotl(pgfence.mm3_wrap(k2 * c2), 33) * c1);
  END IF;
  IF tail > 0 THEN
    h1 := h1 # pgfence.mm3_wrap(pgfence.mm3_rotl(pgfence.mm3_wrap(k1 * c1), 31) * c2);
  END IF;
  h1 := h1 # len;
  h2 := h2 # len;
  h1 := pgfence.mm3_wrap(h1::numeric + h2);
  h2 := pgfence.mm3_wrap(h2::numeric + h1);
  h1 := pgfence.mm3_fmix(h1);
  h2 := pgfence.mm3_fmix(h2);
  h1 := pgfence.mm3_wrap(h1::numeric + h2);
  RETURN h1;
END $$;

-- public: the key of a lock name, exactly as the Node API computes it (lockKey / createLocker's
-- namespace): UTF-8(name), or UTF-8(namespace) || 0x00 || UTF-8(name). Names are refused as Node
-- refuses them: empty, or longer than 1024 UTF-8 bytes (text cannot hold NUL). Needs a UTF8 database.
CREATE OR REPLACE FUNCTION pgfence.lock_key(p_name text, p_namespace text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  PERFORM pgfence.check_lock_name('name', p_name);
  IF p_namespace IS NULL THEN
    RETURN pgfence.mm3_h1(convert_to(p_name, 'UTF8'));
  END IF;
  PERFORM pgfence.check_lock_name('namespace', p_namespace);
  RETURN pgfence.mm3_h1(convert_to(p_namespace, 'UTF8') || '\x00'::bytea || convert_to(p_name, 'UTF8'));
END $$;

-- ---- leases ----
-- The rules are the Node API's own functions (sql/leases.sql: lease_acquire, lease_renew,
-- lease_release, lease_live_until); the public functions check their arguments and call them.

-- public: one try at the lease of p_key (lease_acquire, as the Node API's tryLease). granted and the
-- fencing token; when busy, token is NULL (the token is its holder's alone: it renews and releases the
-- lease), with the holder's owner, until when the name is held and the time left (NULL when a lock
-- holds the name: nobody knows for how long). p_min_hold_ms keeps the lease at least that long from
-- now (minHoldMs, ShedLock's lockAtLeastFor), whether it is released early or its holder dies.
-- p_name is shown by inspect() and `pgfence status`; p_owner defaults to
-- "sql:<user>@<client address>:<backend pid>". Autocommit, or commit at once: the lease is taken
-- (and its token durable) when the transaction commits.
DROP FUNCTION IF EXISTS pgfence.try_lease(bigint, bigint, text, text, jsonb);
CREATE OR REPLACE FUNCTION pgfence.try_lease(p_key bigint, p_ttl_ms bigint, p_owner text DEFAULT NULL,
  p_name text DEFAULT NULL, p_data jsonb DEFAULT NULL, p_min_hold_ms bigint DEFAULT 0)
RETURNS TABLE (granted boolean, token bigint, owner text, expires_at timestamptz, remaining_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  given_owner constant text := coalesce(p_owner, 'sql:' || current_user || '@' || coalesce(host(inet_client_addr()), 'local') || ':' || pg_backend_pid());
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  PERFORM pgfence.check_duration_ms('ttl_ms', p_ttl_ms, 100);
  PERFORM pgfence.check_owner(given_owner);
  IF p_name IS NOT NULL THEN
    PERFORM pgfence.check_lock_name('name', p_name);
  END IF;
  PERFORM pgfence.check_duration_ms('min_hold_ms', p_min_hold_ms, 0);
  RETURN QUERY
  SELECT a.granted, a.token, a.owner, a.expires_at, a.remaining_ms
  FROM pgfence.lease_acquire(p_key, p_name, given_owner, p_ttl_ms, p_data, p_min_hold_ms) AS a;
END $$;

-- public: waits for the lease of p_key up to p_timeout_ms (NULL: no bound). While a lease holds it, it
-- sleeps until the holder's expiry or at most 50 ms between tries (a release by another session is
-- seen at the next try); while a lock holds it, it waits in PostgreSQL's queue (queue_for_key).
-- Returns the token, or NULL at the timeout. Call it in autocommit: the lease and its token commit
-- with the statement.
DROP FUNCTION IF EXISTS pgfence.lease(bigint, bigint, bigint, text, text, jsonb);
CREATE OR REPLACE FUNCTION pgfence.lease(p_key bigint, p_ttl_ms bigint, p_timeout_ms bigint DEFAULT NULL,
  p_owner text DEFAULT NULL, p_name text DEFAULT NULL, p_data jsonb DEFAULT NULL, p_min_hold_ms bigint DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  deadline timestamptz := clock_timestamp() + coalesce(p_timeout_ms, 0) * interval '1 millisecond';
  r record;
BEGIN
  IF p_timeout_ms IS NOT NULL THEN  -- NULL: no bound
    PERFORM pgfence.check_duration_ms('timeout_ms', p_timeout_ms, 0);
  END IF;
  LOOP
    SELECT * INTO r FROM pgfence.try_lease(p_key, p_ttl_ms, p_owner, p_name, p_data, p_min_hold_ms);
    IF r.granted THEN
      RETURN r.token;
    END IF;
    IF p_timeout_ms IS NOT NULL AND clock_timestamp() >= deadline THEN
      RETURN NULL;
    END IF;
    IF r.remaining_ms IS NULL THEN
      -- A lock holds the name: wait in PostgreSQL's queue for it (FIFO with the lockers), then try again
      -- holding it (queue_for_key). Lockers handing the lock over among themselves never starve this.
      PERFORM pgfence.queue_for_key(p_key, CASE WHEN p_timeout_ms IS NOT NULL
        THEN greatest(1, ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000))::bigint END);
      CONTINUE;
    END IF;
    PERFORM pg_sleep(least(0.05, greatest(0.001, coalesce(r.remaining_ms, 50) / 1000.0),
                           CASE WHEN p_timeout_ms IS NULL THEN 0.05
                                ELSE greatest(0.001, extract(epoch FROM deadline - clock_timestamp())) END));
  END LOOP;
END $$;

-- public: extends the lease by p_ttl_ms from now (database clock). Returns the new expiry, or NULL
-- when the lease is no longer this token's (expired, released or taken over): stop working then.
CREATE OR REPLACE FUNCTION pgfence.renew_lease(p_key bigint, p_token bigint, p_ttl_ms bigint) RETURNS timestamptz
LANGUAGE plpgsql AS $$
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  PERFORM pgfence.check_token(p_token);
  PERFORM pgfence.check_duration_ms('ttl_ms', p_ttl_ms, 100);
  RETURN (SELECT r.expires_at FROM pgfence.lease_renew(p_key, p_token, p_ttl_ms) AS r);
END $$;

-- internal: wakes the waiters other sessions announced for p_key (their marker lock, the int4 pair of
-- the key, is held): 1 = none waits, 3 = notified. The Node API's notifyIfWaiters
-- (src/wait/marker-sql.ts) writes the same expression into its statements;
-- test/sql-lease-rules.test.ts holds the two texts equal.
DROP FUNCTION IF EXISTS pgfence.notify_waiters(bigint);
CREATE OR REPLACE FUNCTION pgfence.notify_waiters(p_key bigint) RETURNS int
LANGUAGE sql VOLATILE AS $$
SELECT CASE WHEN pg_try_advisory_lock((p_key >> 32)::int4, ((p_key & 4294967295) - ((p_key & 2147483648) << 1))::int4) AND pg_advisory_unlock((p_key >> 32)::int4, ((p_key & 4294967295) - ((p_key & 2147483648) << 1))::int4) THEN 1
    ELSE 3 + (pg_notify('pgfence_release', p_key::text) IS NULL)::int END
$$;

-- public: releases the lease held with p_token (lease_release); true when it was this token's and
-- live. With p_min_hold_ms (at-least-for, ShedLock's lockAtLeastFor) the lease is kept until
-- acquired_at + p_min_hold_ms on the database clock when that is still ahead (as try_lease's
-- p_min_hold_ms, which also outlives a holder that never releases): nobody can take it before then.
-- Waiters of other sessions are woken (NOTIFY) only by a release that frees the lease now.
CREATE OR REPLACE FUNCTION pgfence.release_lease(p_key bigint, p_token bigint, p_min_hold_ms bigint DEFAULT 0)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  PERFORM pgfence.check_token(p_token);
  PERFORM pgfence.check_duration_ms('min_hold_ms', p_min_hold_ms, 0);
  RETURN pgfence.lease_release(p_key, p_token, p_min_hold_ms);
END $$;

-- ---- fenced advisory locks ----
-- Session locks are PostgreSQL advisory locks on the key, guarded as the Node API guards them: a grant
-- gives way to a live lease of the same key (lease_holds, read after the grant). Each exclusive grant
-- issues the next fencing token of the key (next_token), the same counter as leases and Node locks.
-- The lock is taken as a transaction lock and becomes a session lock at COMMIT
-- (sql/interface-commit.sql): an error, a cancel or a ROLLBACK leaves nothing held, and the token
-- rolled back with it is never held by anyone. Inside a transaction block the session lock therefore
-- starts at COMMIT (the transaction lock holds the name until then).

-- public: one try at the exclusive session lock of p_key; the token, or NULL when busy.
CREATE OR REPLACE FUNCTION pgfence.try_lock_fenced(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  -- The lease is looked at before the try too: a busy answer then takes nothing that would stay
  -- until the end of the caller's transaction.
  IF NOT pgfence.lease_holds(p_key) AND pg_try_advisory_xact_lock(p_key) AND NOT pgfence.lease_holds(p_key) THEN
    RETURN pgfence.next_session_lock_token(p_key);
  END IF;
  RETURN NULL;
END $$;

-- public: waits for the exclusive session lock of p_key (bound the wait with SET lock_timeout /
-- statement_timeout), then issues its token. While a lease holds the name it keeps the name's lock
-- and polls the lease (at most 50 ms between looks): a lease is not a lock PostgreSQL can queue on.
CREATE OR REPLACE FUNCTION pgfence.lock_fenced(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  left_s float8;
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  PERFORM pg_advisory_xact_lock(p_key);
  WHILE pgfence.lease_holds(p_key) LOOP
    SELECT extract(epoch FROM pgfence.lease_live_until(l) - clock_timestamp()) INTO left_s FROM pgfence.leases l WHERE l.key = p_key;
    PERFORM pg_sleep(least(0.05, greatest(0.001, coalesce(left_s, 0.05))));
  END LOOP;
  RETURN pgfence.next_session_lock_token(p_key);
END $$;

DROP FUNCTION IF EXISTS pgfence.holds_session_lock(bigint);

-- public: releases the session lock of p_key taken by (try_)lock_fenced, waking waiters of other
-- sessions (Node lockers) as the Node API's unlock does. false when this session did not hold it.
CREATE OR REPLACE FUNCTION pgfence.unlock(p_key bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  -- A lock this transaction took is a transaction lock until COMMIT: unlocking it cancels its
  -- conversion (it ends with the transaction).
  IF NOT (pgfence.cancel_session_lock_at_commit(p_key) OR pg_advisory_unlock(p_key)) THEN
    RETURN false;
  END IF;
  -- No synchronous_commit change here (the Node API's own unlock makes one): this may run inside the
  -- caller's transaction, whose durability is the caller's.
  PERFORM pgfence.notify_waiters(p_key);
  RETURN true;
END $$;

-- public: the exclusive transaction lock of p_key (held until the transaction ends) and its token,
-- which commits with the transaction. Waits, also while a live lease holds the name (admit_xact_lock);
-- bound it with SET LOCAL lock_timeout.
CREATE OR REPLACE FUNCTION pgfence.xact_lock_fenced(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  PERFORM pgfence.admit_xact_lock(p_key, false, true);
  RETURN pgfence.next_xact_lock_token(p_key);
END $$;

-- public: one try at the exclusive transaction lock of p_key; its token, or NULL when busy (a lock,
-- or a live lease of the name: admit_xact_lock).
CREATE OR REPLACE FUNCTION pgfence.try_xact_lock_fenced(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  IF p_key IS NULL THEN
    PERFORM pgfence.null_argument('key');
  END IF;
  IF pgfence.admit_xact_lock(p_key, false, false) = 1 THEN
    RETURN pgfence.next_xact_lock_token(p_key);
  END IF;
  RETURN NULL;
END $$;
