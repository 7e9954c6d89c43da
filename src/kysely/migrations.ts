import type { SqlExecutor } from '../core/index.js';
import { appliedDefinitions, appliedMigrations, applyDefinition, applyMigration, assertNoEditedMigrations, changedDefinitions, ensureHistoryTables, lockMigrationsForTransaction, MIGRATION_LOCK_TIMEOUT_MS, type MigrationFile, type MigrationFolders, type MigrationSet, packageFolders, planDefinitionMigrations, readDefinitionLog, readMigrationSet } from '../migrate/index.js';
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
  return migrationProviderFor(packageFolders());
}

/** The provider over any folders (tests point it at fixtures). */
export function migrationProviderFor(folders: MigrationFolders): PgfenceMigrationProvider {
  return {
    async getMigrations(): Promise<Record<string, PgfenceMigration>> {
      const [files, log] = await Promise.all([readMigrationSet(folders), readDefinitionLog(folders.sqlDir)]);
      const migrations: Record<string, PgfenceMigration> = {};
      for (const file of files.migrations) {
        migrations[file.fileName.slice(0, -'.sql'.length)] = {
          up: (db: AnyKysely) => underMigrationLock(db, (sql) => upMigration(sql, files, file)),
        };
      }
      const plan = planDefinitionMigrations(log, files.definitions, files.migrations);
      for (const name of plan.superseded) migrations[name] = { up: async () => {} };
      if (plan.current !== null) {
        migrations[plan.current] = { up: (db: AnyKysely) => underMigrationLock(db, (sql) => upDefinitions(sql, files)) };
      }
      return migrations;
    },
  };
}

async function upMigration(sql: SqlExecutor, files: MigrationSet, file: MigrationFile): Promise<void> {
  await ensureHistoryTables(sql);
  const applied = await appliedMigrations(sql);
  assertNoEditedMigrations(files.migrations, applied);
  if (!applied.has(file.version)) await applyMigration(sql, file);
}

async function upDefinitions(sql: SqlExecutor, files: MigrationSet): Promise<void> {
  await ensureHistoryTables(sql);
  assertNoEditedMigrations(files.migrations, await appliedMigrations(sql));
  for (const file of changedDefinitions(files.definitions, await appliedDefinitions(sql))) {
    await applyDefinition(sql, file);
  }
}

/** Runs `work` in a transaction (Kysely's, or one of its own) that holds the migration lock. */
async function underMigrationLock(db: AnyKysely, work: (sql: SqlExecutor) => Promise<void>): Promise<void> {
  const locked = async (trx: AnyKysely) => {
    const sql = kyselySqlExecutor(trx);
    await lockMigrationsForTransaction(sql, MIGRATION_LOCK_TIMEOUT_MS);
    await work(sql);
  };
  if (db.isTransaction) await locked(db);
  else await db.transaction().execute(locked);
}
