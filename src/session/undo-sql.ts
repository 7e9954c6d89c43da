import { hiOf, loOf, Op } from './advisory-sql.js';

/**
 * Undoes what a failed batch half-did, in one statement however large the batch was: plain unlocks,
 * no marker probe and no NOTIFY, so it takes no new entry in the server's lock table (it must work
 * when the table is full). $1 op codes (unlockExclusive, unlockShared, unregisterMarker), $2 keys.
 */
export const undoBatchSql = `SELECT count(*)::int AS n FROM (
  SELECT CASE u.op
    WHEN ${Op.unlockExclusive} THEN pg_advisory_unlock(u.k)
    WHEN ${Op.unlockShared} THEN pg_advisory_unlock_shared(u.k)
    WHEN ${Op.unregisterMarker} THEN pg_advisory_unlock_shared(${hiOf('u.k')}, ${loOf('u.k')})
  END AS done
  FROM unnest($1::int2[], $2::int8[]) WITH ORDINALITY AS u(op, k, i)
  ORDER BY u.i
) AS undone`;
