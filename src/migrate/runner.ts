import type pg from 'pg';
import { LockUnavailableError, PgfenceError, pgSqlExecutor, type SqlExecutor } from '../core/index.js';
import { checkOut, type CheckedOut } from '../session/index.js';
import { readMigrationSet, type MigrationFolders, type MigrationSet } from './files.js';
import {
  applyDefinition,
  applyMigration,
  appliedDefinitions,
  appliedMigrations,
  assertNoEditedMigrations,
  changedDefinitions,
  ensureHistoryTables,
  pendingMigrations,
} from './history.js';
import { isMigrationLockTimeout, lockMigrationsForSession, MIGRATION_LOCK_TIMEOUT_MS, unlockMigrations } from './lock.js';
import { beginSql, commitSql, rollbackSql } from './migrate-sql.js';

export interface MigrateResult {
  /** What this run applied, in order: 'migrations/0001_schema.sql', 'sql/fencing.sql', ... */
  applied: string[];
}

/**
 * Applies what is pending in `folders` on one connection of `pool`, holding the migration lock for
 * the whole run: a concurrent run waits, then finds nothing to do. Each file runs in its own
 * transaction together with its history row.
 */
export async function runMigrations(opts: {
  pool: pg.Pool;
  migrationsDir: string;
  sqlDir: string;
  lockTimeoutMs?: number;
}): Promise<MigrateResult> {
  const folders: MigrationFolders = { migrationsDir: opts.migrationsDir, sqlDir: opts.sqlDir };
  // Files first: a bad file name fails before any database work.
  const files = await readMigrationSet(folders).catch((err: unknown) => {
    throw asPgfenceError(err);
  });
  const lockTimeoutMs = opts.lockTimeoutMs ?? MIGRATION_LOCK_TIMEOUT_MS;

  // A checked-out client has no 'error' listener of the pool's: without ours, a dropped connection would crash the process.
  let connectionFailed = false;
  const onError = () => {
    connectionFailed = true;
  };
  let checkedOut: CheckedOut;
  try {
    // A pool of the caller's may have no connectionTimeoutMillis (and wait for a free connection without end): the run's own bound.
    checkedOut = await checkOut(opts.pool, onError, lockTimeoutMs);
  } catch (err) {
    throw new LockUnavailableError(`migrate() could not connect to PostgreSQL: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
  const { client } = checkedOut;
  const db = pgSqlExecutor(client);
  let reusable = false;
  try {
    try {
      await lockMigrationsForSession(db, lockTimeoutMs);
    } catch (err) {
      // A wait that timed out leaves a healthy connection holding nothing.
      reusable = isMigrationLockTimeout(err) && !connectionFailed;
      throw err;
    }
    try {
      return await applyPending(db, files);
    } finally {
      // A connection whose unlock failed is ended instead: the server then drops the lock with it.
      reusable = (await unlockQuietly(db)) && !connectionFailed;
    }
  } catch (err) {
    throw asPgfenceError(err);
  } finally {
    // A connection that is not reused is ended, our listener kept: its end may still be reported.
    if (reusable) checkedOut.release();
    else client.release(true);
  }
}

async function applyPending(db: SqlExecutor, files: MigrationSet): Promise<MigrateResult> {
  const applied: string[] = [];
  await ensureHistoryTables(db);
  const migrated = await appliedMigrations(db);
  assertNoEditedMigrations(files.migrations, migrated);
  for (const file of pendingMigrations(files.migrations, migrated)) {
    await inTransaction(db, () => applyMigration(db, file));
    applied.push(file.label);
  }
  // Definitions come last: they may use anything the migrations created.
  const defined = await appliedDefinitions(db);
  for (const file of changedDefinitions(files.definitions, defined)) {
    await inTransaction(db, () => applyDefinition(db, file));
    applied.push(file.label);
  }
  return { applied };
}

/** True when the lock was released and the connection is fit to go back to the pool. */
async function unlockQuietly(db: SqlExecutor): Promise<boolean> {
  try {
    return await unlockMigrations(db);
  } catch {
    return false;
  }
}

async function inTransaction(db: SqlExecutor, work: () => Promise<void>): Promise<void> {
  await db.script(beginSql);
  try {
    await work();
    await db.script(commitSql);
  } catch (err) {
    // If even ROLLBACK fails, the connection is broken; the unlock then fails too and it is ended.
    await db.script(rollbackSql).catch(() => {});
    throw err;
  }
}

function asPgfenceError(err: unknown): PgfenceError {
  if (err instanceof PgfenceError) return err;
  return new PgfenceError('PGFENCE_MIGRATION_FAILED', `pgfence migrate failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });
}
