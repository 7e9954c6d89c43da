import { NOTIFY_CHANNEL } from '../session/index.js';

/**
 * Waiter markers and wake-ups, shared by session locks, semaphores and leases.
 *
 * A session announces that it waits for key k with a "marker": a shared advisory lock in the two-int4
 * key space (objsubid 2 in pg_locks), on the same (hi, lo) words as the bigint key, so markers never
 * collide with bigint lock keys. A release probes the marker and NOTIFYs only when someone waits.
 * sql/interface.sql's pgfence.notify_waiters is the same expression for the SQL functions' releases
 * (test/sql-lease-rules.test.ts holds the two texts equal).
 */

/** The marker words of key k (an int8 SQL expression). */
export const hiOf = (k: string) => `(${k} >> 32)::int4`;
export const loOf = (k: string) => `((${k} & 4294967295) - ((${k} & 2147483648) << 1))::int4`;

/**
 * True when no other session waits: an exclusive probe of the marker succeeds only then (a session's
 * own markers never conflict with its probe).
 */
export const noOtherWaiters = (hi: string, lo: string) => `pg_try_advisory_lock(${hi}, ${lo}) AND pg_advisory_unlock(${hi}, ${lo})`;

/** Bit of a result: the marker registration collided with a release's probe (register again soon). */
export const MARKER_FAILED = 2;

/** Registers this session's marker: 0 = registered, 2 (MARKER_FAILED) = registration failed. */
export const registerMarker = (hi: string, lo: string) => `CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE ${MARKER_FAILED} END`;

/**
 * The marker operations' codes in a session's op table (the advisory op table includes them), for a
 * wait line that announces a waiter on the key's session: register answers as registerMarker, unregister
 * 1 when the marker was held.
 */
export const MarkerOp = { unregister: 9, register: 10 } as const;

/** Whether a marker registration (or an op that registers one) took. */
export const markerRegistered = (result: number): boolean => (result & MARKER_FAILED) === 0;

/**
 * Wakes the waiters of key k after a release: 0 = `released` was false (nothing to announce), 1 = no
 * other session waits, 3 = waiters were notified. `asyncCommit`: the statement has no other durable
 * effect, so the NOTIFY's commit need not wait for the WAL flush.
 */
export function notifyIfWaiters(
  k: string,
  opts: { hi?: string; lo?: string; released?: string; asyncCommit: boolean },
): string {
  const { hi = hiOf(k), lo = loOf(k), released } = opts;
  const asyncCommit = opts.asyncCommit ? `0 * length(set_config('synchronous_commit', 'off', true)) + ` : '';
  return `CASE ${released ? `WHEN NOT ${released} THEN 0
    ` : ''}WHEN ${noOtherWaiters(hi, lo)} THEN 1
    ELSE 3 + ${asyncCommit}(pg_notify('${NOTIFY_CHANNEL}', ${k}::text) IS NULL)::int END`;
}
