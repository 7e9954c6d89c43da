import { type AnyKysely, kyselySqlExecutor } from './sql-executor.js';
import type { XactExecutor } from '../../advisory/index.js';
import { describeType, InvalidArgumentError } from '../../core/index.js';
import { libraryXactExecutor, tryXactLockOn, type TryXactLockFunction, xactLockOn, type XactLockFunction } from '../shared/index.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../../advisory/index.js';

function kyselyExecutor(trx: AnyKysely): XactExecutor {
  const sql = kyselySqlExecutor(trx, 'trx', 'a Kysely transaction');
  // executeQuery alone does not make a Kysely: the executor and the transaction flag are read below.
  if (typeof (trx as { getExecutor?: unknown }).getExecutor !== 'function' || typeof (trx as { isTransaction?: unknown }).isTransaction !== 'boolean') {
    throw new InvalidArgumentError('trx', `expected a Kysely transaction, got ${describeType(trx)}`);
  }
  return libraryXactExecutor({
    sql,
    // Kysely makes a new Transaction object per transaction.
    identity: trx,
    // The dialect's adapter: one per Kysely instance, shared by its transactions (a new object each).
    database: trx.getExecutor().adapter,
    perTransaction: true,
    status: () => (trx.isTransaction ? 'active' : 'idle'),
    rollbackAdvice: 'let the error leave the transaction callback so Kysely rolls it back',
  });
}

/**
 * pg_advisory_xact_lock inside a Kysely transaction (db.transaction().execute(async (trx) => ...)).
 * When PostgreSQL does not answer within timeoutMs plus 2 s, rejects with LockUnavailableError and
 * dooms the transaction: its later statements fail until it is rolled back.
 *
 * @example
 * ```ts fragment
 * await db.transaction().execute(async (trx) => {
 *   const { token } = await xactLock(trx, 'invoice:42', { fencing: true }); // released at COMMIT or ROLLBACK
 *   await fenced(trx.updateTable('invoices').set({ status: 'paid' }).where('id', '=', 42), token).execute();
 * });
 * ```
 */
export const xactLock: XactLockFunction<AnyKysely> = xactLockOn(kyselyExecutor);

/**
 * One try at a transaction lock inside a Kysely transaction; null when it is held elsewhere.
 *
 * @example
 * ```ts fragment
 * await db.transaction().execute(async (trx) => {
 *   if (!(await tryXactLock(trx, 'invoice:42'))) return; // another transaction holds it
 *   // ...
 * });
 * ```
 */
export const tryXactLock: TryXactLockFunction<AnyKysely> = tryXactLockOn(kyselyExecutor);

export { addFencingColumn, addVersionColumn, fencedClaim, fencedUpdate, versionedUpdate } from './fencing.js';
export type { ClaimedRow, ColumnName, KyselyFencedClaimSpec, KyselyFencedUpdateSpec, KyselyVersionedUpdateSpec, TableName } from './fencing.js';
export { fenced, type FencedUpdateQuery } from './fenced.js';
export type { FencedClaimResult, FencedUpdateResult } from '../../fencing/index.js';
export type { FencingColumnOptions, VersionColumnOptions, VersionedUpdateResult } from '../../fencing/index.js';
export type { AnyKysely } from './sql-executor.js';
export { pgfenceMigrations, type PgfenceMigration, type PgfenceMigrationProvider } from './migrations.js';
