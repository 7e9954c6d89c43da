import type { PgTable } from 'drizzle-orm/pg-core';
import { type FencedClaimResult, fencedClaimWith, type FencedUpdateResult, fencedUpdateWith, type VersionedUpdateResult, versionedUpdateWith } from '../../fencing/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { type AnyDrizzle, drizzleSqlExecutor } from './sql-executor.js';
import { type ColumnKey, type KeyOfColumnNamed, type RowFilter, type RowValues, TableColumns } from './table-spec.js';

/** The key of a table's fencing column when it is the one named `fencing_token` in SQL (what fencingToken() declares). */
export type FencingColumnKey<T extends PgTable> = KeyOfColumnNamed<T, 'fencing_token'>;
/** The key of a table's version column when it is the one named `version` in SQL (what versionColumn() declares). */
export type VersionColumnKey<T extends PgTable> = KeyOfColumnNamed<T, 'version'>;

/** fencedUpdate's spec, typed from a drizzle table: its columns by key, their values as the table types them. */
export interface DrizzleFencedUpdateSpec<T extends PgTable, C extends ColumnKey<T> = FencingColumnKey<T>> {
  table: T;
  /** Columns to write (not the fencing column: fencedUpdate writes the token there). */
  set: RowValues<T, C>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: RowFilter<T>;
  /** The holder's fencing token. */
  token: bigint;
  /** The key of the fencing column; default: the column named fencing_token in SQL. */
  column?: C;
}

/** fencedClaim's spec, typed from a drizzle table. */
export type DrizzleFencedClaimSpec<T extends PgTable, C extends ColumnKey<T> = FencingColumnKey<T>> = Omit<DrizzleFencedUpdateSpec<T, C>, 'set'>;

/** versionedUpdate's spec, typed from a drizzle table. */
export interface DrizzleVersionedUpdateSpec<T extends PgTable, C extends ColumnKey<T> = VersionColumnKey<T>> {
  table: T;
  /** Columns to write (not the version column: versionedUpdate writes `version + 1` there). */
  set: RowValues<T, C>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: RowFilter<T>;
  /** The version you read (a bigint, or a safe integer number). */
  version: bigint | number;
  /** The key of the version column; default: the column named version in SQL. */
  column?: C;
}

type AnySpec = { table?: unknown; set?: unknown; where?: unknown; column?: unknown };
const UPDATE_KEYS = optionKeys<DrizzleFencedUpdateSpec<PgTable, never>>({ table: true, set: true, where: true, token: true, column: true });
const CLAIM_KEYS = optionKeys<DrizzleFencedClaimSpec<PgTable, never>>({ table: true, where: true, token: true, column: true });
const VERSIONED_KEYS = optionKeys<DrizzleVersionedUpdateSpec<PgTable, never>>({ table: true, set: true, where: true, version: true, column: true });

/** The table, `where` and `column` of a spec in SQL names; `set` too when the call writes columns. */
function translate(db: AnyDrizzle, s: AnySpec, withSet: boolean) {
  const columns = new TableColumns(db, s.table);
  return {
    columns,
    table: columns.name,
    ...(withSet ? { set: columns.values(s.set, 'set') } : {}),
    where: columns.values(s.where, 'where'),
    ...(s.column === undefined ? {} : { column: columns.sqlName(s.column, 'column') }),
  };
}

/**
 * fencedUpdate for drizzle (a database or a transaction, node-postgres or postgres.js): the root
 * export's, with `set` and `where` keyed and typed by the table's columns, each value written the way
 * the column maps it for the driver. Same result.
 *
 * @example
 * ```ts fragment
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
 * import { fencedUpdate, fencingToken } from 'pgfence/drizzle';
 *
 * const orders = pgTable('orders', { id: integer('id').primaryKey(), status: text('status'), fencingToken: fencingToken() });
 * const r = await fencedUpdate(drizzle(pool), { table: orders, set: { status: 'paid' }, where: { id: 1 }, token: lease.token });
 * if (!r.applied) console.log(r.reason, r.currentToken); // 'stale' and the newer token, or 'missing'
 * ```
 */
export async function fencedUpdate<T extends PgTable, C extends ColumnKey<T> = FencingColumnKey<T>>(
  db: AnyDrizzle,
  spec: DrizzleFencedUpdateSpec<T, C>,
): Promise<FencedUpdateResult> {
  const s = optionsObject<DrizzleFencedUpdateSpec<PgTable, never>>(spec, 'fencedUpdate spec', UPDATE_KEYS);
  const sql = drizzleSqlExecutor(db);
  const { columns: _, ...core } = translate(db, s, true);
  return fencedUpdateWith(sql, { ...core, set: core.set!, token: s.token! });
}

/**
 * fencedClaim for drizzle: stamps `token` into the rows' fencing column before you read them, so an
 * older holder's later guarded write to them is refused. The rows come back as drizzle selects them
 * (`typeof table.$inferSelect`: keys, and values as the columns map them, the fencing column holding
 * `token`). Same result as the root export's.
 *
 * @example
 * ```ts fragment
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { integer, pgTable } from 'drizzle-orm/pg-core';
 * import { fencedClaim, fencedUpdate, fencingToken } from 'pgfence/drizzle';
 *
 * const counters = pgTable('counters', { id: integer('id').primaryKey(), n: integer('n').notNull(), fencingToken: fencingToken() });
 * await drizzle(pool).transaction(async (tx) => {
 *   const claim = await fencedClaim(tx, { table: counters, where: { id: 1 }, token });
 *   if (!claim.claimed) return; // a newer holder has the row
 *   await fencedUpdate(tx, { table: counters, set: { n: claim.rows[0]!.n + 1 }, where: { id: 1 }, token });
 * });
 * ```
 */
export async function fencedClaim<T extends PgTable, C extends ColumnKey<T> = FencingColumnKey<T>>(
  db: AnyDrizzle,
  spec: DrizzleFencedClaimSpec<T, C>,
): Promise<FencedClaimResult<T['$inferSelect']>> {
  const s = optionsObject<DrizzleFencedClaimSpec<PgTable, never>>(spec, 'fencedClaim spec', CLAIM_KEYS);
  const sql = drizzleSqlExecutor(db);
  const { columns, ...core } = translate(db, s, false);
  const result = await fencedClaimWith<Record<string, unknown>>(sql, { ...core, token: s.token! });
  return { ...result, rows: result.rows.map((row) => columns.row(row) as T['$inferSelect']) };
}

/**
 * versionedUpdate for drizzle: optimistic concurrency, no lock. Writes `set` and `version + 1` only where
 * the row still has the version you read; 'conflict' (with `currentVersion`) when someone wrote it since.
 *
 * @example
 * ```ts fragment
 * import { eq } from 'drizzle-orm';
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
 * import { versionColumn, versionedUpdate } from 'pgfence/drizzle';
 *
 * const documents = pgTable('documents', { id: integer('id').primaryKey(), body: text('body').notNull(), version: versionColumn() });
 * const orm = drizzle(pool);
 * const [doc] = await orm.select().from(documents).where(eq(documents.id, 7));
 * const r = await versionedUpdate(orm, { table: documents, set: { body: doc!.body + '!' }, where: { id: 7 }, version: doc!.version });
 * if (!r.applied) console.log(r.reason); // 'conflict': read again and retry
 * ```
 */
export async function versionedUpdate<T extends PgTable, C extends ColumnKey<T> = VersionColumnKey<T>>(
  db: AnyDrizzle,
  spec: DrizzleVersionedUpdateSpec<T, C>,
): Promise<VersionedUpdateResult> {
  const s = optionsObject<DrizzleVersionedUpdateSpec<PgTable, never>>(spec, 'versionedUpdate spec', VERSIONED_KEYS);
  const sql = drizzleSqlExecutor(db);
  const { columns: _, ...core } = translate(db, s, true);
  return versionedUpdateWith(sql, { ...core, set: core.set!, version: s.version! });
}
