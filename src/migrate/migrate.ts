import pg from 'pg';
import { openPool, resolveConnectionString } from '../session/index.js';
import { describeType, InvalidArgumentError } from '../core/index.js';
import { optionKeys, optionsObject } from '../options.js';
import { packageFolders } from './package-folders.js';
import { runMigrations, type MigrateResult } from './runner.js';

export interface MigrateOptions {
  /** A PostgreSQL URL or libpq keyword/value settings (default: the PG* environment); migrate() opens one connection and ends it before returning. */
  connectionString?: string;
  /** Or a pool of yours: one connection is checked out for the run (waiting at most 60 s for it, as for the migration lock) and given back. */
  pool?: pg.Pool;
}
const MIGRATE_OPTION_KEYS = optionKeys<MigrateOptions>({ connectionString: true, pool: true });

/**
 * Brings pgfence's schema up to date: applies pending migrations/ in order and re-applies changed
 * sql/ definitions. Safe to call from every instance at start-up: runs are serialised by an advisory
 * lock, and a run that waited finds nothing left to do. Throws a PgfenceError with code
 * PGFENCE_MIGRATION_EDITED (before applying anything) if an applied migration file was changed.
 *
 * @example
 * ```ts fragment
 * const { applied } = await migrate({ connectionString: process.env.DATABASE_URL });
 * console.log(applied); // the files it applied: [] when the schema was up to date
 * ```
 */
export async function migrate(opts: MigrateOptions = {}): Promise<MigrateResult> {
  const target = validateMigrateOptions(opts);
  const folders = packageFolders();
  if ('pool' in target) return runMigrations({ pool: target.pool, ...folders });
  const pool = openPool(target.connectionString, { max: 1, application_name: 'pgfence_migrate' });
  // An idle connection failing between statements must not crash the process.
  pool.on('error', () => {});
  try {
    return await runMigrations({ pool, ...folders });
  } finally {
    await pool.end();
  }
}

/** Exactly one of connectionString and pool, each of the right type; checked before any I/O. */
function validateMigrateOptions(opts: unknown): { connectionString: string } | { pool: pg.Pool } {
  if (typeof opts !== 'object' || opts === null || Array.isArray(opts)) {
    throw new InvalidArgumentError('opts', `expected { connectionString } or { pool }, got ${describeType(opts)}`);
  }
  const { connectionString, pool } = optionsObject<MigrateOptions>(opts, 'opts', MIGRATE_OPTION_KEYS) as { connectionString?: unknown; pool?: unknown };
  if (connectionString !== undefined) {
    if (typeof connectionString !== 'string') {
      throw new InvalidArgumentError('connectionString', `expected a PostgreSQL URL string, got ${describeType(connectionString)}`);
    }
    // node-postgres would quietly fall back to localhost and the PG* environment for an empty one.
    if (connectionString.trim() === '') throw new InvalidArgumentError('connectionString', 'must not be empty');
  }
  if (pool !== undefined && (typeof pool !== 'object' || pool === null || typeof (pool as { connect?: unknown }).connect !== 'function')) {
    throw new InvalidArgumentError('pool', `expected a pg.Pool, got ${describeType(pool)}`);
  }
  if (connectionString !== undefined && pool !== undefined) {
    throw new InvalidArgumentError('opts', 'pass either connectionString or pool, not both');
  }
  if (pool !== undefined) return { pool: pool as pg.Pool };
  // A URL or libpq keyword/value settings as one URL, or none: the PG* environment. A bad one throws here, before any I/O.
  return { connectionString: resolveConnectionString(connectionString as string | undefined) };
}
