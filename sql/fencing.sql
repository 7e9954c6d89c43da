-- Fencing tokens: one counter per key, shared by every kind of exclusive grant (session locks,
-- transaction locks, leases). Re-applied by migrate() whenever this file changes.

-- The next token of a key. It never wraps: at the int64 maximum it raises instead. The caller's
-- statement or transaction commits it together with the grant it belongs to.
--
-- A token is drawn from pgfence.token_sequence (migrations/0004), which a rollback does not undo: a
-- token handed out in a transaction that then rolls back (the grant ends with it) is skipped, never
-- handed out again, so a paused holder of a rolled-back grant cannot pass the guard of the next
-- holder. The per-key row keeps the last committed token (a key's tokens still increase in grant
-- order: every issuer of a key holds the key). One limit the database imposes: a sequence's advance
-- reaches disk with the next WAL flush (any commit, or the WAL writer within wal_writer_delay), so a
-- server crash in that instant after a rolled-back issue can hand that number out again.
--
-- Tokens survive failover: a promotion starts a new timeline, and every token issued on timeline T
-- is at least (T - 1) << 48 (the timeline in the high bits). The first issue below that floor moves
-- the sequence up to it. A commit lost with the old primary (asynchronous replication) can set the
-- sequence and the stored counter back, but never past the new timeline's floor, so a token issued
-- after a promotion exceeds every token issued before it, lost ones included, as long as fewer than
-- 2^48 tokens are issued on one timeline. On timeline 1 tokens are plain sequence values; older
-- tokens (per-key counter values, migrations/0004) stay below every later one.
-- The timeline is the WAL insert timeline (pg_walfile_name of the current LSN), which a promoted server
-- switches to before it accepts writes; pg_control_checkpoint() would lag until the end-of-recovery
-- checkpoint.
CREATE OR REPLACE FUNCTION pgfence.next_token(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  timeline bigint := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint;
  floor_token bigint := (timeline - 1) << 48;
  drawn bigint;
  issued bigint;
BEGIN
  IF timeline > 32768 THEN  -- (32768 - 1) << 48 is the last floor below the int64 maximum
    RAISE EXCEPTION 'pgfence: the fencing tokens of key % are exhausted (timeline % is beyond 32768)', p_key, timeline
      USING ERRCODE = 'PGF02';
  END IF;
  drawn := nextval('pgfence.token_sequence');
  IF drawn < floor_token THEN
    -- The first issue on a new timeline: move the sequence up to the floor. Movers take turns (the
    -- lock conflicts only with itself, not with UPDATEs), so none sets the sequence back past a
    -- value another has drawn: each draws again once it has the lock.
    LOCK TABLE pgfence.fencing_tokens IN SHARE UPDATE EXCLUSIVE MODE;
    drawn := nextval('pgfence.token_sequence');
    IF drawn < floor_token THEN
      drawn := floor_token;
      PERFORM setval('pgfence.token_sequence', drawn);
    END IF;
  END IF;
  -- A token must be durable before anyone acts on it, whatever the server's default.
  PERFORM set_config('synchronous_commit', 'on', true);
  -- greatest(): the stored counter wins only for a key whose counter predates the sequence.
  -- Every token but a key's first is a plain UPDATE: no row-lock WAL record (an upsert writes one), and
  -- no exception block to catch the int64 maximum (that would be a subtransaction on every token).
  UPDATE pgfence.fencing_tokens AS t
     SET token = greatest(t.token + 1, drawn), updated_at = now()
   WHERE t.key = p_key AND t.token < 9223372036854775807
  RETURNING t.token INTO issued;
  IF NOT FOUND THEN
    INSERT INTO pgfence.fencing_tokens AS t (key, token)
    VALUES (p_key, drawn)
    ON CONFLICT (key) DO UPDATE
      SET token = greatest(t.token + 1, drawn), updated_at = now()
      WHERE t.token < 9223372036854775807
    RETURNING t.token INTO issued;
    IF NOT FOUND THEN  -- the row holds the int64 maximum
      RAISE EXCEPTION 'pgfence: the fencing tokens of key % are exhausted (int64 maximum reached)', p_key
        USING ERRCODE = 'PGF02';
    END IF;
  END IF;
  RETURN issued;
END $$;

-- Trigger function for user tables (see fencingColumnSql / addFencingColumn): refuses an UPDATE
-- that lowers the fencing column, whoever writes. TG_ARGV[0] names the column.
CREATE OR REPLACE FUNCTION pgfence.enforce_fencing_token() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  old_token bigint := (to_jsonb(OLD) ->> TG_ARGV[0])::bigint;
  new_token bigint := (to_jsonb(NEW) ->> TG_ARGV[0])::bigint;
BEGIN
  IF old_token IS NOT NULL AND (new_token IS NULL OR new_token < old_token) THEN
    RAISE EXCEPTION 'pgfence: stale fencing token % on %.% (the row has seen %)',
        coalesce(new_token::text, 'NULL'), TG_TABLE_SCHEMA, TG_TABLE_NAME, old_token
      USING ERRCODE = 'PGF01', HINT = 'another lock holder took over: stop writing with this token';
  END IF;
  RETURN NEW;
END $$;
