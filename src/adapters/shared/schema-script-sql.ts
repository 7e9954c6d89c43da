/**
 * pgfence's own schema as one SQL script, for migrators that run SQL files, each once, by name (Prisma
 * Migrate's migration.sql): the same steps as migrate() and schemaMigrationSteps(), decided by the
 * database rather than by Node, since such a file is written once and applied later, anywhere.
 *
 * The script is a single DO block, so it is one statement and one transaction however the migrator sends
 * it. Inside, as migrate() does:
 * - the migration lock (the same advisory lock as migrate() and the migrators, for this transaction;
 *   60 s at most), then pgfence's history tables;
 * - each `migrations/NNNN_name.sql` applied and recorded in `pgfence.schema_migrations` only when the
 *   history lacks it, and refused (PGFENCE_MIGRATION_EDITED in the message, nothing applied) when the
 *   history has it under another checksum;
 * - each `sql/` definition re-applied and recorded where the history has another checksum for it.
 * So migrate(), the other migrators and this script share one history: any may run first, and a later
 * migrate() finds nothing to do.
 */
import { createHistoryTablesSql, type MigrationFolders, MIGRATION_LOCK_KEY, MIGRATION_LOCK_TIMEOUT_MS, packageFolders, planDefinitionMigrations, readDefinitionLog, readMigrationSet } from '../../migrate/index.js';

export interface SchemaScript {
  /** The script: one DO statement. */
  sql: string;
  /** What it brings a database to: the last migration file's version and the definitions' name, e.g. `0003~definitions-r0016-940a5cb8`. */
  version: string;
}

/** pgfence's schema as one idempotent SQL statement (the package's own files unless `folders` is given). */
export async function schemaMigrationScript(folders: MigrationFolders = packageFolders()): Promise<SchemaScript> {
  const [files, log] = await Promise.all([readMigrationSet(folders), readDefinitionLog(folders.sqlDir)]);
  const texts = [createHistoryTablesSql, ...files.migrations.map((f) => f.sql), ...files.definitions.map((f) => f.sql)];
  const outer = dollarTag('pgfence_schema', texts);
  const inner = dollarTag('pgfence_file', texts);
  const quoted = (text: string) => `${inner}${text}${inner}`;
  const body: string[] = [
    `  -- The lock of every pgfence migration run (migrate(), the migrators), until this transaction ends.`,
    `  PERFORM set_config('lock_timeout', '${MIGRATION_LOCK_TIMEOUT_MS}ms', true);`,
    `  PERFORM pg_advisory_xact_lock(${MIGRATION_LOCK_KEY}::int8);`,
    `  PERFORM set_config('lock_timeout', caller_lock_timeout, true);`,
    `  EXECUTE ${quoted(createHistoryTablesSql)};`,
  ];
  for (const file of files.migrations) {
    body.push(
      '',
      `  -- ${file.label}`,
      `  SELECT checksum INTO recorded FROM pgfence.schema_migrations WHERE version = ${file.version};`,
      `  IF recorded IS NULL THEN`,
      `    EXECUTE ${quoted(file.sql)};`,
      `    INSERT INTO pgfence.schema_migrations (version, name, checksum) VALUES (${file.version}, ${literal(file.fileName)}, ${literal(file.checksum)});`,
      `  ELSIF recorded <> ${literal(file.checksum)} THEN`,
      `    RAISE EXCEPTION 'PGFENCE_MIGRATION_EDITED: ${file.label} was edited after it was applied (recorded checksum %..., file %...)', left(recorded, 12), ${literal(file.checksum.slice(0, 12))}`,
      `      USING HINT = 'Do not edit applied migrations: restore the file and add a new migration for the change.';`,
      `  END IF;`,
    );
  }
  for (const file of files.definitions) {
    body.push(
      '',
      `  -- ${file.label}`,
      `  IF (SELECT checksum FROM pgfence.schema_definitions WHERE name = ${literal(file.fileName)}) IS DISTINCT FROM ${literal(file.checksum)} THEN`,
      `    EXECUTE ${quoted(file.sql)};`,
      `    INSERT INTO pgfence.schema_definitions (name, checksum) VALUES (${literal(file.fileName)}, ${literal(file.checksum)})`,
      `      ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now();`,
      `  END IF;`,
    );
  }
  const plan = planDefinitionMigrations(log, files.definitions, files.migrations);
  const lastMigration = String(files.migrations.at(-1)?.version ?? 0).padStart(4, '0');
  const sql = [`DO ${outer}`, 'DECLARE', `  caller_lock_timeout constant text := current_setting('lock_timeout');`, '  recorded text;', 'BEGIN', ...body, `END`, `${outer};`, ''].join('\n');
  return { sql, version: plan.current ?? lastMigration };
}

/** A dollar-quote tag that none of `texts` contains. */
function dollarTag(base: string, texts: readonly string[]): string {
  for (let n = 0; ; n++) {
    const tag = `$${base}${n === 0 ? '' : `_${n}`}$`;
    if (!texts.some((t) => t.includes(tag))) return tag;
  }
}

/** A string literal; only file names and hex checksums, which hold no quote, go through here. */
function literal(value: string): string {
  return `'${value.replace(/'/g, "''")}'`;
}
