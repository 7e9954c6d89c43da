/**
 * pgfence's own schema as named steps, for the data layers whose migrators run a list of named
 * migrations (Kysely's provider, Knex's migration source, TypeORM's migration classes). Every
 * library's wrapper only names the steps its way and opens its transaction; what a step does is here.
 *
 * - Each `migrations/NNNN_name.sql` is a step named `NNNN_name`: it applies the file and records it in
 *   `pgfence.schema_migrations`, or only checks it when already recorded there. This path and
 *   `migrate()` share one history, so either may run first and no file is applied twice. An applied
 *   file that was since edited fails the run with code PGFENCE_MIGRATION_EDITED.
 * - The repeatable `sql/` definitions form one last step, `NNNN~definitions-rRRRR-<checksum>`: a changed
 *   set gets a new name, so the migrator runs it, and it re-applies the changed files. Earlier names stay
 *   on offer as no-ops (`noop: true`), and every name sorts after the ones before it.
 * - A step takes the same advisory lock as `migrate()` for the caller's transaction, so instances running
 *   either path at once are safe.
 */
import type { SqlExecutor } from '../../core/index.js';
import {
  appliedDefinitions,
  appliedMigrations,
  applyDefinition,
  applyMigration,
  assertNoEditedMigrations,
  changedDefinitions,
  ensureHistoryTables,
  lockMigrationsForTransaction,
  MIGRATION_LOCK_TIMEOUT_MS,
  type MigrationFile,
  type MigrationFolders,
  type MigrationSet,
  packageFolders,
  planDefinitionMigrations,
  readDefinitionLog,
  readMigrationSet,
} from '../../migrate/index.js';

export interface SchemaMigrationStep {
  /** `NNNN_name` for a migration file, `NNNN~definitions-rRRRR-<checksum>` for the definitions. */
  name: string;
  /** An earlier definitions step, kept on offer so that a migrator's history stays in order: it does nothing. */
  noop: boolean;
  /** Applies the step; call it inside a transaction (it takes the migration lock for that transaction). */
  run(sql: SqlExecutor): Promise<void>;
}

/** pgfence's schema as steps, in the order a migrator must run them (the package's own files unless `folders` is given). */
export async function schemaMigrationSteps(folders: MigrationFolders = packageFolders()): Promise<SchemaMigrationStep[]> {
  const [files, log] = await Promise.all([readMigrationSet(folders), readDefinitionLog(folders.sqlDir)]);
  const steps: SchemaMigrationStep[] = files.migrations.map((file) => ({
    name: file.fileName.slice(0, -'.sql'.length),
    noop: false,
    run: (sql: SqlExecutor) => underMigrationLock(sql, () => upMigration(sql, files, file)),
  }));
  const plan = planDefinitionMigrations(log, files.definitions, files.migrations);
  for (const name of plan.superseded) steps.push({ name, noop: true, run: async () => {} });
  if (plan.current !== null) {
    steps.push({ name: plan.current, noop: false, run: (sql: SqlExecutor) => underMigrationLock(sql, () => upDefinitions(sql, files)) });
  }
  return steps;
}

async function underMigrationLock(sql: SqlExecutor, work: () => Promise<void>): Promise<void> {
  await lockMigrationsForTransaction(sql, MIGRATION_LOCK_TIMEOUT_MS);
  await work();
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
