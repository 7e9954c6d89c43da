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

/**
 * The try of a session lock on key k. `guarded` (pgfence's schema is present): a grant gives way to a
 * live lease of the key, because a name is one lock whatever its kind (pgfence.admit_session_lock
 * reads the lease after the grant and gives the lock back, answering 8, when there is one).
 */
function tryExpr(shared: boolean, k: string, guarded: boolean): string {
  const fn = shared ? 'pg_try_advisory_lock_shared' : 'pg_try_advisory_lock';
  return guarded ? `pgfence.admit_session_lock(${k}, ${shared}, ${fn}(${k}))` : `${fn}(${k})::int`;
}

/** Bit of a try's result: the name is held by a live lease (the lock was not kept). */
export const LEASE_HELD = 8;

// Expressions over a key k and its marker words hi, lo.
type Expr = (k: string, hi: string, lo: string, guarded: boolean) => string;
const exprs: Record<OpCode, Expr> = {
  [Op.tryExclusive]: (k, _hi, _lo, g) => tryExpr(false, k, g),
  [Op.tryShared]: (k, _hi, _lo, g) => tryExpr(true, k, g),
  [Op.politeTryExclusive]: (k, hi, lo, g) =>
    `CASE WHEN pg_try_advisory_lock(${hi}, ${lo}) AND pg_advisory_unlock(${hi}, ${lo}) THEN ${tryExpr(false, k, g)} ELSE 4 END`,
  [Op.politeTryShared]: (k, hi, lo, g) =>
    `CASE WHEN pg_try_advisory_lock(${hi}, ${lo}) AND pg_advisory_unlock(${hi}, ${lo}) THEN ${tryExpr(true, k, g)} ELSE 4 END`,
  [Op.unlockExclusive]: (k, hi, lo) => unlockExpr(`pg_advisory_unlock(${k})`, k, hi, lo),
  [Op.unlockShared]: (k, hi, lo) => unlockExpr(`pg_advisory_unlock_shared(${k})`, k, hi, lo),
  [Op.waitTryExclusive]: (k, hi, lo, g) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + ${tryExpr(false, k, g)}`,
  [Op.waitTryShared]: (k, hi, lo, g) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + ${tryExpr(true, k, g)}`,
  [Op.unregisterMarker]: (_k, hi, lo) => `pg_advisory_unlock_shared(${hi}, ${lo})::int`,
  [Op.registerMarker]: (_k, hi, lo) => `CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END`,
  [Op.waitPoliteTryExclusive]: (k, hi, lo, g) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + ${exprs[Op.politeTryExclusive](k, hi, lo, g)}`,
  [Op.waitPoliteTryShared]: (k, hi, lo, g) =>
    `(CASE WHEN pg_try_advisory_lock_shared(${hi}, ${lo}) THEN 0 ELSE 2 END) + ${exprs[Op.politeTryShared](k, hi, lo, g)}`,
};

function unlockExpr(unlock: string, k: string, hi: string, lo: string): string {
  // An exclusive probe of the marker succeeds only when no other session waits (own markers never conflict).
  return `CASE WHEN NOT ${unlock} THEN 0
    WHEN pg_try_advisory_lock(${hi}, ${lo}) AND pg_advisory_unlock(${hi}, ${lo}) THEN 1
    ELSE 3 + 0 * length(set_config('synchronous_commit', 'off', true)) + (pg_notify('${NOTIFY_CHANNEL}', ${k}::text) IS NULL)::int END`;
}

export const hiOf = (k: string) => `(${k} >> 32)::int4`;
export const loOf = (k: string) => `((${k} & 4294967295) - ((${k} & 2147483648) << 1))::int4`;

const TRY_CODES: ReadonlySet<OpCode> = new Set([
  Op.tryExclusive,
  Op.tryShared,
  Op.politeTryExclusive,
  Op.politeTryShared,
  Op.waitTryExclusive,
  Op.waitTryShared,
  Op.waitPoliteTryExclusive,
  Op.waitPoliteTryShared,
]);

/** The statements of a session, in its two flavours: plain, or guarded against leases (see tryExpr). */
export interface LockStatements {
  /** One prepared statement per op code, for a lone operation: $1 is the key. */
  single: Record<OpCode, { name: string; text: string }>;
  /** Many operations in one statement, evaluated in array order: $1 op codes, $2 keys. */
  batch: { name: string; text: string };
  /**
   * Fenced tries: the grant and its fencing token in one statement, so one durable commit (forced on
   * by pgfence.next_token) covers both. Only try operations are ever fenced.
   */
  fencedSingle: Partial<Record<OpCode, { name: string; text: string }>>;
  fencedBatch: { name: string; text: string };
}

function lockStatements(guarded: boolean): LockStatements {
  // Statements whose text differs between the flavours need names of their own (one name, one text).
  const suffix = guarded ? '_g' : '';
  const single = Object.fromEntries(
    (Object.values(Op) as OpCode[]).map((code) => {
      const k = '$1::int8';
      return [
        code,
        { name: `pgfence_op_${code}${TRY_CODES.has(code) ? suffix : ''}`, text: `SELECT ${exprs[code](k, hiOf(k), loOf(k), guarded)} AS r` },
      ];
    }),
  ) as Record<OpCode, { name: string; text: string }>;

  const batchRows = `SELECT t.i::int AS i, t.k, CASE t.op
${(Object.values(Op) as OpCode[]).map((code) => `    WHEN ${code} THEN ${exprs[code]('t.k', 'm.hi', 'm.lo', guarded)}`).join('\n')}
  END AS r
FROM unnest($1::int2[], $2::int8[]) WITH ORDINALITY AS t(op, k, i)
CROSS JOIN LATERAL (SELECT ${hiOf('t.k')} AS hi, ${loOf('t.k')} AS lo) AS m`;

  const fencedSingle = Object.fromEntries(
    ([Op.tryExclusive, Op.politeTryExclusive, Op.waitTryExclusive, Op.waitPoliteTryExclusive] as OpCode[]).map((code) => {
      const k = '$1::int8';
      return [
        code,
        {
          name: `pgfence_fenced_op_${code}${suffix}`,
          text: `SELECT s.r, CASE WHEN s.r & 1 = 1 THEN pgfence.next_token(${k}) END AS token
FROM (SELECT ${exprs[code](k, hiOf(k), loOf(k), guarded)} AS r OFFSET 0) AS s`,
        },
      ];
    }),
  );

  return {
    single,
    batch: { name: `pgfence_batch${suffix}`, text: `SELECT s.i, s.r FROM (${batchRows}) AS s ORDER BY s.i` },
    fencedSingle,
    fencedBatch: {
      name: `pgfence_fenced_batch${suffix}`,
      // OFFSET 0 keeps the tries in a subquery evaluated first: a token is issued only for a grant.
      text: `SELECT s.i, s.r, CASE WHEN s.r & 1 = 1 THEN pgfence.next_token(s.k) END AS token
FROM (${batchRows} OFFSET 0) AS s
ORDER BY s.i`,
    },
  };
}

export const plainLockSql = lockStatements(false);
export const guardedLockSql = lockStatements(true);

/**
 * A blocking wait, on the locker's waiter session only: PostgreSQL queues it FIFO and grants it the
 * moment the lock is free. $1 key, $2 lock_timeout ('0' = none), set first in the same statement.
 * Answers r: 1 = granted; 8 (guarded only) = granted, but a live lease holds the name, so it was given
 * back at once (and no token issued).
 */
export function blockingLockSql(shared: boolean, fenced: boolean, guarded: boolean): { name: string; text: string } {
  const fn = shared ? 'pg_advisory_lock_shared' : 'pg_advisory_lock';
  const token = fenced ? 'CASE WHEN s.r = 1 THEN pgfence.next_token($1::int8)::text END' : 'NULL::text';
  // The lease is read only once the lock is granted: the inner subquery (OFFSET 0) runs first.
  const r = guarded ? `pgfence.admit_session_lock($1::int8, ${shared}, true)` : '1';
  return {
    name: `pgfence_block_${shared ? 'sh' : 'ex'}${fenced ? '_fenced' : ''}${guarded ? '_g' : ''}`,
    text: `SELECT s.lock_timeout, s.r, ${token} AS token
FROM (SELECT l.lock_timeout, ${r} AS r
      FROM (SELECT set_config('lock_timeout', $2::text, false) AS lock_timeout, ${fn}($1::int8) AS locked OFFSET 0) AS l
      OFFSET 0) AS s`,
  };
}

/**
 * Run once when a session connects (and as the keepalive probe of a session without the guard):
 * whether pgfence's schema is there to guard session locks against leases, so that no acquire pays a
 * round trip to find out. The session also runs in READ COMMITTED whatever the server's default, so
 * that the guard's read of the lease, after the grant, sees every lease committed before it.
 */
export const sessionSetupSql = {
  name: 'pgfence_setup',
  text: `SELECT set_config('default_transaction_isolation', 'read committed', false) AS isolation,
  coalesce((SELECT has_schema_privilege(n.oid, 'USAGE') AND has_function_privilege(p.oid, 'EXECUTE')
                   AND has_table_privilege(c.oid, 'SELECT')
            FROM pg_catalog.pg_namespace n
            JOIN pg_catalog.pg_proc p ON p.pronamespace = n.oid AND p.proname = 'admit_session_lock'
            JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = 'leases'
            WHERE n.nspname = 'pgfence' LIMIT 1), false) AS guarded`,
};

/** The advisory locks (keys and markers) a session holds, to reconcile after a failed batch. */
export const heldBySessionSql = `SELECT objsubid::int AS space, ((classid::int8 << 32) | objid::int8) AS key, mode
FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted`;

export const probeSql = { name: 'pgfence_probe', text: 'SELECT 1' };
