import { sql } from 'drizzle-orm';
import { PgDatabase, type PgQueryResultHKT, type PgTransaction } from 'drizzle-orm/pg-core';
import { describeType, InvalidArgumentError, type SqlExecutor } from '../../core/index.js';
import { splitPlaceholders } from '../shared/index.js';
import { hasEntityKind } from './internals.js';

/** A drizzle PostgreSQL database (`drizzle(...)` of any pg driver) or transaction, of any schema. */
export type AnyDrizzle = PgDatabase<PgQueryResultHKT, any, any>;

/** A drizzle PostgreSQL transaction (the `tx` of `db.transaction(async (tx) => ...)`, or of `tx.transaction` inside it), of any schema. */
export type DrizzleTransaction = PgTransaction<PgQueryResultHKT, any, any>;

/**
 * A drizzle database or transaction as a SqlExecutor: every statement goes through `db.execute(sql)`,
 * pgfence's `$n` text cut at its placeholders and handed to drizzle's `sql` tag with the values in
 * order. Rows come back as the driver parsed them (int8 as text, the way pgfence reads tokens).
 * `argument` and `expected` name the caller's argument in the InvalidArgumentError.
 */
export function drizzleSqlExecutor(db: unknown, argument = 'db', expected = 'a drizzle PostgreSQL database or transaction'): SqlExecutor {
  if (!(db instanceof PgDatabase) && !hasEntityKind(db, 'PgDatabase')) {
    throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(db)}`);
  }
  const d = db as AnyDrizzle;
  return {
    scriptResults: true,
    async query<R>(text: string, values: unknown[]) {
      const { strings, values: ordered } = splitPlaceholders(text, values);
      // Each value as a Param: drizzle's template would spread an array into a list of parameters.
      const statement = sql(strings as unknown as TemplateStringsArray, ...ordered.map((v) => sql.param(v)));
      return rowsOf(await driverErrors(() => d.execute(statement))) as R[];
    },
    async script(text: string) {
      // No parameters: both node-postgres and postgres.js send it as one simple query, which may hold many statements.
      return resultsOf(await driverErrors(() => d.execute(sql.raw(text))));
    },
  };
}

/**
 * Runs a drizzle call and throws the driver's own error (pg's DatabaseError, postgres.js's PostgresError,
 * or the connection error): drizzle wraps it in a DrizzleQueryError, whose `cause` carries the SQLSTATE
 * and severity pgfence reads.
 */
export async function driverErrors<T>(run: () => PromiseLike<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    throw driverError(err);
  }
}

/** The driver's error inside drizzle's DrizzleQueryError (any number of wrappings), else the error itself. */
export function driverError(err: unknown): unknown {
  let e = err;
  while (isQueryError(e) && e.cause !== undefined) e = e.cause;
  return e;
}

/**
 * drizzle's DrizzleQueryError, known by its shape: a second copy of drizzle-orm (CJS next to ESM) has a
 * class of its own, and older drizzle-orm versions have none (they throw the driver's error as it is).
 */
function isQueryError(err: unknown): err is { cause?: unknown } {
  return err instanceof Error && typeof (err as { query?: unknown }).query === 'string' && 'params' in err && 'cause' in err;
}

type Row = Record<string, unknown>;

/**
 * A single statement's rows: node-postgres answers with a QueryResult ({ rows }), postgres.js with an
 * array of rows.
 */
function rowsOf(result: unknown): Row[] {
  if (Array.isArray(result)) return result as Row[];
  return ((result as { rows?: Row[] } | null)?.rows ?? []) as Row[];
}

/**
 * The rows of a simple query of one or more statements, statement by statement in order. node-postgres:
 * one QueryResult, or an array of them (one per statement). postgres.js: one Result (an array of rows),
 * or an array of Results (3.4 leaves out a statement without rows after the first, 4 does not: xactLock
 * finds a wait's row by its columns, not by its position). Told apart by their elements, not by a Result's
 * `command` (an own property in postgres 3, inherited in 4).
 */
function resultsOf(result: unknown): Row[][] {
  if (!Array.isArray(result)) return [rowsOf(result)];
  const perStatement = result.length > 0 && result.every((r) => Array.isArray(r) || isQueryResult(r));
  return perStatement ? result.map(rowsOf) : [result as Row[]];
}

/** node-postgres's answer to one statement of a multi-statement query. */
function isQueryResult(r: unknown): boolean {
  return typeof r === 'object' && r !== null && Array.isArray((r as { rows?: unknown }).rows) && typeof (r as { command?: unknown }).command === 'string';
}
