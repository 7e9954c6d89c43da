-- Arguments of the SQL interface (sql/interface.sql), refused as the Node API refuses them, before
-- anything is written: NULL is SQLSTATE 22004, a value out of bounds 22023, and the message names the
-- argument. The bounds are the Node API's (src/options.ts MAX_DURATION_MS, src/lease/lease-options.ts,
-- src/keys.ts); test/sql-arguments.test.ts runs the same values through both and proves they agree.
-- Re-applied by migrate() whenever this file changes.

-- Raises 22004 for a NULL argument. Called only on the error path: the checks themselves are inline.
CREATE OR REPLACE FUNCTION pgfence.null_argument(p_argument text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RAISE EXCEPTION 'pgfence: % must not be NULL', p_argument USING ERRCODE = '22004';
END $$;

-- Raises 22023: p_argument followed by what is wrong with it.
CREATE OR REPLACE FUNCTION pgfence.invalid_argument(p_argument text, p_problem text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RAISE EXCEPTION 'pgfence: % %', p_argument, p_problem USING ERRCODE = '22023';
END $$;

-- The longest duration pgfence takes: 365 days (Node's MAX_DURATION_MS).
CREATE OR REPLACE FUNCTION pgfence.max_duration_ms() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 31536000000::bigint $$;

-- A duration in ms, from p_min_ms to max_duration_ms(). A lease's TTL starts at 100 ms (Node's ttlMs).
CREATE OR REPLACE FUNCTION pgfence.check_duration_ms(p_argument text, p_value bigint, p_min_ms bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF p_value IS NULL THEN
    PERFORM pgfence.null_argument(p_argument);
  END IF;
  IF p_value < p_min_ms OR p_value > pgfence.max_duration_ms() THEN
    PERFORM pgfence.invalid_argument(p_argument,
      format('must be from %s to %s ms (365 days), got %s', p_min_ms, pgfence.max_duration_ms(), p_value));
  END IF;
END $$;

-- A lock name (or namespace): non-empty, at most 1024 UTF-8 bytes (text cannot hold NUL or a lone
-- surrogate, which Node refuses too).
CREATE OR REPLACE FUNCTION pgfence.check_lock_name(p_argument text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF p_name IS NULL THEN
    PERFORM pgfence.null_argument(p_argument);
  END IF;
  IF p_name = '' THEN
    PERFORM pgfence.invalid_argument(p_argument, 'must be a non-empty string');
  END IF;
  IF octet_length(convert_to(p_name, 'UTF8')) > 1024 THEN
    PERFORM pgfence.invalid_argument(p_argument,
      format('must be at most 1024 UTF-8 bytes, got %s', octet_length(convert_to(p_name, 'UTF8'))));
  END IF;
END $$;

-- A lease's owner: 1 to 200 characters counted as JavaScript counts them (UTF-16 code units: a
-- character beyond U+FFFF, an emoji, counts twice), so that Node and SQL refuse the same owners.
CREATE OR REPLACE FUNCTION pgfence.check_owner(p_owner text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  utf16_length int := char_length(p_owner);
BEGIN
  IF p_owner IS NULL THEN
    PERFORM pgfence.null_argument('owner');
  END IF;
  IF utf16_length > 100 THEN  -- at most 100 characters are at most 200 code units: no need to count
    utf16_length := utf16_length + (SELECT count(*)::int FROM regexp_matches(p_owner, '[\U00010000-\U0010FFFF]', 'g'));
  END IF;
  IF utf16_length = 0 OR utf16_length > 200 THEN
    PERFORM pgfence.invalid_argument('owner', format('must be 1 to 200 characters, got %s', utf16_length));
  END IF;
END $$;

-- A fencing token handed back by its holder: a token a grant returned is 1 or more.
CREATE OR REPLACE FUNCTION pgfence.check_token(p_token bigint) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  IF p_token IS NULL THEN
    PERFORM pgfence.null_argument('token');
  END IF;
  IF p_token < 1 THEN
    PERFORM pgfence.invalid_argument('token', format('must be a token a grant returned (1 or more), got %s', p_token));
  END IF;
END $$;
