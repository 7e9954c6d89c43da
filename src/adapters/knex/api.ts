// pgfence/knex: transaction locks, fenced writes and pgfence's schema for Knex (3.x, the 'pg' client).
import { tryXactLockOn, type TryXactLockFunction, xactLockOn, type XactLockFunction } from '../shared/index.js';
import type { AnyKnex } from './raw.js';
import { knexXactExecutor } from './xact.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../../advisory/index.js';
export type { TryXactLockFunction, XactLockFunction } from '../shared/index.js';

/**
 * pg_advisory_xact_lock inside a Knex transaction (`knex.transaction(async (trx) => ...)`, or one from
 * `await knex.transaction()`): released at COMMIT or ROLLBACK. Outside a transaction (the Knex instance
 * itself, or a finished transaction) it throws NotInTransactionError; a name the transaction (or one of
 * its savepoints) already holds, NestedLockError. When PostgreSQL does not answer within timeoutMs plus
 * 2 s, rejects with LockUnavailableError and dooms the transaction: its connection is closed, so every
 * later statement in it fails and nothing of it commits.
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { fenced, xactLock } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * await db.transaction(async (trx) => {
 *   const { token } = await xactLock(trx, 'invoice:42', { fencing: true }); // released at COMMIT or ROLLBACK
 *   await fenced(trx('invoices').where({ id: 42 }).update({ status: 'paid' }), token).execute();
 * });
 * ```
 */
export const xactLock: XactLockFunction<AnyKnex> = xactLockOn(knexXactExecutor);

/**
 * One try at a transaction lock inside a Knex transaction; null when it is held elsewhere.
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { tryXactLock } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * await db.transaction(async (trx) => {
 *   if (!(await tryXactLock(trx, 'invoice:42'))) return; // another transaction holds it
 *   // ...
 * });
 * ```
 */
export const tryXactLock: TryXactLockFunction<AnyKnex> = tryXactLockOn(knexXactExecutor);

export { addFencingColumn, addVersionColumn, dropFencingColumn, dropVersionColumn, fencedClaim, fencedUpdate, versionedUpdate } from './fencing.js';
export type { ClaimedRow, ColumnName, KnexFencedClaimSpec, KnexFencedUpdateSpec, KnexVersionedUpdateSpec, TableName, TableRow, TableUpdate, WhereOf } from './tables.js';
export { fenced, type FencedUpdateQuery } from './fenced.js';
export { pgfenceMigrations, type PgfenceKnexMigration, type PgfenceMigrationSource, type PgfenceMigrationSpec } from './migrations.js';
export type { FencedClaimResult, FencedUpdateResult, FencingColumnOptions, VersionColumnOptions, VersionedUpdateResult } from '../../fencing/index.js';
export type { AnyKnex } from './raw.js';
