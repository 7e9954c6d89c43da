import { hiOf, loOf, noOtherWaiters, notifyIfWaiters } from '../wait/index.js';

/**
 * The SQL of semaphores. A semaphore of N permits is N session advisory locks (slot keys); a holder
 * holds one slot, so a session that dies frees its permits. Waiters announce themselves with the
 * marker of the semaphore's base key, and a slot release NOTIFYs the base key.
 */

/**
 * The first free slot of $1 (slot keys, in the order to try), or no row. With $3 (polite), it tries
 * nothing while another session waits on base key $2. LIMIT 1 stops at the first slot taken.
 */
export const tryAnySlotSql = `SELECT u.k::text AS slot
FROM (SELECT NOT $3::bool OR (${noOtherWaiters(hiOf('$2::int8'), loOf('$2::int8'))}) AS go OFFSET 0) AS g,
     unnest($1::int8[]) AS u(k)
WHERE g.go AND pg_try_advisory_lock(u.k)
LIMIT 1`;

/**
 * Releases slot $1 of base key $2; notifies the waiters of other sessions, if any (notified: 1 = none
 * waits, 3 = notified). The release has no durable effect, so the NOTIFY's commit is asynchronous.
 */
export const releaseSlotSql = `SELECT pg_advisory_unlock($1::int8) AS released,
  ${notifyIfWaiters('$2::int8', { asyncCommit: true })} AS notified`;
