import { nextTokenExpr } from '../fencing/index.js';
import { internalKey } from '../keys.js';
import type { OpFlavour, OpStatements, Prepared } from '../session/index.js';
import { hiOf, loOf, MarkerOp, noOtherWaiters, notifyIfWaiters, registerMarker } from '../wait/index.js';

/**
 * The SQL of session advisory locks, in one place.
 *
 * Every operation on a pinned session is one of the OP codes below. Concurrent operations on one
 * session are sent together as one statement (a batch: one round trip for all of them); a lone
 * operation uses a small prepared statement of its own. Both are built from the same expressions.
 * Waiters announce themselves with markers (marker-sql.ts). test/__snapshots__/sql-statements.sql
 * shows every statement as it is sent.
 */

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
  unregisterMarker: MarkerOp.unregister,
  /** Register this session's marker without trying: 0 = registered, 2 = registration failed. */
  registerMarker: MarkerOp.register,
  /** Register this session's marker, then try politely: bits as waitTry, plus 4 = stood back for other waiters. */
  waitPoliteTryExclusive: 11,
  waitPoliteTryShared: 12,
} as const;
export type OpCode = (typeof Op)[keyof typeof Op];

/** Bit of a try's result: the name is held by a live lease (the lock was not kept). */
export const LEASE_HELD = 8;

/**
 * The try of a session lock on key k. `guarded` (pgfence's schema is present): a grant gives way to a
 * live lease of the key, because a name is one lock whatever its kind (pgfence.admit_session_lock
 * reads the lease after the grant and gives the lock back, answering 8, when there is one).
 */
function tryExpr(shared: boolean, k: string, guarded: boolean): string {
  const fn = shared ? 'pg_try_advisory_lock_shared' : 'pg_try_advisory_lock';
  return guarded ? `pgfence.admit_session_lock(${k}, ${shared}, ${fn}(${k}))` : `${fn}(${k})::int`;
}

/** A try that stands back (4) while another session waits for the key. */
const politeTry = (shared: boolean, k: string, hi: string, lo: string, guarded: boolean) =>
  `CASE WHEN ${noOtherWaiters(hi, lo)} THEN ${tryExpr(shared, k, guarded)} ELSE 4 END`;

/** Registers this session's marker, then does `then` (its result plus 2 when the registration failed). */
const registered = (hi: string, lo: string, then: string) => `(${registerMarker(hi, lo)}) + ${then}`;

const unlock = (fn: string, k: string, hi: string, lo: string) => notifyIfWaiters(k, { hi, lo, released: `${fn}(${k})`, asyncCommit: true });

/** Each operation as an SQL expression over a key k and its marker words hi, lo. */
type Expr = (k: string, hi: string, lo: string, guarded: boolean) => string;
const exprs: Record<OpCode, Expr> = {
  [Op.tryExclusive]: (k, _hi, _lo, g) => tryExpr(false, k, g),
  [Op.tryShared]: (k, _hi, _lo, g) => tryExpr(true, k, g),
  [Op.politeTryExclusive]: (k, hi, lo, g) => politeTry(false, k, hi, lo, g),
  [Op.politeTryShared]: (k, hi, lo, g) => politeTry(true, k, hi, lo, g),
  [Op.unlockExclusive]: (k, hi, lo) => unlock('pg_advisory_unlock', k, hi, lo),
  [Op.unlockShared]: (k, hi, lo) => unlock('pg_advisory_unlock_shared', k, hi, lo),
  [Op.waitTryExclusive]: (k, hi, lo, g) => registered(hi, lo, tryExpr(false, k, g)),
  [Op.waitTryShared]: (k, hi, lo, g) => registered(hi, lo, tryExpr(true, k, g)),
  [Op.unregisterMarker]: (_k, hi, lo) => `pg_advisory_unlock_shared(${hi}, ${lo})::int`,
  [Op.registerMarker]: (_k, hi, lo) => registerMarker(hi, lo),
  [Op.waitPoliteTryExclusive]: (k, hi, lo, g) => registered(hi, lo, politeTry(false, k, hi, lo, g)),
  [Op.waitPoliteTryShared]: (k, hi, lo, g) => registered(hi, lo, politeTry(true, k, hi, lo, g)),
};

const CODES = Object.values(Op) as OpCode[];
/** The operations whose text differs between the flavours (see tryExpr). */
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
/** Only exclusive tries are ever fenced alone; anything else fenced goes as a fenced batch. */
const FENCED_SINGLE_CODES: readonly OpCode[] = [Op.tryExclusive, Op.politeTryExclusive, Op.waitTryExclusive, Op.waitPoliteTryExclusive];

// The statements, with {named} slots. A lone operation on key $1:
const SINGLE = `SELECT {op} AS r`;
// Fenced: the grant and its fencing token in one statement, so one durable commit (forced on by the
// token) covers both. OFFSET 0 keeps the try in a subquery evaluated first: a token only for a grant.
const FENCED_SINGLE = `SELECT s.r, CASE WHEN s.r & 1 = 1 THEN {token} END AS token
FROM (SELECT {op} AS r OFFSET 0) AS s`;
// A batch: $1 op codes, $2 keys; {ops} is one `WHEN code THEN expression` line per op code.
const BATCH_ROWS = `SELECT t.i::int AS i, t.k, CASE t.op
{ops}
  END AS r
FROM unnest($1::int2[], $2::int8[]) WITH ORDINALITY AS t(op, k, i)
CROSS JOIN LATERAL (SELECT {hi} AS hi, {lo} AS lo) AS m`;
const BATCH = `SELECT s.i, s.r FROM ({rows}) AS s ORDER BY s.i`;
const FENCED_BATCH = `SELECT s.i, s.r, CASE WHEN s.r & 1 = 1 THEN {token} END AS token
FROM ({rows} OFFSET 0) AS s
ORDER BY s.i`;

/** Fills a template's {name} slots: every slot must have a value, and every value a slot. */
function fill(template: string, slots: Record<string, string>): string {
  const unused = new Set(Object.keys(slots));
  const text = template.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = slots[name];
    if (value === undefined) throw new Error(`pgfence: SQL template slot {${name}} has no value`);
    unused.delete(name);
    return value;
  });
  if (unused.size > 0) throw new Error(`pgfence: SQL template has no slot {${[...unused].join('}, {')}}`);
  return text;
}

/** The statements of one flavour: plain, or guarded against leases (see tryExpr). */
function lockStatements(guarded: boolean): OpFlavour {
  // Statements whose text differs between the flavours need names of their own (one name, one text).
  const suffix = guarded ? '_g' : '';
  const k = '$1::int8';
  const op = (code: OpCode) => exprs[code](k, hiOf(k), loOf(k), guarded);
  const single = Object.fromEntries(
    CODES.map((code) => [code, { name: `pgfence_op_${code}${TRY_CODES.has(code) ? suffix : ''}`, text: fill(SINGLE, { op: op(code) }) }]),
  );
  const fencedSingle = Object.fromEntries(
    FENCED_SINGLE_CODES.map((code) => [
      code,
      { name: `pgfence_fenced_op_${code}${suffix}`, text: fill(FENCED_SINGLE, { op: op(code), token: nextTokenExpr(k) }) },
    ]),
  );
  const rows = fill(BATCH_ROWS, {
    ops: CODES.map((code) => `    WHEN ${code} THEN ${exprs[code]('t.k', 'm.hi', 'm.lo', guarded)}`).join('\n'),
    hi: hiOf('t.k'),
    lo: loOf('t.k'),
  });
  return {
    single,
    batch: { name: `pgfence_batch${suffix}`, text: fill(BATCH, { rows }) },
    fencedSingle,
    fencedBatch: { name: `pgfence_fenced_batch${suffix}`, text: fill(FENCED_BATCH, { rows, token: nextTokenExpr('s.k') }) },
  };
}

/**
 * A blocking wait, on the locker's waiter session only: PostgreSQL queues it FIFO and grants it the
 * moment the lock is free. $1 key, $2 lock_timeout ('0' = none), set first in the same statement.
 * It tries first, so its answer says whether it had to wait (`waited`: the key was busy), which lets
 * a key seen busy lately go straight into the queue without a try of its own.
 * Answers r: 1 = granted; 8 (guarded only) = granted, but a live lease holds the name, so it was given
 * back at once (and no token issued). The lease is read only once the lock is granted: each inner
 * subquery (OFFSET 0) runs first. Its rows are read by column position (BLOCKING_COLUMNS).
 */
const BLOCKING = `SELECT s.lock_timeout, s.r, s.waited, {token} AS token
FROM (SELECT l.lock_timeout, l.waited, {admit} AS r
      FROM (SELECT w.lock_timeout, w.waited, CASE WHEN w.waited THEN {lock}($1::int8) END AS locked
            FROM (SELECT set_config('lock_timeout', $2::text, false) AS lock_timeout, NOT {try}($1::int8) AS waited OFFSET 0) AS w
            OFFSET 0) AS l
      OFFSET 0) AS s`;

/** Where the blocking statement's answers are in its row. */
export const BLOCKING_COLUMNS = { r: 1, waited: 2, token: 3 } as const;

/** Made once per variant (a wait asks for it every time). */
const blockingVariants = new Map<number, Prepared>();

export function blockingLockSql(shared: boolean, fenced: boolean, guarded: boolean): Prepared {
  const variant = (shared ? 1 : 0) | (fenced ? 2 : 0) | (guarded ? 4 : 0);
  let sql = blockingVariants.get(variant);
  if (!sql) blockingVariants.set(variant, (sql = makeBlockingLockSql(shared, fenced, guarded)));
  return sql;
}

function makeBlockingLockSql(shared: boolean, fenced: boolean, guarded: boolean): Prepared {
  return {
    name: `pgfence_block_${shared ? 'sh' : 'ex'}${fenced ? '_fenced' : ''}${guarded ? '_g' : ''}`,
    text: fill(BLOCKING, {
      token: fenced ? `CASE WHEN s.r = 1 THEN ${nextTokenExpr('$1::int8')}::text END` : 'NULL::text',
      admit: guarded ? `pgfence.admit_session_lock($1::int8, ${shared}, true)` : '1',
      lock: shared ? 'pg_advisory_lock_shared' : 'pg_advisory_lock',
      try: shared ? 'pg_try_advisory_lock_shared' : 'pg_try_advisory_lock',
    }),
  };
}

/**
 * Run on a new waiter session ahead of its first wait, guarded sessions only (else a bare probe): the
 * first call of the guard in a backend compiles it and plans its read of pgfence.leases, a few
 * milliseconds that would otherwise fall between a release and the grant it hands over. Its key is an
 * internal one (bytes no name can spell): no lease ever holds it, so nothing is unlocked.
 */
export const warmGuardSql = (guarded: boolean): Prepared =>
  guarded
    ? { name: 'pgfence_warm_guard', text: `SELECT pgfence.admit_session_lock(${internalKey('warm-guard')}, false, true) AS r` }
    : { name: 'pgfence_probe', text: 'SELECT 1' };

/**
 * Run once when a session connects (and as the keepalive probe of a session without the guard):
 * whether pgfence's schema is there to guard session locks against leases, so that no acquire pays a
 * round trip to find out. The session also runs in READ COMMITTED whatever the server's default, so
 * that the guard's read of the lease, after the grant, sees every lease committed before it.
 */
const setupSql: Prepared = {
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

/**
 * Undoes what a failed batch half-did, in one statement however large the batch was: plain unlocks,
 * no marker probe and no NOTIFY, so it takes no new entry in the server's lock table (it must work
 * when the table is full). $1 op codes (unlockExclusive, unlockShared, unregisterMarker), $2 keys.
 */
const undoBatchSql = `SELECT count(*)::int AS n FROM (
  SELECT CASE u.op
    WHEN ${Op.unlockExclusive} THEN pg_advisory_unlock(u.k)
    WHEN ${Op.unlockShared} THEN pg_advisory_unlock_shared(u.k)
    WHEN ${Op.unregisterMarker} THEN pg_advisory_unlock_shared(${hiOf('u.k')}, ${loOf('u.k')})
  END AS done
  FROM unnest($1::int2[], $2::int8[]) WITH ORDINALITY AS u(op, k, i)
  ORDER BY u.i
) AS undone`;

/** The operations that reverse what a failed statement may have done for `code` on `key`. */
function undoOne(code: number, key: bigint, held: ReadonlySet<string>): OpCode[] {
  const undo: OpCode[] = [];
  const exclusive = held.has(`1:${key}:ExclusiveLock`);
  const shared = held.has(`1:${key}:ShareLock`);
  const marker = held.has(`2:${key}:ShareLock`);
  switch (code) {
    case Op.waitTryExclusive:
    case Op.waitTryShared:
    case Op.waitPoliteTryExclusive:
    case Op.waitPoliteTryShared:
    case Op.unregisterMarker:
    case Op.registerMarker:
      // Markers are bookkeeping: the lock manager registers them again when it still waits.
      if (marker) undo.push(Op.unregisterMarker);
      break;
  }
  switch (code) {
    case Op.tryExclusive:
    case Op.politeTryExclusive:
    case Op.waitTryExclusive:
    case Op.waitPoliteTryExclusive:
    case Op.unlockExclusive:
      if (exclusive) undo.push(Op.unlockExclusive);
      break;
    case Op.tryShared:
    case Op.politeTryShared:
    case Op.waitTryShared:
    case Op.waitPoliteTryShared:
    case Op.unlockShared:
      if (shared) undo.push(Op.unlockShared);
      break;
  }
  return undo;
}

/** Everything a pinned session runs for session locks: the statement set the SessionPool is given. */
export const sessionLockStatements: OpStatements = {
  setup: setupSql,
  plain: lockStatements(false),
  guarded: lockStatements(true),
  held: heldBySessionSql,
  undoFor(ops, rows) {
    const held = new Set((rows as { space: number; key: string; mode: string }[]).map((r) => `${r.space}:${r.key}:${r.mode}`));
    const codes: number[] = [];
    const keys: bigint[] = [];
    for (const op of ops) {
      for (const undo of undoOne(op.code, op.key, held)) {
        codes.push(undo);
        keys.push(op.key);
      }
    }
    return { codes, keys };
  },
  undo: undoBatchSql,
};

/**
 * The server's advisory locks now, how many backends other than $1 (this locker's sessions) hold some,
 * and how many other client backends there are (any of them may start taking locks): the guard's
 * sample, taken on one of the locker's pinned sessions (no connection of its own).
 */
export const serverAdvisoryLocksSql = {
  name: 'pgfence_server_advisory_locks',
  text: `SELECT count(*)::int AS locks, count(DISTINCT pid) FILTER (WHERE pid <> ALL($1::int4[]))::int AS holders,
       (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> ALL($1::int4[])) AS clients
FROM pg_locks WHERE locktype = 'advisory'`,
};
