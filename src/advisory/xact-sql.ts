import { nextTokenExpr } from '../fencing/index.js';
import { lockTimeoutSetting } from './lock-timeout.js';

/**
 * The SQL of transaction-scoped advisory locks. A blocking wait runs as one simple-protocol script
 * (one round trip): a savepoint, so that a timeout or deadlock leaves the caller's transaction usable;
 * lock_timeout set for the wait only and put back to the caller's value in the same statement; the
 * transaction's start time, which identifies the transaction for nested-lock detection.
 *
 * Scripts cannot take parameters: the only values written into them are a bigint key and whole
 * milliseconds, both formatted here from numbers, never from caller text.
 */

/** The savepoint of a blocking wait (adapters whose library rolls back a failed statement's savepoint reopen it). */
export const WAIT_SAVEPOINT = 'pgfence_xact_lock';
const SAVEPOINT = WAIT_SAVEPOINT;

/** The lease guard of transaction locks (sql/leases.sql), when migrate() has created it. */
const GUARD = 'pgfence.admit_xact_lock(bigint,boolean,boolean)';

/**
 * A single try, sent without parameters (the simple protocol: no Parse, Bind or Describe, one message
 * each way), as cheap as a bare pg_try_advisory_xact_lock. `nestedIn`: the start time of a transaction
 * that already holds the key (or null). `identify`: report the transaction's start time (`xact`), for
 * callers that cannot tell one transaction from the next themselves. In autocommit a lone statement
 * starts its own transaction, so its two timestamps are equal.
 *
 * `guarded` (the connection's database has pgfence's schema): the lock gives way to a live lease of
 * the name (pgfence.admit_xact_lock). Not guarded, the statement also looks for the guard (`guard`):
 * when it is there (a migrate() ran since), it takes nothing, and the caller sends the guarded try.
 * So a database without the schema pays one catalog lookup, and one with it is never locked unguarded.
 */
export function tryXactLockSql(opts: { key: bigint; shared: boolean; fenced: boolean; nestedIn: string | null; identify: boolean; guarded: boolean }): string {
  const fn = opts.shared ? 'pg_try_advisory_xact_lock_shared' : 'pg_try_advisory_xact_lock';
  const key = bigintLiteral(opts.key);
  const inXact = 'transaction_timestamp() <> statement_timestamp()';
  const nested = opts.nestedIn === null ? 'false' : `extract(epoch FROM transaction_timestamp()) = ${epochLiteral(opts.nestedIn)}`;
  // Unguarded, the catalog lookup runs once, in a subquery (written twice it would run twice).
  const guard = opts.guarded ? 'false' : 'g.guard';
  const lookup = opts.guarded ? '' : `\nFROM (SELECT to_regprocedure('${GUARD}') IS NOT NULL AS guard OFFSET 0) AS g`;
  const lock = opts.guarded ? `pgfence.admit_xact_lock(${key}, ${opts.shared}, false) = 1` : `${fn}(${key})`;
  // Both timestamps are fixed for the statement: the conditions read the same wherever they are repeated.
  const tries = `SELECT ${inXact} AS in_xact, ${nested} AS nested, ${guard} AS guard,
  CASE WHEN ${inXact} AND NOT ${nested}${opts.guarded ? '' : ` AND NOT ${guard}`} THEN ${lock} END AS granted${opts.identify ? ', extract(epoch FROM transaction_timestamp())::text AS xact' : ''}${lookup}`;
  if (!opts.fenced) return tries;
  // The token is issued only for a grant, in the caller's transaction: it commits with it.
  return `SELECT g.*, CASE WHEN g.granted THEN ${nextTokenExpr(key)} END::text AS token FROM (${tries} OFFSET 0) AS g`;
}

/**
 * A bounded (or unbounded, timeoutMs = Infinity) wait. `first` opens the savepoint; later slices of a
 * cancellable wait roll back to it instead. Guarded, it also waits for a live lease of the name to end,
 * within the same lock_timeout. When `nestedIn` (a transaction start time, as epoch seconds) is the current
 * transaction's, the lock is not taken and `nested` is true.
 */
export function waitXactLockScript(opts: {
  key: bigint;
  shared: boolean;
  timeoutMs: number;
  first: boolean;
  nestedIn: string | null;
  fenced: boolean;
  /** See tryXactLockSql; a wait follows the try that found out, so it does not look for the guard again. */
  guarded: boolean;
}): string {
  const fn = opts.shared ? 'pg_advisory_xact_lock_shared' : 'pg_advisory_xact_lock';
  const timeout = lockTimeoutSetting(opts.timeoutMs);
  const key = bigintLiteral(opts.key);
  const open = opts.first ? `SAVEPOINT ${SAVEPOINT}` : `ROLLBACK TO SAVEPOINT ${SAVEPOINT}`;
  const nested = opts.nestedIn === null ? 'false' : `extract(epoch FROM transaction_timestamp()) = ${epochLiteral(opts.nestedIn)}`;
  return `${open};
SELECT n.nested,
  CASE WHEN n.nested THEN NULL ELSE set_config('lock_timeout', '${timeout}', true) END AS set_timeout,
  CASE WHEN n.nested THEN NULL ELSE ${opts.guarded ? `pgfence.admit_xact_lock(${key}, ${opts.shared}, true)` : `${fn}(${key})`} END AS locked,
  set_config('lock_timeout', p.prev, true) AS restored,
  ${opts.fenced ? `CASE WHEN n.nested THEN NULL ELSE ${nextTokenExpr(key)}::text END` : 'NULL::text'} AS token,
  extract(epoch FROM transaction_timestamp())::text AS xact
FROM (SELECT current_setting('lock_timeout') AS prev OFFSET 0) AS p, (SELECT ${nested} AS nested OFFSET 0) AS n;
RELEASE SAVEPOINT ${SAVEPOINT}`;
}

/** Leaves the transaction as it was before a failed wait. */
/** The wait's savepoint opened again, after a library that rolls back failed statements itself did so (pgfence/postgres). */
export const reopenWaitSavepointSql = `SAVEPOINT ${SAVEPOINT}`;
export const undoWaitScript = `ROLLBACK TO SAVEPOINT ${SAVEPOINT}; RELEASE SAVEPOINT ${SAVEPOINT}`;

function bigintLiteral(key: bigint): string {
  if (typeof key !== 'bigint') throw new TypeError('key must be a bigint');
  return `${key.toString()}::int8`;
}

function epochLiteral(epoch: string): string {
  // Only ever a value PostgreSQL itself returned from extract(epoch ...)::text.
  if (!/^[0-9]+(\.[0-9]+)?$/.test(epoch)) throw new TypeError('unexpected transaction start time');
  return `${epoch}::numeric`;
}

/**
 * After a wait whose script results the driver did not report: the token of the lock just taken (when
 * `fenced`) and the transaction's start time, which identifies it for nested-lock detection. $1: the key.
 */
export function afterWaitSql(fenced: boolean): string {
  // $1 in both, so both take the same one value.
  return `SELECT ${fenced ? `${nextTokenExpr('$1::int8')}::text` : 'CASE WHEN $1::int8 IS NULL THEN NULL END::text'} AS token, extract(epoch FROM transaction_timestamp())::text AS xact`;
}

/**
 * Sent after a statement went unanswered (xactLock gave up on the connection): queued behind it, it
 * fails, so the transaction refuses everything the caller sends afterwards until it is rolled back.
 */
export const doomTransactionSql = `DO $pgfence$BEGIN RAISE EXCEPTION 'pgfence: xactLock gave up waiting for PostgreSQL to answer; this transaction is doomed: roll it back'; END$pgfence$`;
