-- What the SQL interface's locks do at COMMIT (sql/interface.sql). Re-applied by migrate() whenever
-- this file changes.
--
-- A fenced session lock of SQL (try_lock_fenced, lock_fenced) is first a transaction lock: its token
-- is written in the same transaction, and a lock PostgreSQL gives back on any error or ROLLBACK goes
-- with it, so a failed call holds nothing and a rolled-back token is never held by anyone. At COMMIT
-- the constraint trigger below turns it into a session lock on the same backend (immediate: this
-- backend already holds the key). A transaction lock of SQL (xact_lock_fenced, try_xact_lock_fenced)
-- outside a transaction block would end with its own statement: the same trigger refuses that COMMIT.
--
-- Both are marked in settings local to the transaction (rolled back with a savepoint, like the token),
-- read by the trigger's WHEN: token writes of the Node API queue nothing.

-- internal: the token of a fenced session lock of SQL, whose transaction lock (held) becomes a session
-- lock at COMMIT. Also for a key this session holds already: one more count, one more unlock.
CREATE OR REPLACE FUNCTION pgfence.next_session_lock_token(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('pgfence.session_locks_at_commit',
    coalesce(current_setting('pgfence.session_locks_at_commit', true), '') || ' ' || p_key || ' ', true);
  RETURN pgfence.next_token(p_key);
END $$;

-- internal: gives up the session lock of p_key that this transaction would take at COMMIT (an unlock
-- before COMMIT); false when none is pending.
CREATE OR REPLACE FUNCTION pgfence.cancel_session_lock_at_commit(p_key bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  pending constant text := coalesce(current_setting('pgfence.session_locks_at_commit', true), '');
  entry constant text := ' ' || p_key || ' ';
  at constant int := position(entry IN pending);
BEGIN
  IF at = 0 THEN
    RETURN false;
  END IF;
  PERFORM set_config('pgfence.session_locks_at_commit', overlay(pending PLACING '' FROM at FOR length(entry)), true);
  RETURN true;
END $$;

-- internal: the token of a transaction lock of SQL. Notes the statement that took it: a COMMIT
-- within that same statement means there was no transaction block (tokens_at_commit raises).
CREATE OR REPLACE FUNCTION pgfence.next_xact_lock_token(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('pgfence.xact_lock_statement', pgfence.statement_mark(), true);
  RETURN pgfence.next_token(p_key);
END $$;

-- internal: the current statement, as a mark: the time the client's command message arrived
-- (statement_timestamp(), to the microsecond). A COMMIT sent as its own statement has a later mark;
-- the simple protocol's one-statement transaction commits within its statement, and so does the
-- extended protocol's (its Sync arrives without a statement of its own).
CREATE OR REPLACE FUNCTION pgfence.statement_mark() RETURNS text
LANGUAGE sql STABLE AS $$ SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::bigint::text $$;

CREATE OR REPLACE FUNCTION pgfence.tokens_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('pgfence.xact_lock_statement', true) = pgfence.statement_mark() THEN
    RAISE EXCEPTION 'pgfence: xact_lock_fenced / try_xact_lock_fenced need a transaction block (BEGIN ... COMMIT): '
                    'outside one the lock ends with the statement that took it'
      USING ERRCODE = '25P01',
            HINT = 'BEGIN, take the lock, do the work, then COMMIT as a statement of its own; a session lock (lock_fenced) outlives statements';
  END IF;
  IF pgfence.cancel_session_lock_at_commit(NEW.key) THEN
    PERFORM pg_advisory_lock(NEW.key);
  END IF;
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS tokens_at_commit ON pgfence.fencing_tokens;
CREATE CONSTRAINT TRIGGER tokens_at_commit
  AFTER INSERT OR UPDATE ON pgfence.fencing_tokens
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  WHEN (coalesce(current_setting('pgfence.session_locks_at_commit', true), '') <> ''
        OR coalesce(current_setting('pgfence.xact_lock_statement', true), '') <> '')
  EXECUTE FUNCTION pgfence.tokens_at_commit();
