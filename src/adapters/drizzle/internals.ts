/**
 * Every place pgfence/drizzle reads below drizzle-orm's typed API, in one module. Each of these is a
 * property drizzle sets in a constructor and has kept, under the same name, since drizzle-orm 0.29:
 *
 * - `db.dialect` (PgDatabase, PgTransaction): the PgDialect of a drizzle() instance, shared by all its
 *   transactions and savepoints. It stands for the database, and its `casing` maps a column declared
 *   without a name to the name drizzle writes in SQL (drizzle({ casing: 'snake_case' })).
 * - an update builder's `config` ({ table, set, where, from, joins, withList, returning }), `session`
 *   and `dialect` (PgUpdateBase): fenced() rebuilds the caller's update with the guard.
 * - `Table.Symbol.OriginalName` / `Schema` / `Name`: an aliased table's own name, for the statements
 *   that read the same rows as the update (`UPDATE "orders" "o"` has to count `FROM "orders" "o"`).
 * - a node-postgres session's `client` (NodePgSession): the pg client a transaction runs on, which
 *   xactLock ends when PostgreSQL stops answering, as it does for a node-postgres client.
 *
 * The rest is drizzle's declared API: `is`, `entityKind`, `sql`, `getTableColumns`, `tx.execute`,
 * `tx.transaction`, `dialect.buildUpdateSet` / `sqlToQuery`, `session.execute`, column.mapToDriverValue /
 * mapFromDriverValue.
 */
import { type Column, entityKind, getTableColumns, is, type SQL, sql, Table } from 'drizzle-orm';
import { type PgDialect, type PgSession, PgTable, PgUpdateBase } from 'drizzle-orm/pg-core';
import { describeType, InvalidArgumentError } from '../../core/index.js';

/** The symbols drizzle keys a table's names by (Table.Symbol: declared internal, present since 0.2x). */
interface TableSymbols {
  Name: symbol;
  OriginalName: symbol;
  Schema: symbol;
  IsAlias: symbol;
}
const symbols = (Table as unknown as { Symbol: TableSymbols }).Symbol;

/** A drizzle PgDatabase or PgTransaction's dialect (one per drizzle() instance), if it has one. */
export function dialectOf(db: object): PgDialect | undefined {
  const dialect = (db as { dialect?: unknown }).dialect;
  return typeof dialect === 'object' && dialect !== null ? (dialect as PgDialect) : undefined;
}

/** The name a column has in SQL: its declared name, or its key under drizzle's `casing` when it was declared without one. */
export function columnSqlName(column: Column, dialect: PgDialect | undefined): string {
  const casing = (dialect as { casing?: { getColumnCasing?: (c: Column) => string } } | undefined)?.casing;
  return typeof casing?.getColumnCasing === 'function' ? casing.getColumnCasing(column) : column.name;
}

/** Whether `value` is (a subclass of) the drizzle class whose entity kind is `kind`, without importing that class. */
export function hasEntityKind(value: unknown, kind: string): boolean {
  if (typeof value !== 'object' || value === null) return false;
  for (let cls = Object.getPrototypeOf(value)?.constructor; cls; cls = Object.getPrototypeOf(cls)) {
    if ((cls as { [entityKind]?: unknown })[entityKind] === kind) return true;
  }
  return false;
}

/** A table's name as pgfence's fencing statements take it: `table` or `schema.table` (an alias: the table it stands for). */
export function qualifiedTableName(table: PgTable): string {
  const t = table as unknown as Record<symbol, string | undefined>;
  const name = t[symbols.OriginalName] ?? t[symbols.Name]!;
  const schema = t[symbols.Schema];
  return schema === undefined ? name : `${schema}.${name}`;
}

/** The table as a FROM item, its alias included, as drizzle writes it in the UPDATE. */
export function fromItem(table: PgTable): SQL {
  const t = table as unknown as Record<symbol, string | boolean | undefined>;
  const original = sql`${sql.identifier(String(t[symbols.OriginalName] ?? t[symbols.Name]))}`;
  const schema = t[symbols.Schema];
  const qualified = schema === undefined ? original : sql`${sql.identifier(String(schema))}.${original}`;
  return t[symbols.IsAlias] ? sql`${qualified} ${sql.identifier(String(t[symbols.Name]))}` : qualified;
}

/** The parts of a drizzle update builder fenced() reads. */
export interface UpdateParts {
  table: PgTable;
  /** The SET clause as `.set()` mapped it: column key -> Param, SQL or column. */
  set: Record<string, unknown>;
  where: SQL | undefined;
  session: PgSession;
  dialect: PgDialect;
  /** What fenced() cannot guard: FROM, joins, WITH, RETURNING. */
  extras: { from: boolean; joins: boolean; with: boolean; returning: boolean };
}

/** The table, SET, WHERE, session and dialect of an update builder (`tx.update(t).set(...).where(...)`). */
export function updateParts(builder: unknown): UpdateParts {
  if (!is(builder, PgUpdateBase)) {
    throw new InvalidArgumentError('builder', `expected a drizzle update builder (tx.update(table).set(...)), got ${describeType(builder)}`);
  }
  const b = builder as unknown as {
    config: { table: PgTable; set: Record<string, unknown>; where?: SQL; from?: unknown; joins?: unknown[]; withList?: unknown[]; returning?: unknown };
    session: PgSession;
    dialect: PgDialect;
  };
  const c = b.config;
  if (!c || !is(c.table, PgTable) || typeof c.set !== 'object' || !b.session || !b.dialect) {
    // A drizzle whose builders keep their parts elsewhere: say so rather than guess.
    throw new InvalidArgumentError('builder', 'this drizzle-orm version keeps an update builder’s parts where pgfence does not look: use fencedUpdate');
  }
  return {
    table: c.table,
    set: c.set,
    where: c.where,
    session: b.session,
    dialect: b.dialect,
    extras: { from: c.from !== undefined, joins: (c.joins?.length ?? 0) > 0, with: (c.withList?.length ?? 0) > 0, returning: c.returning !== undefined },
  };
}

/** The table's columns by their keys (getTableColumns), each with its SQL name. */
export function columnsOf(table: PgTable, dialect: PgDialect | undefined): Map<string, { column: Column; name: string }> {
  const columns = new Map<string, { column: Column; name: string }>();
  for (const [key, column] of Object.entries(getTableColumns(table) as Record<string, Column>)) {
    columns.set(key, { column, name: columnSqlName(column, dialect) });
  }
  return columns;
}

/**
 * The pg client (or pool client) a drizzle-orm/node-postgres transaction runs on; undefined for a pool
 * (a database outside any transaction) or another driver.
 */
export function nodePostgresClientOf(session: object): { end(): Promise<void> } | undefined {
  if (!hasEntityKind(session, 'NodePgSession')) return undefined;
  const client = (session as { client?: { end?: unknown; totalCount?: unknown } }).client;
  if (typeof client?.end !== 'function' || typeof client.totalCount === 'number') return undefined;
  return client as { end(): Promise<void> };
}
