-- Lease-backed semaphore permits. Permit i of a semaphore is the lease of its slot key (an internal
-- key no user name produces), taken by pgfence.lease_acquire: every lease rule applies to it (TTL on
-- the database clock, renewal and release by the holder's token, its own fencing token, freed at its
-- TTL when the holder dies). Re-applied by migrate() whenever this file changes.

-- Takes the first free slot of p_slots (tried in the caller's order), or reports none free with the
-- time until the soonest permit expires. Each slot is one lease, so there are never more holders than
-- slots. Slot row names read "<p_name> (permit i of n)", i counted in p_slots' order as given.
CREATE OR REPLACE FUNCTION pgfence.permit_acquire(p_slots bigint[], p_name text, p_owner text, p_ttl_ms bigint, p_first int)
RETURNS TABLE (granted boolean, slot bigint, token bigint, acquired_at timestamptz, expires_at timestamptz, remaining_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
  n int := cardinality(p_slots);
  i int;
  r record;
  soonest bigint;
BEGIN
  -- Arguments refused as everywhere in pgfence (sql/arguments.sql): NULL 22004, out of bounds 22023.
  IF p_slots IS NULL THEN PERFORM pgfence.null_argument('p_slots'); END IF;
  IF p_first IS NULL THEN PERFORM pgfence.null_argument('p_first'); END IF;
  PERFORM pgfence.check_lock_name('p_name', p_name);
  PERFORM pgfence.check_owner(p_owner);
  PERFORM pgfence.check_duration_ms('p_ttl_ms', p_ttl_ms, 100);
  IF n = 0 OR n > 10000 OR array_position(p_slots, NULL) IS NOT NULL THEN
    PERFORM pgfence.invalid_argument('p_slots', format('must hold 1 to 10000 keys, none NULL, got %s', n));
  END IF;
  IF p_first < 0 OR p_first >= n THEN
    PERFORM pgfence.invalid_argument('p_first', format('must be 0 to %s, got %s', n - 1, p_first));
  END IF;
  -- Starting at p_first (callers pick it at random) keeps concurrent callers off each other's slot.
  FOR j IN 0 .. n - 1 LOOP
    i := (p_first + j) % n + 1;
    SELECT * INTO r FROM pgfence.lease_acquire(p_slots[i], format('%s (permit %s of %s)', p_name, i, n), p_owner, p_ttl_ms, NULL);
    IF r.granted THEN
      RETURN QUERY SELECT true, p_slots[i], r.token, r.acquired_at, r.expires_at, r.remaining_ms;
      RETURN;
    END IF;
    soonest := least(soonest, r.remaining_ms);
  END LOOP;
  RETURN QUERY SELECT false, NULL::bigint, NULL::bigint, NULL::timestamptz, NULL::timestamptz, soonest;
END $$;
