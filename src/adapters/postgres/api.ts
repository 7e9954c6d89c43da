import type { XactExecutor, XactLockOptions } from '../../advisory/index.js';
import type { LockName } from '../../keys.js';
import {
  type LibraryTransaction,
  libraryXactExecutor,
  libraryXactExecutorInSavepoints,
  tryXactLockOn,
  type TryXactLockFunction,
  xactLockOn,
  type XactLockFunction,
} from '../shared/index.js';
import { renamingRefusal } from './results.js';
import { postgresSavepoints, type SavepointScope } from './savepoints.js';
import { instanceIdentity, type PostgresTransaction, postgresSqlExecutor, scopeOf } from './sql-executor.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../../advisory/index.js';

const EXPECTED = 'a postgres.js transaction (the tx of sql.begin or tx.savepoint) or a reserved connection (sql.reserve()) in BEGIN';

function postgresExecutor(tx: PostgresTransaction): XactExecutor {
  const sql = postgresSqlExecutor(tx, 'tx', EXPECTED);
  const scope = scopeOf(tx);
  if (scope !== 'transaction') {
    return libraryXactExecutor({
      sql,
      // A reserved connection outlives its transactions (or `sql` itself, which has none): the server tells them apart.
      identity: tx,
      database: instanceIdentity(tx),
      perTransaction: false,
      // The instance sends each statement to any pooled connection: a lock there would belong to no transaction of the caller's.
      status: () => (scope === 'instance' ? 'idle' : 'unknown'),
      rollbackAdvice: 'send ROLLBACK on the reserved connection',
    });
  }
  const t: LibraryTransaction = {
    sql,
    // postgres.js makes a new TransactionSql per transaction (and per savepoint scope).
    identity: tx,
    database: instanceIdentity(tx),
    perTransaction: true,
    status: () => 'active',
    rollbackAdvice: 'let the error leave the sql.begin() callback (postgres.js rolls back a transaction with a failed statement anyway)',
  };
  // postgres.js fails a sql.begin() on any failed statement: a wait's scripts run in savepoints of its own.
  const savepoints = postgresSavepoints(tx as unknown as SavepointScope, (sp) => postgresSqlExecutor(sp, 'tx', EXPECTED));
  const exec = libraryXactExecutorInSavepoints(t, savepoints.run);
  return {
    ...exec,
    abandon() {
      savepoints.abandon();
      exec.abandon();
    },
  };
}

const lockOn = xactLockOn(postgresExecutor);
const tryLockOn = tryXactLockOn(postgresExecutor);

/** The refusal of an instance whose column transform postgres 3 cannot leave out, as itself rather than as a failed statement. */
async function refusedAsItself<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (err) {
    throw renamingRefusal(err) ?? err;
  }
}

/**
 * pg_advisory_xact_lock inside a postgres.js transaction: the `tx` of `sql.begin()` (or of
 * `tx.savepoint()`), or a reserved connection on which you sent BEGIN. Released at COMMIT or ROLLBACK.
 * A free name costs one statement; a busy one waits up to `timeoutMs` (LockTimeoutError) inside a
 * savepoint, so the transaction goes on after a timeout or a deadlock. When PostgreSQL does not answer
 * within timeoutMs plus 2 s, rejects with LockUnavailableError and dooms the transaction: its later
 * statements fail until it is rolled back. The plain `sql` (no transaction) is refused with NotInTransactionError.
 *
 * @example
 * ```ts fragment
 * import postgres from 'postgres';
 * import { fencedUpdate, xactLock } from 'pgfence/postgres';
 *
 * const sql = postgres(url);
 * await sql.begin(async (tx) => {
 *   const { token } = await xactLock(tx, 'invoice:42', { fencing: true }); // released at COMMIT or ROLLBACK
 *   await fencedUpdate(tx, { table: 'invoices', set: { status: 'paid' }, where: { id: 42 }, token });
 * });
 * ```
 */
export const xactLock: XactLockFunction<PostgresTransaction> = ((tx: PostgresTransaction, name: LockName, opts?: XactLockOptions) =>
  refusedAsItself(lockOn(tx, name, opts))) as XactLockFunction<PostgresTransaction>;

/**
 * One try at a transaction lock inside a postgres.js transaction; null when it is held elsewhere.
 *
 * @example
 * ```ts fragment
 * import postgres from 'postgres';
 * import { tryXactLock } from 'pgfence/postgres';
 *
 * const sql = postgres(url);
 * await sql.begin(async (tx) => {
 *   if (!(await tryXactLock(tx, 'report:daily'))) return; // another transaction holds it
 *   // ... build the report
 * });
 * ```
 */
export const tryXactLock: TryXactLockFunction<PostgresTransaction> = ((tx: PostgresTransaction, name: LockName, opts?: Omit<XactLockOptions, 'timeoutMs'>) =>
  refusedAsItself(tryLockOn(tx, name, opts))) as TryXactLockFunction<PostgresTransaction>;

export { fencedClaim, fencedUpdate, versionedUpdate } from './fencing.js';
export type { AnySql, PostgresTransaction } from './sql-executor.js';
export type { FencedClaimResult, FencedClaimSpec, FencedUpdateResult, FencedUpdateSpec } from '../../fencing/index.js';
export type { VersionedUpdateResult, VersionedUpdateSpec } from '../../fencing/index.js';
