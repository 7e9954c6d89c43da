import { tryXactLockOn, type TryXactLockFunction, xactLockOn, type XactLockFunction } from '../shared/index.js';
import type { DrizzleTransaction } from './sql-executor.js';
import { drizzleXactExecutor } from './xact.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../../advisory/index.js';

/**
 * pg_advisory_xact_lock inside a drizzle transaction (`db.transaction(async (tx) => ...)`, or a
 * savepoint `tx.transaction(...)` inside it), on node-postgres or postgres.js. Released at COMMIT or
 * ROLLBACK. Outside a transaction (the `db` itself) it rejects with NotInTransactionError. When
 * PostgreSQL does not answer within timeoutMs plus 2 s, rejects with LockUnavailableError and dooms the
 * transaction: its later statements fail until it is rolled back.
 *
 * @example
 * ```ts fragment
 * import { eq } from 'drizzle-orm';
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
 * import { fenced, fencingToken, xactLock } from 'pgfence/drizzle';
 *
 * const invoices = pgTable('invoices', { id: integer('id').primaryKey(), status: text('status'), fencingToken: fencingToken() });
 * const orm = drizzle(pool);
 * await orm.transaction(async (tx) => {
 *   const { token } = await xactLock(tx, 'invoice:42', { fencing: true }); // released at COMMIT or ROLLBACK
 *   await fenced(tx.update(invoices).set({ status: 'paid' }).where(eq(invoices.id, 42)), token).execute();
 * });
 * ```
 */
export const xactLock: XactLockFunction<DrizzleTransaction> = xactLockOn(drizzleXactExecutor);

/**
 * One try at a transaction lock inside a drizzle transaction; null when it is held elsewhere.
 *
 * @example
 * ```ts fragment
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { tryXactLock } from 'pgfence/drizzle';
 *
 * await drizzle(pool).transaction(async (tx) => {
 *   if (!(await tryXactLock(tx, 'invoice:42'))) return; // another transaction holds it
 *   // ...
 * });
 * ```
 */
export const tryXactLock: TryXactLockFunction<DrizzleTransaction> = tryXactLockOn(drizzleXactExecutor);

export type { AnyDrizzle, DrizzleTransaction } from './sql-executor.js';
export type { FencedClaimResult, FencedUpdateResult, VersionedUpdateResult } from '../../fencing/index.js';
export { fencedClaim, fencedUpdate, versionedUpdate } from './fencing.js';
export type { DrizzleFencedClaimSpec, DrizzleFencedUpdateSpec, DrizzleVersionedUpdateSpec, FencingColumnKey, VersionColumnKey } from './fencing.js';
export type { ColumnKey, KeyOfColumnNamed, RowFilter, RowValues } from './table-spec.js';
export { fenced, type FenceableUpdate, type FencedOptions, type FencedUpdateQuery } from './fenced.js';
export { fencingToken, fencingTriggerSql, type FencingTriggerOptions, versionColumn } from './columns.js';
export { migratePgfence } from './migrations.js';
