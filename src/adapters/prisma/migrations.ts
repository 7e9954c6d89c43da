import { mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describeType, InvalidArgumentError } from '../../core/index.js';
import { bareIdentifier, DEFAULT_FENCING_COLUMN, DEFAULT_VERSION_COLUMN, fencingColumnSql, quoteColumn, versionColumnSql } from '../../fencing/index.js';
import type { MigrationFolders } from '../../migrate/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { schemaMigrationScript } from '../shared/index.js';

/** A column for one of your models: the SQL for its Prisma migration, and the field to add to the model. */
export interface PrismaColumnMigration {
  /** The migration.sql text (idempotent). */
  sql: string;
  /** The line to add to the model in schema.prisma, e.g. `fencingToken BigInt? @map("fencing_token")`. */
  schemaField: string;
}

export interface PrismaColumnMigrationOptions {
  /** The column; default 'fencing_token' (fencing) or 'version'. */
  column?: string;
  /** The field's name in the schema; default the column in camelCase ('fencingToken'), mapped to it with @map. */
  field?: string;
}
const FENCING_KEYS = optionKeys<PrismaColumnMigrationOptions & { enforce?: boolean }>({ column: true, field: true, enforce: true });
const VERSION_KEYS = optionKeys<PrismaColumnMigrationOptions>({ column: true, field: true });

/**
 * The fencing column of one of your tables as a Prisma migration: the SQL of a migration.sql (the
 * column, and with `enforce` the trigger that refuses a lower token whoever writes: it needs pgfence's
 * schema, see pgfenceMigrationSql) and the field to add to the model, which Prisma then reads and
 * writes as the column's BigInt. Prisma Migrate ignores triggers: it sees no drift.
 *
 * @example
 * ```ts fragment
 * const { sql, schemaField } = fencingColumnMigration('orders', { enforce: true });
 * console.log(schemaField); // fencingToken BigInt? @map("fencing_token")
 * // prisma migrate dev --create-only --name orders_fencing, then put `sql` in its migration.sql
 * ```
 */
export function fencingColumnMigration(table: string, opts?: PrismaColumnMigrationOptions & { enforce?: boolean }): PrismaColumnMigration {
  const o = optionsObject<PrismaColumnMigrationOptions & { enforce?: boolean }>(opts, 'fencingColumnMigration options', FENCING_KEYS);
  const column = o.column ?? DEFAULT_FENCING_COLUMN;
  const sql = fencingColumnSql(table, { column, ...(o.enforce === undefined ? {} : { enforce: o.enforce }) });
  return { sql: `${sql}\n`, schemaField: schemaField(column, o.field, 'BigInt?') };
}

/**
 * The version column of one of your tables (bigint NOT NULL DEFAULT 0, for versionedUpdate) as a
 * Prisma migration: the SQL of a migration.sql and the field to add to the model.
 *
 * @example
 * ```ts fragment
 * const { sql, schemaField } = versionColumnMigration('documents');
 * console.log(schemaField); // version BigInt @default(0)
 * ```
 */
export function versionColumnMigration(table: string, opts?: PrismaColumnMigrationOptions): PrismaColumnMigration {
  const o = optionsObject<PrismaColumnMigrationOptions>(opts, 'versionColumnMigration options', VERSION_KEYS);
  const column = o.column ?? DEFAULT_VERSION_COLUMN;
  return { sql: `${versionColumnSql(table, { column })}\n`, schemaField: schemaField(column, o.field, 'BigInt @default(0)') };
}

/** `name Type @map("column")`, the @map only where the field's name is not the column's. */
function schemaField(column: string, field: unknown, type: string): string {
  const name = field ?? camelCase(bareIdentifier(quoteColumn(column, 'column')));
  if (typeof name !== 'string' || !/^[A-Za-z][A-Za-z0-9_]*$/.test(name)) {
    throw new InvalidArgumentError('field', `expected a Prisma field name (a letter, then letters, digits or _), got ${typeof name === 'string' ? `"${name.slice(0, 80)}"` : describeType(name)}`);
  }
  return `${name} ${type}${name === column ? '' : ` @map("${column}")`}`;
}

function camelCase(column: string): string {
  return column.replace(/_+([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
}

/**
 * pgfence's own schema as the SQL of one Prisma migration: every `migrations/` file and `sql/` definition
 * of the installed pgfence, in one statement that applies (and records in pgfence's own history) only what
 * the database lacks. Databases migrated by migrate() or `pgfence migrate` take it too, and migrate() finds
 * nothing to do after it. After upgrading pgfence, add it again as a new migration (writePgfenceMigration
 * does both): the new one brings what changed.
 *
 * @example
 * ```ts fragment
 * import { mkdir, writeFile } from 'node:fs/promises';
 *
 * await mkdir('prisma/migrations/20250101000000_pgfence', { recursive: true });
 * await writeFile('prisma/migrations/20250101000000_pgfence/migration.sql', await pgfenceMigrationSql());
 * ```
 */
export async function pgfenceMigrationSql(): Promise<string> {
  return (await pgfenceMigration()).sql;
}

async function pgfenceMigration(folders?: MigrationFolders): Promise<{ sql: string; version: string }> {
  const script = await schemaMigrationScript(folders);
  const header = [
    `-- pgfence's schema (${script.version}), written by pgfence/prisma: do not edit.`,
    `-- Applies only what pgfence's own history (pgfence.schema_migrations, pgfence.schema_definitions) lacks,`,
    `-- in one statement; migrate() and \`pgfence migrate\` share that history.`,
  ];
  return { sql: `${header.join('\n')}\n${script.sql}`, version: script.version };
}

export interface WritePgfenceMigrationOptions {
  /** Prisma's migrations folder; default 'prisma/migrations' (relative to the working directory). */
  migrationsDir?: string;
  /** The migration's name after the timestamp; default 'pgfence'. */
  name?: string;
  /** The migration's time (its folder's UTC timestamp, which orders it among yours); default now. */
  now?: Date;
}
const WRITE_KEYS = optionKeys<WritePgfenceMigrationOptions>({ migrationsDir: true, name: true, now: true });

export interface WrittenMigration {
  /** The migration's folder, e.g. 'prisma/migrations/20250101000000_pgfence'. */
  path: string;
  /** False when the newest migration of that name already holds this SQL: nothing was written. */
  written: boolean;
}

/**
 * Writes pgfence's schema as a Prisma migration, `<migrationsDir>/<YYYYMMDDHHMMSS>_pgfence/migration.sql`,
 * unless the newest migration named `*_pgfence` already holds the same SQL (then it writes nothing).
 * Run it once before your migrations use pgfence (an enforcing fencing trigger calls pgfence's
 * functions), and again after upgrading pgfence; `prisma migrate deploy` (or `dev`) then applies it.
 *
 * @example
 * ```ts fragment
 * const { path, written } = await writePgfenceMigration(); // prisma/migrations/<timestamp>_pgfence
 * console.log(written ? `wrote ${path}` : `${path} is up to date`);
 * ```
 */
export async function writePgfenceMigration(opts?: WritePgfenceMigrationOptions): Promise<WrittenMigration> {
  return writePgfenceMigrationFrom(opts);
}

/** writePgfenceMigration over any folders (tests point it at fixtures; omitted, the package's own). */
export async function writePgfenceMigrationFrom(opts?: WritePgfenceMigrationOptions, folders?: MigrationFolders): Promise<WrittenMigration> {
  const o = optionsObject<WritePgfenceMigrationOptions>(opts, 'writePgfenceMigration options', WRITE_KEYS);
  const dir = o.migrationsDir ?? join('prisma', 'migrations');
  const name = o.name ?? 'pgfence';
  if (typeof dir !== 'string' || dir === '') throw new InvalidArgumentError('migrationsDir', `expected a folder, got ${describeType(dir)}`);
  if (typeof name !== 'string' || !/^[A-Za-z0-9_]{1,100}$/.test(name)) throw new InvalidArgumentError('name', 'expected letters, digits and _ (Prisma names migrations so)');
  const now = o.now ?? new Date();
  if (!(now instanceof Date) || Number.isNaN(now.getTime())) throw new InvalidArgumentError('now', `expected a valid Date, got ${describeType(now)}`);
  const { sql } = await pgfenceMigration(folders);
  const existing = (await readdir(dir).catch(() => [] as string[])).filter((f) => new RegExp(`^\\d{14}_${name}$`).test(f)).sort();
  const newest = existing.at(-1);
  // No folder yet, or a migration folder without its file: nothing to compare with, so this one is written.
  const newestSql = newest === undefined ? null : await readFile(join(dir, newest, 'migration.sql'), 'utf8').catch(() => null);
  if (newest !== undefined && newestSql === sql) {
    return { path: join(dir, newest), written: false };
  }
  const path = join(dir, `${timestamp(now)}_${name}`);
  await mkdir(path, { recursive: true });
  // Whole or not at all: Prisma must never see half a migration.
  const partial = join(path, `.migration.sql.${process.pid}.tmp`);
  await writeFile(partial, sql);
  await rename(partial, join(path, 'migration.sql'));
  return { path, written: true };
}

/** Prisma's migration timestamp: UTC, YYYYMMDDHHMMSS. */
function timestamp(d: Date): string {
  return d.toISOString().replace(/[-:T]/g, '').slice(0, 14);
}
