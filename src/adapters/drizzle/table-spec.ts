/**
 * A guarded write's spec in drizzle's terms (a table object, its columns by their keys, values as the
 * schema types them) turned into the core's (table and column names as in SQL, values as the driver
 * takes them), and a claimed row turned back. Translation only: what the spec means is fencing/'s.
 */
import { type Column, is, SQL } from 'drizzle-orm';
import { PgTable } from 'drizzle-orm/pg-core';
import { describeType, InvalidArgumentError } from '../../core/index.js';
import { columnsOf, dialectOf, qualifiedTableName } from './internals.js';

/** The keys of a drizzle table's columns (`orders.status` has the key 'status', whatever its SQL name). */
export type ColumnKey<T extends PgTable> = keyof T['_']['columns'] & string;

/** The key of the table's column named `N` in SQL (never when it declares none). */
export type KeyOfColumnNamed<T extends PgTable, N extends string> = {
  [K in ColumnKey<T>]: T['_']['columns'][K]['_']['name'] extends N ? K : never;
}[ColumnKey<T>];

/** Equality conditions on the table's columns by key, typed as the table selects them (null means IS NULL). */
export type RowFilter<T extends PgTable> = { [K in keyof T['$inferSelect']]?: T['$inferSelect'][K] | null };

/** Values for the table's columns by key, typed as the table inserts them, except the column C written by pgfence itself. */
export type RowValues<T extends PgTable, C extends string> = Omit<{ [K in keyof T['$inferInsert']]?: T['$inferInsert'][K] }, C>;

/** The table's columns, keyed as the caller wrote them, with their SQL names. */
export class TableColumns {
  readonly table: PgTable;
  /** `table` or `schema.table`, as the core's fencing statements take it. */
  readonly name: string;
  private readonly columns: ReturnType<typeof columnsOf>;

  constructor(db: object, table: unknown) {
    if (!is(table, PgTable)) throw new InvalidArgumentError('table', `expected a drizzle table (pgTable(...)), got ${describeType(table)}`);
    this.table = table;
    this.name = qualifiedTableName(table);
    this.columns = columnsOf(table, dialectOf(db));
  }

  /** `{ key: value }` as `{ sqlName: driverValue }`: each value through its column's mapToDriverValue (null stays NULL). */
  values(entries: unknown, argument: string): Record<string, unknown> {
    if (typeof entries !== 'object' || entries === null || Array.isArray(entries)) {
      throw new InvalidArgumentError(argument, `expected an object of column key: value, got ${describeType(entries)}`);
    }
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(entries)) {
      const { column, name } = this.column(key, `${argument}.${key}`);
      if (is(value, SQL)) {
        throw new InvalidArgumentError(`${argument}.${key}`, 'an SQL expression is not a value: guard your own update builder with fenced(tx.update(...).set(...), token) instead');
      }
      // undefined is the core's to refuse (it names null as the way to write NULL).
      out[name] = value === null || value === undefined ? value : column.mapToDriverValue(value);
    }
    return out;
  }

  /** A column key as its SQL name (the `column` option); undefined stays undefined (the core's default name). */
  sqlName(key: unknown, argument: string): string | undefined {
    if (key === undefined) return undefined;
    if (typeof key !== 'string') throw new InvalidArgumentError(argument, `expected a column key of table "${this.name}", got ${describeType(key)}`);
    return this.column(key, argument).name;
  }

  /** A row as the driver returned it (SQL names, driver values) as drizzle would select it: keys, mapFromDriverValue. */
  row(raw: Record<string, unknown>): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const [key, { column, name }] of this.columns) {
      if (!(name in raw)) continue;
      const value = raw[name];
      out[key] = value === null || value === undefined ? null : column.mapFromDriverValue(value);
    }
    return out;
  }

  private column(key: string, argument: string): { column: Column; name: string } {
    const found = this.columns.get(key);
    if (!found) {
      const known = [...this.columns.keys()].join(', ');
      throw new InvalidArgumentError(argument, `table "${this.name}" has no column with the key "${key.slice(0, 80)}" (its keys: ${known})`);
    }
    return found;
  }
}
