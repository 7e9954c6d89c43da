import type postgres from 'postgres';
import { describeType, InvalidArgumentError, type SqlExecutor } from '../../core/index.js';
import { type Runner, statement } from './results.js';

/**
 * Any postgres.js object that runs statements: the instance (`sql`), a transaction or one of its
 * savepoints (the `tx` of `sql.begin` and `tx.savepoint`), or a reserved connection (`sql.reserve()`).
 */
export type AnySql = postgres.Sql<any> | postgres.TransactionSql<any> | postgres.ReservedSql<any>;

/**
 * A postgres.js transaction: the `tx` of `sql.begin(async (tx) => ...)` or of `tx.savepoint(...)`, or
 * a reserved connection (`await sql.reserve()`) on which you sent BEGIN yourself.
 */
export type PostgresTransaction = postgres.TransactionSql<any> | postgres.ReservedSql<any>;

/**
 * What a postgres.js object is, told from the methods postgres.js gives it (3.4 and 4.x alike), without I/O:
 * - 'transaction': sql.begin()'s scope or a savepoint's (it has `savepoint`): a new object per transaction;
 * - 'reserved': a reserved connection (it has `release`): in a transaction only if the caller sent BEGIN;
 * - 'instance': the instance itself (`reserve` and `begin`): each statement goes to any pooled connection;
 * - 'unknown': anything else that has `unsafe`.
 */
export type SqlScope = 'transaction' | 'reserved' | 'instance' | 'unknown';

export function scopeOf(sql: object): SqlScope {
  const s = sql as Record<string, unknown>;
  if (typeof s.savepoint === 'function') return 'transaction';
  if (typeof s.release === 'function') return 'reserved';
  if (typeof s.reserve === 'function' && typeof s.begin === 'function') return 'instance';
  return 'unknown';
}

/**
 * The object that stands for the postgres.js instance `sql` belongs to. postgres.js makes a new object
 * for every transaction, savepoint and reserved connection, and none of them refers to the instance;
 * what they share is the instance's helper functions: `json` is defined once per instance and handed to
 * each of them (in 3.4 and 4.x). Anything without it stands for itself.
 */
export function instanceIdentity(sql: object): object {
  const json = (sql as { json?: unknown }).json;
  return typeof json === 'function' ? json : sql;
}

/** Whether `sql` is a postgres.js object pgfence can run statements on (a tagged-template function with unsafe()). */
export function isPostgresSql(sql: unknown): sql is AnySql {
  return typeof sql === 'function' && typeof (sql as { unsafe?: unknown }).unsafe === 'function';
}

/**
 * A postgres.js instance, transaction or reserved connection as a SqlExecutor. `argument` and `expected`
 * name the caller's argument in the InvalidArgumentError for anything else.
 */
export function postgresSqlExecutor(sql: unknown, argument = 'sql', expected = 'a postgres.js sql, transaction or reserved connection'): SqlExecutor {
  if (!isPostgresSql(sql)) throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(sql)}`);
  const runner = sql as unknown as Runner;
  const instance = instanceIdentity(sql);
  return {
    scriptResults: true,
    async query<R>(text: string, values: unknown[]) {
      // unsafe() with values sends one parameterised statement (bigints as int8 in 3.4; typed by the
      // server in 4.x, where pgfence's statements name the type); without, a simple query.
      return (await statement(runner, instance, argument, text, values)) as R[];
    },
    async script(text: string) {
      // No values: postgres.js sends a simple query, which may hold many statements, and answers with
      // one result per statement when there are several, else with the one statement's rows.
      const result = (await statement(runner, instance, argument, text, [])) as unknown[];
      return result.length > 0 && Array.isArray(result[0]) ? (result as Record<string, unknown>[][]) : [result as Record<string, unknown>[]];
    },
  };
}
