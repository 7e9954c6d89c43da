/**
 * The SQL of session advisory locks, in one place.
 *
 * Every operation on a pinned session is one of the OP codes below. Concurrent operations on one
 * session are sent together as one statement (a batch: one round trip for all of them); a lone
 * operation uses a small prepared statement of its own. Both are built from the same expressions.
 *
 * Waiters are announced with "marker" locks: a shared advisory lock in the two-int4 key space
 * (objsubid 2 in pg_locks), on the same (hi, lo) words as the bigint key, so markers never collide
 * with bigint lock keys. A release probes the marker and NOTIFYs only when someone waits; the
 * NOTIFY's commit is made asynchronous (the statement has no other durable effect).
 */

export const NOTIFY_CHANNEL = 'pgfence_release';

export const Op = {
  /** pg_try_advisory_lock; 1 = granted. */
  tryExclusive: 1,
  tryShared: 2,
  /** Yields to waiters of other sessions: 1 = granted, 0 = busy, 4 = not tried (another session's marker is present). */
  politeTryExclusive: 3,
  politeTryShared: 4,
  /** Unlock; 0 = was not held, 1 = released, 3 = released and waiters were notified. */
  unlockExclusive: 5,
  unlockShared: 6,
  /** Register this session's marker, then try: bit 0 = granted, bit 1 = marker registration failed. */
  waitTryExclusive: 7,
  waitTryShared: 8,
  /** Drop this session's marker; 1 = it was held. */
  unregisterMarker: 9,
  /** Register this session's marker without trying: 0 = registered, 2 = registration failed. */
  registerMarker: 10,
  /** Register this session's marker, then try politely: bits as waitTry, plus 4 = stood back for other waiters. */
  waitPoliteTryExclusive: 11,
  waitPoliteTryShared: 12,
} as const;
export type OpCode = (typeof Op)[keyof typeof Op];

// Expressions over a key k and its marker words hi, lo.
const exprs: Record<OpCode, (k: string, hi: string, lo: string) => string> = {
  [Op.tryExclusive]: (k) => `pg_try_advisory_lock(${k})::int`,
  [Op.tryShared]: (k) => `pg_try_advisory_lock_shared(${k})::int`,
  [Op.politeTryExclusive]: (k, hi, lo) =>
    `CASE WHEN pg_try_advisory_lock(${hi}, ${lo}) AND pg_advisory_unlock(${hi}, ${lo}) THEN pg_try_advisory_lock(${k})::int ELSE 4 END`,
  [Op.politeTryShared]: (k, hi, lo) =>
    `CASE WHEN pg_try_advisory_lock(${hi}, ${lo}) AND pg_advisory_unlock(${hi}, ${lo}) THEN pg_try_advisory_lock_shared(${k})::int ELSE 4 END`,
  [Op.unlockExclusive]: (k, hi, lo) => unlockExpr(`pg_advisory_unlock(${k})`, k, hi, lo),
  [Op.unlockShared]: (k, hi, lo) => unlockExpr(`pg_advisory_unlock_shared(${k})`, k, hi, lo),
  [Op.waitTryExclusive]: (k, hi, lo) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + pg_try_advisory_lock(${k})::int`,
  [Op.waitTryShared]: (k, hi, lo) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + pg_try_advisory_lock_shared(${k})::int`,
  [Op.unregisterMarker]: (_k, hi, lo) => `pg_advisory_unlock_shared(${hi}, ${lo})::int`,
  [Op.registerMarker]: (_k, hi, lo) => `CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END`,
  [Op.waitPoliteTryExclusive]: (k, hi, lo) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + ${exprs[Op.politeTryExclusive](k, hi, lo)}`,
  [Op.waitPoliteTryShared]: (k, hi, lo) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + ${exprs[Op.politeTryShared](k, hi, lo)}`,
};

function unlockExpr(unlock: string, k: string, hi: string, lo: string): string {
  // An exclusive probe of the marker succeeds only when no other session waits (own markers never conflict).
  return `CASE WHEN NOT ${unlock} THEN 0
    WHEN pg_try_advisory_lock(${hi}, ${lo}) AND pg_advisory_unlock(${hi}, ${lo}) THEN 1
    ELSE 3 + 0 * length(set_config('synchronous_commit', 'off', true)) + (pg_notify('${NOTIFY_CHANNEL}', ${k}::text) IS NULL)::int END`;
}

export const hiOf = (k: string) => `(${k} >> 32)::int4`;
export const loOf = (k: string) => `((${k} & 4294967295) - ((${k} & 2147483648) << 1))::int4`;

/** One prepared statement per op code, for a lone operation: $1 is the key. */
export const singleOpSql: Record<OpCode, { name: string; text: string }> = Object.fromEntries(
  (Object.values(Op) as OpCode[]).map((code) => {
    const k = '$1::int8';
    return [code, { name: `pgfence_op_${code}`, text: `SELECT ${exprs[code](k, hiOf(k), loOf(k))} AS r` }];
  }),
) as Record<OpCode, { name: string; text: string }>;

/** The operations of a batch, one row each, in array order: $1 op codes, $2 keys. */
const batchRows = `SELECT t.i::int AS i, t.k, CASE t.op
${(Object.values(Op) as OpCode[]).map((code) => `    WHEN ${code} THEN ${exprs[code]('t.k', 'm.hi', 'm.lo')}`).join('\n')}
  END AS r
FROM unnest($1::int2[], $2::int8[]) WITH ORDINALITY AS t(op, k, i)
CROSS JOIN LATERAL (SELECT ${hiOf('t.k')} AS hi, ${loOf('t.k')} AS lo) AS m`;

/** Many operations in one statement, evaluated in array order. */
export const batchSql = {
  name: 'pgfence_batch',
  text: `SELECT s.i, s.r FROM (${batchRows}) AS s ORDER BY s.i`,
};

/**
 * Fenced tries: the grant and its fencing token in one statement, so one durable commit (forced on
 * by pgfence.next_token) covers both. Only try operations are ever fenced.
 */
export const fencedSingleOpSql: Partial<Record<OpCode, { name: string; text: string }>> = Object.fromEntries(
  ([Op.tryExclusive, Op.politeTryExclusive, Op.waitTryExclusive, Op.waitPoliteTryExclusive] as OpCode[]).map((code) => {
    const k = '$1::int8';
    return [
      code,
      {
        name: `pgfence_fenced_op_${code}`,
        text: `SELECT s.r, CASE WHEN s.r & 1 = 1 THEN pgfence.next_token(${k}) END AS token
FROM (SELECT ${exprs[code](k, hiOf(k), loOf(k))} AS r OFFSET 0) AS s`,
      },
    ];
  }),
);

export const fencedBatchSql = {
  name: 'pgfence_fenced_batch',
  // OFFSET 0 keeps the tries in a subquery evaluated first: a token is issued only for a grant.
  text: `SELECT s.i, s.r, CASE WHEN s.r & 1 = 1 THEN pgfence.next_token(s.k) END AS token
FROM (${batchRows} OFFSET 0) AS s
ORDER BY s.i`,
};

/**
 * A blocking wait, on the locker's waiter session only: PostgreSQL queues it FIFO and grants it the
 * moment the lock is free. $1 key, $2 lock_timeout ('0' = none), set first in the same statement.
 */
export function blockingLockSql(shared: boolean, fenced: boolean): { name: string; text: string } {
  const fn = shared ? 'pg_advisory_lock_shared' : 'pg_advisory_lock';
  const token = fenced ? 'pgfence.next_token($1::int8)::text' : 'NULL::text';
  return {
    name: `pgfence_block_${shared ? 'sh' : 'ex'}${fenced ? '_fenced' : ''}`,
    text: `SELECT set_config('lock_timeout', $2::text, false) AS lock_timeout, ${fn}($1::int8) AS locked, ${token} AS token`,
  };
}

/** The advisory locks (keys and markers) a session holds, to reconcile after a failed batch. */
export const heldBySessionSql = `SELECT objsubid::int AS space, ((classid::int8 << 32) | objid::int8) AS key, mode
FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted`;

export const probeSql = { name: 'pgfence_probe', text: 'SELECT 1' };
