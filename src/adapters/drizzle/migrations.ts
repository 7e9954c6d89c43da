import type { MigrationFolders } from '../../migrate/index.js';
import { schemaMigrationSteps } from '../shared/index.js';
import { type AnyDrizzle, drizzleSqlExecutor } from './sql-executor.js';

/**
 * Installs or upgrades pgfence's own schema through a drizzle database (node-postgres or postgres.js),
 * for services that migrate with drizzle rather than with `migrate()`: call it where you call drizzle's
 * `migrate(db, { migrationsFolder })`, before it when your migrations use pgfence (a fencing trigger does).
 *
 * Each step of pgfence's schema (every `migrations/NNNN_name.sql` of the installed package, then its
 * changed `sql/` definitions) runs in a `db.transaction` of its own, under the same advisory lock as
 * `migrate()`, and is recorded in pgfence's history (`pgfence.schema_migrations`), which `migrate()`
 * shares: either may run first, concurrently too, and no file is applied twice. An applied file that was
 * since edited fails the run with code PGFENCE_MIGRATION_EDITED. Nothing goes into drizzle's own
 * `__drizzle_migrations` (its journal is yours), and drizzle-kit's default schema filter (`public`)
 * never sees the `pgfence` schema.
 *
 * @example
 * ```ts fragment
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { migrate as migrateDrizzle } from 'drizzle-orm/node-postgres/migrator';
 * import { migratePgfence } from 'pgfence/drizzle';
 *
 * const orm = drizzle(pool);
 * await migratePgfence(orm); // pgfence's schema first: your migrations may create fencing triggers
 * await migrateDrizzle(orm, { migrationsFolder: './drizzle' });
 * ```
 */
export async function migratePgfence(db: AnyDrizzle): Promise<void> {
  await migratePgfenceFrom(db);
}

/** migratePgfence over any folders (tests point it at fixtures; omitted, the package's own). */
export async function migratePgfenceFrom(db: AnyDrizzle, folders?: MigrationFolders): Promise<void> {
  drizzleSqlExecutor(db); // a wrong argument is refused before the files are read
  for (const step of await schemaMigrationSteps(folders)) {
    if (step.noop) continue;
    await db.transaction((tx) => step.run(drizzleSqlExecutor(tx)));
  }
}
