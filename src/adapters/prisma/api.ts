// pgfence/prisma: transaction locks, fenced writes and migrations for Prisma 7 (driver adapter @prisma/adapter-pg).
import { tryXactLockOn, type TryXactLockFunction, xactLockOn, type XactLockFunction } from '../shared/index.js';
import { afterDoom, prismaXactExecutor, type PrismaTransactionClient } from './transaction.js';

export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from '../../advisory/index.js';

// The shared xactLock / tryXactLock; each rejection waits for a doomed transaction's statement to be on its way (afterDoom).
const lockOn = xactLockOn(prismaXactExecutor);
const tryLockOn = tryXactLockOn(prismaXactExecutor);

/**
 * pg_advisory_xact_lock inside a Prisma interactive transaction (prisma.$transaction(async (tx) => ...)):
 * released when it commits or rolls back. Prisma ends an interactive transaction after its `timeout`
 * (5000 ms unless you give one), whatever a statement in it is waiting for: give $transaction a timeout
 * longer than the waits inside it. When PostgreSQL does not answer within timeoutMs plus 2 s, rejects
 * with LockUnavailableError and dooms the transaction: its later statements fail until it is rolled back.
 *
 * @example
 * ```ts fragment
 * await prisma.$transaction(async (tx) => {
 *   const { token } = await xactLock(tx, 'order:42', { fencing: true }); // released at COMMIT or ROLLBACK
 *   await fencedUpdate(tx, { model: 'Order', set: { status: 'paid' }, where: { id: 42 }, token });
 * }, { timeout: 15_000 });
 * ```
 */
export const xactLock: XactLockFunction<PrismaTransactionClient> = ((tx, name, opts) =>
  lockOn(tx, name, opts).catch((err: unknown) => afterDoom(tx, err))) as XactLockFunction<PrismaTransactionClient>;

/**
 * One try at a transaction lock inside a Prisma interactive transaction; null when it is held elsewhere.
 *
 * @example
 * ```ts fragment
 * await prisma.$transaction(async (tx) => {
 *   if (!(await tryXactLock(tx, 'order:42'))) return; // another transaction holds it
 *   // ...
 * });
 * ```
 */
export const tryXactLock: TryXactLockFunction<PrismaTransactionClient> = ((tx, name, opts) =>
  tryLockOn(tx, name, opts).catch((err: unknown) => afterDoom(tx, err))) as TryXactLockFunction<PrismaTransactionClient>;

export type { PrismaTransactionClient } from './transaction.js';
export type { PrismaRawClient } from './sql-executor.js';
export { fencedClaim, fencedUpdate, versionedUpdate } from './fencing.js';
export type { PrismaClaimedRow, PrismaFencedClaimSpec, PrismaFencedUpdateSpec, PrismaVersionedUpdateSpec } from './fencing.js';
export type { DefaultFencingField, PrismaFieldName, PrismaModelFields, PrismaModelName, PrismaModelPayloads, PrismaSet, PrismaWhere } from './model-types.js';
export type { TryXactLockFunction, XactLockFunction } from '../shared/index.js';
export type { FencedClaimResult, FencedUpdateResult, VersionedUpdateResult } from '../../fencing/index.js';
export { fencingColumnMigration, pgfenceMigrationSql, versionColumnMigration, writePgfenceMigration } from './migrations.js';
export type { PrismaColumnMigration, PrismaColumnMigrationOptions, WrittenMigration, WritePgfenceMigrationOptions } from './migrations.js';
