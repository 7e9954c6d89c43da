import type { LockName } from '../keys.js';
import { type AnyKysely, kyselySqlExecutor } from './sql-executor.js';
import { doomTransactionSql, type FencedXactLockOptions, type FencedXactLockResult, tryXactLockWith, type XactExecutor, type XactLockOptions, type XactLockResult, xactLockWith } from '../advisory/index.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../advisory/index.js';

function kyselyExecutor(trx: AnyKysely): XactExecutor {
  const sql = kyselySqlExecutor(trx, 'trx', 'a Kysely transaction');
  return {
    ...sql,
    // Kysely makes a new Transaction object per transaction.
    identity: trx,
    // The dialect's adapter: one per Kysely instance, shared by its transactions (a new object each).
    database: trx.getExecutor().adapter,
    perTransaction: true,
    status: () => (trx.isTransaction ? 'active' : 'idle'),
    abandonAdvice:
      'the transaction is doomed (every later statement in it fails): let the error leave the transaction callback so Kysely rolls it back, and retry',
    abandon() {
      // The connection is Kysely's, not ours to end: queue, right behind the unanswered statement, one
      // that fails, so whatever the caller sends next is refused (25P02) until the rollback.
      sql.script(doomTransactionSql).catch(() => {}); // it fails by design
    },
  };
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
export async function xactLock(trx: AnyKysely, name: LockName, opts: FencedXactLockOptions): Promise<FencedXactLockResult>;
export async function xactLock(trx: AnyKysely, name: LockName, opts?: XactLockOptions): Promise<XactLockResult>;
export async function xactLock(trx: AnyKysely, name: LockName, opts?: XactLockOptions): Promise<XactLockResult> {
  return xactLockWith(kyselyExecutor(trx), name, opts);
}

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
export async function tryXactLock(
  trx: AnyKysely,
  name: LockName,
  opts: Omit<FencedXactLockOptions, 'timeoutMs'>,
): Promise<FencedXactLockResult | null>;
export async function tryXactLock(trx: AnyKysely, name: LockName, opts?: Omit<XactLockOptions, 'timeoutMs'>): Promise<XactLockResult | null>;
export async function tryXactLock(
  trx: AnyKysely,
  name: LockName,
  opts?: Omit<XactLockOptions, 'timeoutMs'>,
): Promise<XactLockResult | null> {
  return tryXactLockWith(kyselyExecutor(trx), name, opts);
}

export { addFencingColumn, fencedClaim, fencedUpdate } from './fencing.js';
export type { ClaimedRow, ColumnName, KyselyFencedClaimSpec, KyselyFencedUpdateSpec, TableName } from './fencing.js';
export { fenced, type FencedUpdateQuery } from './fenced.js';
export type { FencedClaimResult, FencedUpdateResult } from '../fencing/index.js';
export type { FencingColumnOptions } from '../fencing/index.js';
export type { AnyKysely } from './sql-executor.js';
export { pgfenceMigrations, type PgfenceMigration, type PgfenceMigrationProvider } from './migrations.js';
