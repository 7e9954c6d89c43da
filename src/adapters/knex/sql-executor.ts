import type { SqlExecutor } from '../../core/index.js';
import { type AnyKnex, type DriverResult, knexOf, runScript, runStatement } from './raw.js';

/**
 * A Knex instance or transaction as a SqlExecutor: each statement is one raw query on it (see raw.ts).
 * `argument` and `expected` name the caller's argument in the InvalidArgumentError for anything else.
 *
 * With the 'pg' client a raw query resolves to node-postgres' own result: one per statement for a
 * script, which node-postgres sends as one simple query when it has no bindings.
 */
export function knexSqlExecutor(db: unknown, argument = 'db', expected = 'a Knex instance or transaction'): SqlExecutor {
  const k: AnyKnex = knexOf(db, argument, expected);
  return {
    scriptResults: true,
    async query<R>(text: string, values: unknown[]) {
      // One statement with bindings (the extended protocol allows no more): one result.
      return ((await runStatement(k, text, values)) as DriverResult).rows as R[];
    },
    async script(text: string) {
      const result = await runScript(k, text);
      return (Array.isArray(result) ? result : [result]).map((r) => r.rows);
    },
  };
}
