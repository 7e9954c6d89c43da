import { and, type Column, type SQL, sql } from 'drizzle-orm';
import type { PgTable } from 'drizzle-orm/pg-core';
import { InvalidArgumentError } from '../../core/index.js';
import { checkToken, countedUpdate, DEFAULT_FENCING_COLUMN, fencingGuard, type FencedUpdateResult, fencedUpdateResult, type GuardedCounts, guardedWriteError, type SqlTag } from '../../fencing/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { columnsOf, fromItem, qualifiedTableName, updateParts, type UpdateParts } from './internals.js';
import { driverErrors } from './sql-executor.js';
import type { ColumnKey } from './table-spec.js';

/**
 * A drizzle update of one table that fenced() can guard: `tx.update(table).set(...)`, with or without
 * `.where(...)`. The types leave out `.from()`, joins and `.returning()`; an update under `db.with(...)`
 * is refused when fenced() is called.
 */
export interface FenceableUpdate<T extends PgTable = PgTable> {
  readonly _: { readonly dialect: 'pg'; readonly table: T; readonly from: undefined; readonly joins: []; readonly returning: undefined };
}

/** fenced()'s options. */
export interface FencedOptions<C extends string = string> {
  /** The key of the fencing column in the table; default: the column named fencing_token in SQL. */
  column?: C;
}
const FENCED_OPTION_KEYS = optionKeys<FencedOptions>({ column: true });

/** A guarded drizzle update, ready to run: `execute()` reports what it wrote and what it refused, and why. */
export interface FencedUpdateQuery {
  /**
   * Runs the update (one statement); stale vs missing as fencedUpdate reports them.
   *
   * @example
   * ```ts fragment
   * import { eq } from 'drizzle-orm';
   * import { drizzle } from 'drizzle-orm/node-postgres';
   * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
   * import { fenced, fencingToken } from 'pgfence/drizzle';
   *
   * const orders = pgTable('orders', { id: integer('id').primaryKey(), status: text('status'), fencingToken: fencingToken() });
   * const r = await fenced(drizzle(pool).update(orders).set({ status: 'paid' }).where(eq(orders.id, 1)), token).execute();
   * console.log(r.applied, r.written, r.refused, r.reason);
   * ```
   */
  execute(): Promise<FencedUpdateResult>;
  /**
   * The statement it runs, as drizzle's own `toSQL()` gives it, for logging or inspection.
   *
   * @example
   * ```ts fragment
   * import { eq } from 'drizzle-orm';
   * import { drizzle } from 'drizzle-orm/node-postgres';
   * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
   * import { fenced, fencingToken } from 'pgfence/drizzle';
   *
   * const orders = pgTable('orders', { id: integer('id').primaryKey(), status: text('status'), fencingToken: fencingToken() });
   * console.log(fenced(drizzle(pool).update(orders).set({ status: 'paid' }).where(eq(orders.id, 1)), token).toSQL().sql);
   * ```
   */
  toSQL(): { sql: string; params: unknown[] };
}

/**
 * Adds the fencing guard to a drizzle update: it writes `token` into the fencing column and applies only
 * where that column is NULL or not newer than `token`. The same statement counts the rows the update's
 * `where` matched, so the result says whether a newer holder had written them ('stale', with
 * `currentToken`) or no row matched ('missing'), as fencedUpdate does:
 *
 * ```sql fragment
 * with "pgfence updated" as (update "orders" set "status" = $1, "fencing_token" = $2
 *   where ("orders"."id" = $3 and ("fencing_token" is null or "fencing_token" <= $4)) returning 1)
 * select (select count(*) from "pgfence updated")::int as written,
 *        (select count(*) from "orders" where "orders"."id" = $5)::int as matched,
 *        (select max("fencing_token") from "orders" where "orders"."id" = $6)::text as current
 * ```
 *
 * It runs on the builder's own connection (the `tx` or `db` it came from).
 *
 * @example
 * ```ts fragment
 * import { eq } from 'drizzle-orm';
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { integer, pgTable, text } from 'drizzle-orm/pg-core';
 * import { fenced, fencingToken, xactLock } from 'pgfence/drizzle';
 *
 * const orders = pgTable('orders', { id: integer('id').primaryKey(), status: text('status'), fencingToken: fencingToken() });
 * await drizzle(pool).transaction(async (tx) => {
 *   const lock = await xactLock(tx, 'order:1', { fencing: true });
 *   const r = await fenced(tx.update(orders).set({ status: 'paid' }).where(eq(orders.id, 1)), lock.token).execute();
 *   if (!r.applied) console.log(r.reason); // 'stale': a newer holder has written; 'missing': no such order
 * });
 * ```
 */
export function fenced<T extends PgTable>(builder: FenceableUpdate<T>, token: bigint, opts?: FencedOptions<ColumnKey<T>>): FencedUpdateQuery {
  const parts = updateParts(builder);
  checkToken(token);
  const o = optionsObject<FencedOptions>(opts, 'fenced options', FENCED_OPTION_KEYS);
  const refused = Object.entries(parts.extras).filter(([, present]) => present);
  if (refused.length > 0) {
    const what = refused.map(([name]) => ({ from: 'FROM', joins: 'joins', with: 'WITH', returning: 'RETURNING' })[name]).join(', ');
    throw new InvalidArgumentError('builder', `fenced() guards an update of one table (it has ${what}): use fencedUpdate, or add the guard in SQL`);
  }
  const fencing = fencingColumn(parts, o.column);
  const statement = countingStatement(parts, fencing, token);
  const table = qualifiedTableName(parts.table);
  const columnName = fencing.name === DEFAULT_FENCING_COLUMN ? undefined : fencing.name;
  return {
    toSQL() {
      const { sql: text, params } = parts.dialect.sqlToQuery(statement);
      return { sql: text, params };
    },
    async execute() {
      try {
        const [counts] = await driverErrors(() => parts.session.all<GuardedCounts>(statement));
        return fencedUpdateResult(counts!);
      } catch (err) {
        throw guardedWriteError(err, { call: 'fenced', table, column: columnName, token, where: {} });
      }
    },
  };
}

interface FencingColumn {
  /** The column's key, when the table declares it (its SET then goes through drizzle's own). */
  key: string | undefined;
  /** The declared column (the token's parameter goes through it). */
  column: Column | undefined;
  /**
   * The column's name, unqualified as in fencedUpdate's statement: each part of the statement reads one
   * table, and PostgreSQL then names a missing column in its error the way guardedWriteError reads it.
   */
  ref: SQL;
  name: string;
}

/** The fencing column: the declared one with key `column`, else the declared one named fencing_token, else that name. */
function fencingColumn(parts: UpdateParts, column: string | undefined): FencingColumn {
  const columns = columnsOf(parts.table, parts.dialect);
  const named = (key: string | undefined, c: { column: Column; name: string } | undefined, name: string) => ({ key, column: c?.column, ref: sql`${sql.identifier(name)}`, name });
  if (column !== undefined) {
    const found = columns.get(column);
    if (!found) throw new InvalidArgumentError('column', `table "${qualifiedTableName(parts.table)}" has no column with the key "${String(column).slice(0, 80)}"`);
    return named(column, found, found.name);
  }
  for (const [key, c] of columns) if (c.name === DEFAULT_FENCING_COLUMN) return named(key, c, c.name);
  return named(undefined, undefined, DEFAULT_FENCING_COLUMN);
}

/**
 * The caller's update with the token in its SET, the guard in its WHERE and `returning 1`, as a
 * data-modifying CTE; then the rows its own WHERE matches, counted from the statement's snapshot (from
 * before the update): matched - written = refused, as fencedUpdate counts them.
 */
function countingStatement(parts: UpdateParts, fencing: FencingColumn, token: bigint): SQL {
  const { table, where, dialect } = parts;
  const tokenParam = fencing.column ? sql.param(token, fencing.column) : sql.param(token);
  // Drizzle's own SET (casing, $onUpdate columns, each value through its column), the token as the fencing column's value.
  const set = fencing.key === undefined ? dialect.buildUpdateSet(table, parts.set as never) : dialect.buildUpdateSet(table, { ...parts.set, [fencing.key]: tokenParam } as never);
  const assignments = fencing.key === undefined ? sql`${set}, ${fencing.ref} = ${tokenParam}` : set;
  const guard = fencingGuard(sql as SqlTag<SQL>, sql`${fencing.ref}`, sql`${tokenParam}`);
  const rows = fromItem(table);
  const matched = where ? sql`${rows} where ${where}` : rows;
  const update = sql`update ${rows} set ${assignments} where ${where ? and(where, guard) : guard} returning 1`;
  return countedUpdate(sql as SqlTag<SQL>, update, matched, sql`${fencing.ref}`);
}
