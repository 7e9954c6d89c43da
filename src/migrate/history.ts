import { PgfenceError, type SqlExecutor } from '../core/index.js';
import type { DefinitionFile, MigrationFile } from './files.js';
import {
  appliedDefinitionsSql,
  appliedMigrationsSql,
  createHistoryTablesSql,
  historyTablesExistSql,
  recordDefinitionSql,
  recordMigrationSql,
} from './migrate-sql.js';

/*
 * The steps of a run, shared by migrate() (node-postgres) and the Kysely provider. Transactions and
 * the migration lock are the caller's: each step only reads or writes.
 */

export async function ensureHistoryTables(db: SqlExecutor): Promise<void> {
  const [state] = await db.query<{ ready: boolean }>(historyTablesExistSql, []);
  if (!state?.ready) await db.script(createHistoryTablesSql);
}

/** version -> checksum of every migration the database has recorded. */
export async function appliedMigrations(db: SqlExecutor): Promise<Map<number, string>> {
  const rows = await db.query<{ version: number; checksum: string }>(appliedMigrationsSql, []);
  return new Map(rows.map((r) => [r.version, r.checksum]));
}

/** file name -> checksum of every definition the database has recorded. */
export async function appliedDefinitions(db: SqlExecutor): Promise<Map<string, string>> {
  const rows = await db.query<{ name: string; checksum: string }>(appliedDefinitionsSql, []);
  return new Map(rows.map((r) => [r.name, r.checksum]));
}

/**
 * Refuses to go on when an applied migration's file has changed since: the database would no longer
 * match what the files say, and re-running the file is not an option.
 */
export function assertNoEditedMigrations(files: readonly MigrationFile[], applied: ReadonlyMap<number, string>): void {
  for (const file of files) {
    const recorded = applied.get(file.version);
    if (recorded !== undefined && recorded !== file.checksum) {
      throw new PgfenceError(
        'PGFENCE_MIGRATION_EDITED',
        `${file.label} was edited after it was applied (recorded checksum ${recorded.slice(0, 12)}..., file now ${file.checksum.slice(0, 12)}...). ` +
          'Do not edit applied migrations: restore the file and add a new migration (the next NNNN_name.sql) for the change.',
      );
    }
  }
}

export function pendingMigrations(files: readonly MigrationFile[], applied: ReadonlyMap<number, string>): MigrationFile[] {
  return files.filter((f) => !applied.has(f.version));
}

/** Definitions that are new or whose file changed since they were last applied. */
export function changedDefinitions(files: readonly DefinitionFile[], applied: ReadonlyMap<string, string>): DefinitionFile[] {
  return files.filter((f) => applied.get(f.fileName) !== f.checksum);
}

/** Runs a migration file and records it: the caller wraps both in one transaction. */
export async function applyMigration(db: SqlExecutor, file: MigrationFile): Promise<void> {
  await failingAs(file.label, () => db.script(file.sql));
  await db.query(recordMigrationSql, [file.version, file.fileName, file.checksum]);
}

/** Runs a definition file and records its checksum: the caller wraps both in one transaction. */
export async function applyDefinition(db: SqlExecutor, file: DefinitionFile): Promise<void> {
  await failingAs(file.label, () => db.script(file.sql));
  await db.query(recordDefinitionSql, [file.fileName, file.checksum]);
}

/** A file's SQL error, named after the file (PostgreSQL's own error is the cause). */
async function failingAs(label: string, run: () => Promise<unknown>): Promise<void> {
  try {
    await run();
  } catch (err) {
    throw new PgfenceError('PGFENCE_MIGRATION_FAILED', `${label} failed: ${(err as Error)?.message ?? String(err)}; it was rolled back`, { cause: err });
  }
}
