/**
 * How pgfence runs SQL on a connection it was handed (a node-postgres client or pool, or a Kysely
 * instance or transaction): transaction locks, fenced writes and migrations are written once against
 * this interface. The Kysely adapter is in src/kysely/, so that only pgfence/kysely loads kysely.
 */
import type pg from 'pg';
import { InvalidArgumentError } from './errors.js';
import { describeType } from './describe-type.js';

export interface SqlExecutor {
  /** One parameterised statement: its rows. */
  query<R>(text: string, values: unknown[]): Promise<R[]>;
  /**
   * A script of any number of statements, without parameters (sent as one simple query): each
   * statement's rows when the driver reports them (`scriptResults`), else null.
   */
  script(text: string): Promise<Record<string, unknown>[][] | null>;
  /** Whether script() reports the statements' rows. */
  readonly scriptResults: boolean;
}

/**
 * A node-postgres client, pool client or pool as a SqlExecutor. `argument` and `expected` name the
 * caller's argument in the InvalidArgumentError for anything without a query() method.
 */
export function pgSqlExecutor(client: unknown, argument = 'client', expected = 'a node-postgres client or pool'): SqlExecutor {
  if (typeof client !== 'object' || client === null || typeof (client as { query?: unknown }).query !== 'function') {
    throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(client)}`);
  }
  const c = client as pg.ClientBase;
  return {
    scriptResults: true,
    async query<R>(text: string, values: unknown[]) {
      return (await c.query(text, values)).rows as R[];
    },
    async script(text: string) {
      // No parameters: node-postgres sends a simple query, which may hold many statements, and
      // answers with one result per statement (a single result for one).
      const res = (await c.query(text)) as unknown as pg.QueryResult | pg.QueryResult[];
      return (Array.isArray(res) ? res : [res]).map((r) => r.rows);
    },
  };
}
