import { isLockNotAvailable, PgfenceError, type SqlExecutor } from '../core/index.js';
import { internalKey } from '../keys.js';
import { lockSessionSql, lockTransactionSql, unlockSessionSql } from './migrate-sql.js';

/** The advisory-lock key every pgfence migration run (migrate() and the Kysely provider) takes. */
export const MIGRATION_LOCK_KEY = internalKey('migrate');

/** How long a run waits for another run to finish before giving up. */
export const MIGRATION_LOCK_TIMEOUT_MS = 60_000;

/** Waits for the migration lock and keeps it for the session (migrate()), until unlockMigrations(). */
export async function lockMigrationsForSession(db: SqlExecutor, timeoutMs: number): Promise<void> {
  await waitingAtMost(timeoutMs, () => db.query(lockSessionSql, [MIGRATION_LOCK_KEY.toString(), `${Math.ceil(timeoutMs)}ms`]));
}

/** Waits for the migration lock and keeps it until the current transaction ends (the Kysely path). */
export async function lockMigrationsForTransaction(db: SqlExecutor, timeoutMs: number): Promise<void> {
  await waitingAtMost(timeoutMs, () => db.query(lockTransactionSql, [MIGRATION_LOCK_KEY.toString(), `${Math.ceil(timeoutMs)}ms`]));
}

/** Releases the session's migration lock; false if it was not held. */
export async function unlockMigrations(db: SqlExecutor): Promise<boolean> {
  const [row] = await db.query<{ unlocked: boolean }>(unlockSessionSql, [MIGRATION_LOCK_KEY.toString()]);
  return row?.unlocked === true;
}

export function isMigrationLockTimeout(err: unknown): boolean {
  return err instanceof PgfenceError && err.code === 'PGFENCE_MIGRATION_LOCK_TIMEOUT';
}

async function waitingAtMost(timeoutMs: number, wait: () => Promise<unknown>): Promise<void> {
  try {
    await wait();
  } catch (err) {
    if (!isLockNotAvailable(err)) throw err;
    throw new PgfenceError(
      'PGFENCE_MIGRATION_LOCK_TIMEOUT',
      `another pgfence migration run held the migration lock for more than ${timeoutMs} ms; ` +
        'it may still be applying a long migration: retry once it has finished',
      { cause: err },
    );
  }
}
