import type { XactExecutor } from '../../advisory/index.js';
import { libraryXactExecutor, tryXactLockOn, type TryXactLockFunction, xactLockOn, type XactLockFunction } from '../shared/index.js';
import { type TypeormClient, typeormSqlExecutor, typeormTarget } from './sql-executor.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../../advisory/index.js';

function typeormExecutor(trx: TypeormClient): XactExecutor {
  const target = typeormTarget(trx, 'trx');
  const runner = target.runner;
  return libraryXactExecutor({
    sql: typeormSqlExecutor(target, { scriptResults: true }),
    // A query runner outlives its transactions (a user's runner may run many, one after the other): the
    // server tells them apart, by the transaction's start time.
    identity: runner ?? target.client,
    // One DataSource, one database: whether it has the lease guard is kept per DataSource.
    database: target.dataSource,
    perTransaction: false,
    status: () => {
      // dataSource.manager has no runner: each of its statements runs alone on a pool connection.
      if (!runner || runner.isReleased) return 'idle';
      // Not marked active: the caller may still have sent BEGIN through runner.query(); the server decides.
      return runner.isTransactionActive ? 'active' : 'unknown';
    },
    rollbackAdvice: 'let the error leave the dataSource.transaction() callback (or call queryRunner.rollbackTransaction())',
  });
}

/**
 * pg_advisory_xact_lock inside a TypeORM transaction: on the EntityManager `dataSource.transaction()`
 * hands its callback, or on a QueryRunner after `startTransaction()`. Released at COMMIT or ROLLBACK.
 * Outside a transaction (`dataSource.manager`) it rejects with NotInTransactionError. When PostgreSQL
 * does not answer within timeoutMs plus 2 s, rejects with LockUnavailableError and dooms the
 * transaction: its later statements fail until it is rolled back.
 *
 * @example
 * ```ts fragment
 * import type { DataSource } from 'typeorm';
 * import { fencedUpdate, xactLock } from 'pgfence/typeorm';
 *
 * async function pay(dataSource: DataSource, id: number) {
 *   await dataSource.transaction(async (manager) => {
 *     const { token } = await xactLock(manager, `invoice:${id}`, { fencing: true }); // released at COMMIT
 *     await fencedUpdate(manager, { entity: 'invoices', set: { status: 'paid' }, where: { id }, token });
 *   });
 * }
 * ```
 */
export const xactLock: XactLockFunction<TypeormClient> = xactLockOn(typeormExecutor);

/**
 * One try at a transaction lock inside a TypeORM transaction; null when it is held elsewhere.
 *
 * @example
 * ```ts fragment
 * import type { QueryRunner } from 'typeorm';
 * import { tryXactLock } from 'pgfence/typeorm';
 *
 * async function nightlyReport(queryRunner: QueryRunner) {
 *   await queryRunner.startTransaction();
 *   try {
 *     if (await tryXactLock(queryRunner, 'report:nightly')) {
 *       // ... build the report in this transaction
 *     } // else another instance is building it
 *     await queryRunner.commitTransaction(); // releases the lock
 *   } catch (err) {
 *     await queryRunner.rollbackTransaction();
 *     throw err;
 *   }
 * }
 * ```
 */
export const tryXactLock: TryXactLockFunction<TypeormClient> = tryXactLockOn(typeormExecutor);

export type { TypeormClient } from './sql-executor.js';
export { fencedClaim, fencedUpdate, versionedUpdate } from './fencing.js';
export type { EntityColumns, EntityProperty, TypeormFencedClaimSpec, TypeormFencedUpdateSpec, TypeormVersionedUpdateSpec } from './fencing.js';
export { fenced, type FencedUpdateQuery } from './fenced.js';
export { fencingColumnMigration, versionColumnMigration, type ColumnMigrationClass, type FencingColumnMigrationOptions, type VersionColumnMigrationOptions } from './column-migrations.js';
export { pgfenceMigrations, type PgfenceMigrationClass } from './migrations.js';
export type { FencedClaimResult, FencedUpdateResult, VersionedUpdateResult } from '../../fencing/index.js';
