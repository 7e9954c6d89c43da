-- Fencing tokens: one counter per key, shared by every kind of exclusive grant (session locks,
-- transaction locks, leases). Re-applied by migrate() whenever this file changes.

-- The next token of a key: 1, 2, 3, ... It never wraps: at the int64 maximum it raises instead.
-- The caller's statement or transaction commits it together with the grant it belongs to.
CREATE OR REPLACE FUNCTION pgfence.next_token(p_key bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  issued bigint;
BEGIN
  -- A token must be durable before anyone acts on it, whatever the server's default.
  PERFORM set_config('synchronous_commit', 'on', true);
  INSERT INTO pgfence.fencing_tokens AS t (key, token)
  VALUES (p_key, 1)
  ON CONFLICT (key) DO UPDATE
    SET token = CASE WHEN t.token < 9223372036854775807 THEN t.token + 1 END,  -- NULL violates NOT NULL
        updated_at = now()
  RETURNING t.token INTO issued;
  RETURN issued;
EXCEPTION WHEN not_null_violation THEN
  RAISE EXCEPTION 'pgfence: the fencing tokens of key % are exhausted (int64 maximum reached)', p_key
    USING ERRCODE = 'PGF02';
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
