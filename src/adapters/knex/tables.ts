/**
 * The specs of pgfence/knex's guarded writes, typed from the tables you declare to Knex:
 *
 * ```ts
 * declare module 'knex/types/tables' {
 *   interface Tables { orders: Order; documents: Knex.CompositeTableType<Doc, NewDoc, DocUpdate> }
 * }
 * ```
 *
 * A declared table's `set` is its update type (Knex's `ResolveTableType<…, 'update'>`, partial), its
 * `where` and `column` its row's columns and their types (`'base'`), and claimed rows are its rows. Any
 * other table name is a plain string, with `Record<string, unknown>` for set, where and rows, as Knex
 * itself types an undeclared table.
 */
import type { Knex } from 'knex';

/** A table name: one declared in Knex's `Tables` (offered first), or any other string. */
export type TableName = Knex.TableNames | (string & {});

/** A table's row as Knex selects it (its `'base'` type); `Record<string, unknown>` for an undeclared table. */
export type TableRow<T extends string> = T extends Knex.TableNames ? Knex.ResolveTableType<Knex.TableType<T>, 'base'> : Record<string, unknown>;

/** What an update of the table may write (its `'update'` type, every column optional). */
export type TableUpdate<T extends string> = T extends Knex.TableNames ? Partial<Knex.ResolveTableType<Knex.TableType<T>, 'update'>> : Record<string, unknown>;

/** A column of the table; any string for an undeclared table. */
export type ColumnName<T extends string> = T extends Knex.TableNames ? keyof TableRow<T> & string : string;

/** Equality conditions on the table's columns (null means IS NULL). */
export type WhereOf<T extends string> = T extends Knex.TableNames ? { [K in keyof TableRow<T>]?: TableRow<T>[K] | null } : Record<string, unknown>;

/** fencedUpdate's spec for Knex: the table, the columns it writes and those selecting the rows. */
export interface KnexFencedUpdateSpec<T extends string, C extends string = 'fencing_token'> {
  table: T;
  /** Columns to write (not the fencing column: fencedUpdate writes the token there). Values, not Knex expressions. */
  set: Omit<TableUpdate<T>, C>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: WhereOf<T>;
  /** The holder's fencing token. */
  token: bigint;
  /** The fencing column; default 'fencing_token'. */
  column?: C & ColumnName<T>;
}

/** fencedClaim's spec for Knex. */
export type KnexFencedClaimSpec<T extends string, C extends string = 'fencing_token'> = Omit<KnexFencedUpdateSpec<T, C>, 'set'>;

/** A claimed row: the table's row, its fencing column the token (a bigint). */
export type ClaimedRow<T extends string, C extends string = 'fencing_token'> = T extends Knex.TableNames
  ? Omit<TableRow<T>, C> & { [K in C]: bigint }
  : Record<string, unknown>;

/** versionedUpdate's spec for Knex. */
export interface KnexVersionedUpdateSpec<T extends string, C extends string = 'version'> {
  table: T;
  /** Columns to write (not the version column: versionedUpdate writes `version + 1` there). Values, not Knex expressions. */
  set: Omit<TableUpdate<T>, C>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: WhereOf<T>;
  /** The version you read (a bigint, or a safe integer number). */
  version: bigint | number;
  /** The version column; default 'version'. */
  column?: C & ColumnName<T>;
}
