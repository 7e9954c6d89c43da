import type { SqlExecutor } from '../../core/index.js';
import type { MigrationFolders } from '../../migrate/index.js';
import { schemaMigrationSteps } from '../shared/index.js';
import { kyselySqlExecutor, type AnyKysely } from './sql-executor.js';

/**
 * Kysely's `Migration`, declared here: kysely 0.28 exports its type from 'kysely', 0.29 only from
 * 'kysely/migration' (which 0.28 lacks), so pgfence names neither and both accept this shape.
 *
 * @example
 * ```ts fragment
 * const migrations = await pgfenceMigrations().getMigrations();
 * for (const m of Object.values(migrations)) await m.up(db); // as a Migrator would, in order
 * ```
 */
export interface PgfenceMigration {
  up(db: AnyKysely): Promise<void>;
}

/**
 * Kysely's `MigrationProvider`, declared here for the same reason: pass it as `provider` to a Migrator.
 *
 * @example
 * ```ts fragment
 * const migrations = await pgfenceMigrations().getMigrations(); // what a Migrator runs, by name
 * console.log(Object.keys(migrations));
 * ```
 */
export interface PgfenceMigrationProvider {
  getMigrations(): Promise<Record<string, PgfenceMigration>>;
}

/**
 * pgfence's schema as a Kysely `MigrationProvider`, for services that migrate with Kysely rather
 * than with `migrate()`. Give it a Migrator of its own, with its own history tables, next to yours
 * (pgfence's names would otherwise interleave with your migrations' names and trip Kysely's order
 * check):
 *
 * ```ts
 * const migrator = new Migrator({
 *   db,
 *   provider: pgfenceMigrations(),
 *   migrationTableName: 'pgfence_kysely_migration',
 *   migrationLockTableName: 'pgfence_kysely_migration_lock',
 * });
 * const { error } = await migrator.migrateToLatest();
 * if (error) throw error;
 * ```
 *
 * - Each `migrations/NNNN_name.sql` is a migration named `NNNN_name`. Its up() applies the file and
 *   records it in `pgfence.schema_migrations`, or only checks it when already recorded there: this
 *   path and `migrate()` share one history, so either may run first and no file is applied twice.
 *   An applied file that was since edited fails the run with code PGFENCE_MIGRATION_EDITED.
 * - The repeatable `sql/` definitions form one last migration, `NNNN~definitions-rRRRR-<checksum>`:
 *   a changed set gets a new name, so Kysely runs it, and it re-applies the changed files. Earlier
 *   names stay on offer as no-ops and every name sorts after the ones before it, so Kysely's default
 *   checks pass: leave `allowUnorderedMigrations` false (the default) and `nameComparator` unset.
 * - up() takes the same advisory lock as `migrate()` (for its transaction), so instances running
 *   either path at once are safe. With `disableTransactions: true`, each up() opens its own
 *   transaction.
 * - There is no down(): `migrateDown()` leaves pgfence's schema in place.
 * - Migration files are multi-statement scripts: use a dialect that sends a query without
 *   parameters as one simple query, as `PostgresDialect` over node-postgres does.
 *
 * @example
 * ```ts fragment
 * await new Migrator({ db, provider: pgfenceMigrations(), migrationTableName: 'pgfence_kysely_migration',
 *   migrationLockTableName: 'pgfence_kysely_migration_lock' }).migrateToLatest();
 * ```
 */
export function pgfenceMigrations(): PgfenceMigrationProvider {
  return migrationProviderFor();
}

/** The provider over any folders (tests point it at fixtures; omitted, the package's own). */
export function migrationProviderFor(folders?: MigrationFolders): PgfenceMigrationProvider {
  return {
    async getMigrations(): Promise<Record<string, PgfenceMigration>> {
      const migrations: Record<string, PgfenceMigration> = {};
      for (const step of await schemaMigrationSteps(folders)) {
        migrations[step.name] = { up: (db: AnyKysely) => inTransaction(db, (sql) => step.run(sql)) };
      }
      return migrations;
    },
  };
}

/** Runs `work` in Kysely's transaction, or one of its own when the Migrator runs without transactions. */
async function inTransaction(db: AnyKysely, work: (sql: SqlExecutor) => Promise<void>): Promise<void> {
  if (db.isTransaction) await work(kyselySqlExecutor(db));
  else await db.transaction().execute((trx) => work(kyselySqlExecutor(trx)));
}
