import { CompiledQuery, type Kysely } from 'kysely';
import { describeType, InvalidArgumentError, type SqlExecutor } from '../../core/index.js';

/**
 * A Kysely instance or transaction of any database type (a Transaction is a Kysely too): the lock
 * statements touch none of the caller's tables.
 */
export type AnyKysely = Kysely<any>;

/**
 * A Kysely instance or transaction as a SqlExecutor. `argument` and `expected` name the caller's
 * argument in the InvalidArgumentError for anything without executeQuery().
 */
export function kyselySqlExecutor(db: unknown, argument = 'db', expected = 'a Kysely instance or transaction'): SqlExecutor {
  if (typeof db !== 'object' || db === null || typeof (db as { executeQuery?: unknown }).executeQuery !== 'function') {
    throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(db)}`);
  }
  const k = db as AnyKysely;
  return {
    // Kysely's driver reports no rows for a multi-statement query.
    scriptResults: false,
    async query<R>(text: string, values: unknown[]) {
      return (await k.executeQuery(CompiledQuery.raw(text, values))).rows as R[];
    },
    async script(text: string) {
      await k.executeQuery(CompiledQuery.raw(text, []));
      return null;
    },
  };
}
