import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { describeType, InvalidArgumentError, pgSqlExecutor, type SqlExecutor } from '../../core/index.js';

/**
 * What pgfence/typeorm runs its statements on: an EntityManager (the one `dataSource.transaction()`
 * hands its callback, `queryRunner.manager`, or `dataSource.manager` outside any transaction) or a
 * QueryRunner (after `queryRunner.startTransaction()` for the transaction locks).
 */
export type TypeormClient = EntityManager | QueryRunner;

/** A TypeormClient taken apart: the query runner its statements go through (none: `dataSource.manager`), and its DataSource. */
export interface TypeormTarget {
  /** The client as the caller passed it. */
  client: object;
  /** Null for a manager without a query runner of its own: each statement then borrows a pool connection. */
  runner: QueryRunner | null;
  dataSource: DataSource;
}

// TypeORM marks its classes with Symbol.for(...) (its InstanceChecker), so that a manager made by another
// copy of the library (CommonJS next to ESM) is still recognised; instanceof would not be.
const ENTITY_MANAGER = Symbol.for('EntityManager');

/**
 * The query runner and DataSource behind a TypeORM client, or InvalidArgumentError (before any I/O) for
 * anything else, or for a DataSource that is not PostgreSQL over node-postgres.
 */
export function typeormTarget(client: unknown, argument = 'manager'): TypeormTarget {
  const expected = 'a TypeORM EntityManager or QueryRunner';
  if (typeof client !== 'object' || client === null) throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(client)}`);
  const c = client as Record<string | symbol, unknown>;
  let runner: QueryRunner | null;
  if (c['@instanceof'] === ENTITY_MANAGER) {
    runner = (c.queryRunner as QueryRunner | undefined) ?? null;
  } else if (typeof c.query === 'function' && typeof c.connect === 'function' && typeof c.isTransactionActive === 'boolean') {
    runner = client as QueryRunner;
  } else {
    throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(client)}`);
  }
  return { client, runner, dataSource: postgresDataSource(c, argument) };
}

/** The DataSource of a manager or runner: `dataSource` in TypeORM 1.x, `connection` in 0.3 (both have the latter). */
export function dataSourceOf(holder: object): DataSource {
  const h = holder as { dataSource?: DataSource; connection?: DataSource };
  return (h.dataSource ?? h.connection)!;
}

function postgresDataSource(holder: object, argument: string): DataSource {
  const dataSource = dataSourceOf(holder) as DataSource | undefined;
  const type = dataSource?.options?.type;
  if (type !== 'postgres') {
    throw new InvalidArgumentError(argument, `pgfence/typeorm needs a DataSource of type 'postgres' (node-postgres), got ${type === undefined ? 'none' : `'${String(type)}'`}`);
  }
  return dataSource!;
}

/**
 * A TypeORM client as a SqlExecutor. Statements go through `queryRunner.query()` (TypeORM logs them and
 * its subscribers see them); a failure is thrown as node-postgres's own error (QueryFailedError's
 * `driverError`, with `code` and `severity`), which pgfence's errors carry as their cause.
 *
 * Scripts: TypeORM hands back nothing for a multi-statement query (neither rows nor structured results).
 * With `scriptResults`, a script goes to the query runner's node-postgres connection itself, which reports
 * each statement's rows: a transaction lock's wait reads its token and its transaction's start time
 * there, in the same round trip. Without, scripts go through `queryRunner.query()` as well (migrations).
 */
export function typeormSqlExecutor(target: TypeormTarget, opts: { scriptResults: boolean }): SqlExecutor {
  const released = () =>
    new InvalidArgumentError('manager', 'the TypeORM query runner was released (its transaction has ended): use the manager or runner of a live transaction');
  /** Runs `work` on the target's query runner, or on one of the pool's for a manager without one. */
  async function onRunner<T>(work: (runner: QueryRunner) => Promise<T>): Promise<T> {
    if (target.runner) {
      if (target.runner.isReleased) throw released();
      return work(target.runner);
    }
    const borrowed = target.dataSource.createQueryRunner();
    try {
      return await work(borrowed);
    } finally {
      await borrowed.release();
    }
  }
  return {
    scriptResults: opts.scriptResults,
    query: <R>(text: string, values: unknown[]) =>
      onRunner(async (runner) => {
        try {
          // Structured: the rows whatever the statement's command tag (a bare call gives [rows, count] for an UPDATE).
          const result = (await runner.query(text, values, true)) as { records?: R[] };
          return result.records ?? [];
        } catch (err) {
          throw driverError(err);
        }
      }),
    script(text: string) {
      if (opts.scriptResults && target.runner) {
        const runner = target.runner;
        if (runner.isReleased) return Promise.reject(released());
        // The connection is there already while the transaction runs: sent now, in order with what the
        // runner has queued (abandon() relies on it: its statement must go before anything sent after).
        const connection = (runner as unknown as { databaseConnection?: unknown }).databaseConnection;
        const run = (c: unknown) => pgSqlExecutor(c, 'manager', 'a TypeORM query runner').script(text);
        return connection ? run(connection) : runner.connect().then(run);
      }
      return onRunner(async (runner) => {
        try {
          await runner.query(text);
        } catch (err) {
          throw driverError(err);
        }
        return null;
      });
    },
  };
}

/** node-postgres's error inside TypeORM's QueryFailedError (which copies its fields, but is not it). */
export function driverError(err: unknown): unknown {
  const inner = (err as { driverError?: unknown } | null)?.driverError;
  return typeof inner === 'object' && inner !== null ? inner : err;
}
