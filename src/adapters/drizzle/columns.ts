/**
 * The fencing and version columns as drizzle columns (drizzle-kit generates their migrations from your
 * schema like any other column), and the fencing trigger as the SQL of a custom migration.
 */
import { type HasDefault, type NotNull, sql } from 'drizzle-orm';
import { bigint, type PgBigInt64BuilderInitial, type PgTable } from 'drizzle-orm/pg-core';
import { fencingColumnSql } from '../../fencing/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { TableColumns, type ColumnKey } from './table-spec.js';

/**
 * The fencing column for a drizzle table: `bigint` (int64, read as a JS bigint), NULL until the first
 * fenced write. drizzle-kit emits `"fencing_token" bigint`.
 *
 * @example
 * ```ts fragment
 * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
 * import { fencingToken } from 'pgfence/drizzle';
 *
 * const orders = pgTable('orders', { id: integer('id').primaryKey(), status: text('status'), fencingToken: fencingToken() });
 * ```
 */
export function fencingToken(): PgBigInt64BuilderInitial<'fencing_token'>;
export function fencingToken<N extends string>(name: N): PgBigInt64BuilderInitial<N>;
export function fencingToken(name = 'fencing_token'): PgBigInt64BuilderInitial<string> {
  return bigint(name, { mode: 'bigint' });
}

/**
 * The version column for versionedUpdate: `bigint NOT NULL DEFAULT 0`, read as a JS bigint.
 * drizzle-kit emits `"version" bigint DEFAULT 0 NOT NULL`. (The default is written as SQL: drizzle-kit
 * 0.31 cannot serialize a bigint default such as `0n`.)
 *
 * @example
 * ```ts fragment
 * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
 * import { versionColumn } from 'pgfence/drizzle';
 *
 * const documents = pgTable('documents', { id: integer('id').primaryKey(), body: text('body'), version: versionColumn() });
 * ```
 */
export function versionColumn(): HasDefault<NotNull<PgBigInt64BuilderInitial<'version'>>>;
export function versionColumn<N extends string>(name: N): HasDefault<NotNull<PgBigInt64BuilderInitial<N>>>;
export function versionColumn(name = 'version'): HasDefault<NotNull<PgBigInt64BuilderInitial<string>>> {
  return bigint(name, { mode: 'bigint' }).notNull().default(sql`0`);
}

/** fencingTriggerSql()'s options. */
export interface FencingTriggerOptions<C extends string = string> {
  /** The key of the fencing column in the table; default: the column named fencing_token in SQL. */
  column?: C;
}
const FENCING_TRIGGER_OPTION_KEYS = optionKeys<FencingTriggerOptions>({ column: true });

/**
 * The SQL of a custom drizzle-kit migration (`drizzle-kit generate --custom`) that makes the table itself
 * refuse an UPDATE lowering its fencing token, whoever writes: a trigger calling
 * `pgfence.enforce_fencing_token` (pgfence's schema must be installed first: `migratePgfence(db)` or
 * `migrate()`). Idempotent: it also adds the column when it is missing, and replaces the trigger.
 *
 * ```sql fragment
 * ALTER TABLE "orders" ADD COLUMN IF NOT EXISTS "fencing_token" bigint;
 * DROP TRIGGER IF EXISTS "pgfence_fencing_token" ON "orders";
 * CREATE TRIGGER "pgfence_fencing_token" BEFORE UPDATE ON "orders" FOR EACH ROW EXECUTE FUNCTION pgfence.enforce_fencing_token('fencing_token');
 * ```
 *
 * @example
 * ```ts fragment
 * import { writeFile } from 'node:fs/promises';
 * import { integer, pgTable } from 'drizzle-orm/pg-core';
 * import { fencingToken, fencingTriggerSql } from 'pgfence/drizzle';
 *
 * const orders = pgTable('orders', { id: integer('id').primaryKey(), fencingToken: fencingToken() });
 * // After `npx drizzle-kit generate --custom --name orders_fencing_trigger`:
 * await writeFile('drizzle/0001_orders_fencing_trigger.sql', fencingTriggerSql(orders));
 * ```
 */
export function fencingTriggerSql<T extends PgTable>(table: T, opts?: FencingTriggerOptions<ColumnKey<T>>): string {
  const o = optionsObject<FencingTriggerOptions>(opts, 'fencingTriggerSql options', FENCING_TRIGGER_OPTION_KEYS);
  // The column's declared name (a migration is written without a drizzle instance, hence without its casing).
  const columns = new TableColumns({}, table);
  const column = columns.sqlName(o.column, 'column');
  return `${fencingColumnSql(columns.name, { enforce: true, ...(column === undefined ? {} : { column }) })}\n`;
}
