import type { Kysely, Transaction } from 'kysely';
import type { LockName } from '../keys.js';
import { kyselySqlExecutor } from './sql-executor.js';
import { doomTransactionSql, type FencedXactLockOptions, type FencedXactLockResult, tryXactLockWith, type XactExecutor, type XactLockOptions, type XactLockResult, xactLockWith } from '../advisory/index.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../advisory/index.js';

// Any database schema: the lock statements touch none of the caller's tables.
type AnyTransaction = Transaction<any> | Kysely<any>;

function kyselyExecutor(trx: AnyTransaction): XactExecutor {
  const sql = kyselySqlExecutor(trx, 'trx', 'a Kysely transaction');
  return {
    ...sql,
    // Kysely makes a new Transaction object per transaction.
    identity: trx,
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
 */
export async function xactLock(trx: AnyTransaction, name: LockName, opts: FencedXactLockOptions): Promise<FencedXactLockResult>;
export async function xactLock(trx: AnyTransaction, name: LockName, opts?: XactLockOptions): Promise<XactLockResult>;
export async function xactLock(trx: AnyTransaction, name: LockName, opts?: XactLockOptions): Promise<XactLockResult> {
  return xactLockWith(kyselyExecutor(trx), name, opts);
}

/** One try at a transaction lock inside a Kysely transaction; null when it is held elsewhere. */
export async function tryXactLock(
  trx: AnyTransaction,
  name: LockName,
  opts: Omit<FencedXactLockOptions, 'timeoutMs'>,
): Promise<FencedXactLockResult | null>;
export async function tryXactLock(trx: AnyTransaction, name: LockName, opts?: Omit<XactLockOptions, 'timeoutMs'>): Promise<XactLockResult | null>;
export async function tryXactLock(
  trx: AnyTransaction,
  name: LockName,
  opts?: Omit<XactLockOptions, 'timeoutMs'>,
): Promise<XactLockResult | null> {
  return tryXactLockWith(kyselyExecutor(trx), name, opts);
}

export { addFencingColumn, fenced, fencedClaim, fencedUpdate } from './fencing.js';
export type { FencedUpdateResult, FencedUpdateSpec } from '../fencing/index.js';
export type { FencedClaimResult, FencedClaimSpec } from '../fencing/index.js';
export type { FencingColumnOptions } from '../fencing/index.js';
export { pgfenceMigrations, type PgfenceMigration, type PgfenceMigrationProvider } from './migrations.js';
