/**
 * pgfence reads its own statements' results by the column names PostgreSQL gives them (`in_xact`,
 * `token`, ...). A postgres.js instance may rename every result's columns (its `transform` option, e.g.
 * `postgres.camel`): postgres 4 lets a query opt out (`.transform(false)`, documented for libraries given
 * an app's `sql`), postgres 3 has no way to, so there pgfence checks once per instance and refuses one
 * that renames, rather than misreading `in_xact` as a missing column (a NotInTransactionError inside a
 * transaction).
 */
import { InvalidArgumentError } from '../../core/index.js';
import { namesKeptProbeSql } from './postgres-sql.js';

/** A postgres.js query as pgfence uses it: awaited for its rows; `transform` from postgres 4 on. */
interface Statement extends PromiseLike<unknown> {
  transform?(transform: false): Statement;
}

/** What pgfence calls on a postgres.js object (the instance, a transaction, a reserved connection). */
export interface Runner {
  unsafe(text: string, values: unknown[]): Statement;
}

const PROBE_COLUMN = 'pgfence_column_names';

/** postgres 3 instances (instanceIdentity) checked: whether results keep the column names PostgreSQL gives. */
const namesKept = new WeakMap<object, Promise<boolean>>();

/** Refusals of a renaming instance: the transaction-lock entry points hand them to the caller as they are. */
const refusals = new WeakSet<object>();

/**
 * Runs one statement (or a script, without values) through `runner`, its result's columns named as
 * PostgreSQL names them. On postgres 3 the first statement of an instance is preceded by a check.
 */
export async function statement(runner: Runner, instance: object, argument: string, text: string, values: unknown[]): Promise<unknown> {
  const query = runner.unsafe(text, values);
  if (typeof query.transform === 'function') return query.transform(false);
  await namesKeptBy(runner, instance, argument);
  return query;
}

async function namesKeptBy(runner: Runner, instance: object, argument: string): Promise<void> {
  let check = namesKept.get(instance);
  if (!check) {
    check = Promise.resolve(runner.unsafe(namesKeptProbeSql(PROBE_COLUMN), [])).then((rows) => PROBE_COLUMN in ((rows as Record<string, unknown>[])[0] ?? {}));
    namesKept.set(instance, check);
    // A check that failed (no connection, an aborted transaction) is made again next time; its error is the statement's.
    check.catch(() => namesKept.delete(instance));
  }
  if (await check) return;
  const refusal = new InvalidArgumentError(
    argument,
    'this postgres.js instance renames the columns of results (its `transform` option, e.g. postgres.camel), and postgres 3 ' +
      'cannot leave that out for pgfence’s own statements: use postgres 4 (pgfence then reads its results with .transform(false)), ' +
      'or run pgfence’s calls, and the transactions they join, on an instance without a column transform',
  );
  refusals.add(refusal);
  throw refusal;
}

/** The refusal of a renaming instance, if `err` is one or wraps one (xactLock reports a failed statement as LockUnavailableError). */
export function renamingRefusal(err: unknown): Error | undefined {
  for (let e = err; typeof e === 'object' && e !== null; e = (e as { cause?: unknown }).cause) {
    if (refusals.has(e)) return e as Error;
  }
  return undefined;
}
