import type { ObjectLiteral, UpdateQueryBuilder } from 'typeorm';
import { describeType, InvalidArgumentError } from '../../core/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { bareIdentifier, checkToken, DEFAULT_FENCING_COLUMN, type FencedUpdateResult, fencedUpdateResult, type GuardedCounts, guardedWriteError, quoteColumn } from '../../fencing/index.js';
import { columnName } from './entities.js';
import { driverError } from './sql-executor.js';
import { type BuilderInternals, guardedStatement } from './typeorm-sql.js';

/** A guarded TypeORM update, ready to run: `execute()` reports what it wrote and what it refused, and why. */
export interface FencedUpdateQuery {
  /**
   * Runs the update (one statement, through the builder's own execute(): its query runner, its
   * `useTransaction`, the entity's update listeners and subscribers); stale vs missing as fencedUpdate reports them.
   *
   * @example
   * ```ts fragment
   * import type { EntityManager } from 'typeorm';
   * import { fenced } from 'pgfence/typeorm';
   *
   * async function pay(manager: EntityManager, token: bigint) {
   *   const r = await fenced(manager.createQueryBuilder().update('orders').set({ status: 'paid' }).where('id = :id', { id: 1 }), token).execute();
   *   console.log(r.applied, r.written, r.refused, r.reason);
   * }
   * ```
   */
  execute(): Promise<FencedUpdateResult>;
  /**
   * The statement it runs and its parameters, for logging or inspection.
   *
   * @example
   * ```ts fragment
   * import type { DataSource } from 'typeorm';
   * import { fenced } from 'pgfence/typeorm';
   *
   * function show(dataSource: DataSource, token: bigint) {
   *   const [sql, parameters] = fenced(dataSource.createQueryBuilder().update('orders').set({ status: 'paid' }).where('id = :id', { id: 1 }), token).getQueryAndParameters();
   *   console.log(sql, parameters);
   * }
   * ```
   */
  getQueryAndParameters(): [string, unknown[]];
}

const FENCED_OPTION_KEYS = optionKeys<{ column?: string }>({ column: true });

/**
 * Adds the fencing guard to a TypeORM update query builder: it writes `token` into the fencing column
 * and applies only where that column is NULL or not newer than `token`. The same statement counts the
 * rows the builder's `where` matched, so the result says whether a newer holder had written them
 * ('stale', with `currentToken`) or no row matched ('missing'), as fencedUpdate does. `column`: the
 * fencing column, an entity property or a column name (default 'fencing_token').
 *
 * The statement (with the builder's own SET and WHERE, parameters numbered by TypeORM):
 * ```sql
 * WITH "pgfence updated" AS (
 *   UPDATE "orders" SET "status" = $1, "fencing_token" = $2 WHERE ("id" = $3) AND ("fencing_token" IS NULL OR "fencing_token" <= $2) RETURNING 1
 * )
 * SELECT CAST((SELECT count(*) FROM "pgfence updated") AS int) AS written,
 *        CAST((SELECT count(*) FROM "orders" WHERE "id" = $3) AS int) AS matched,
 *        CAST((SELECT max("fencing_token") FROM "orders" WHERE "id" = $3) AS text) AS current
 * ```
 *
 * @example
 * ```ts fragment
 * import type { EntityManager } from 'typeorm';
 * import { fenced } from 'pgfence/typeorm';
 *
 * async function pay(manager: EntityManager, token: bigint) {
 *   const r = await fenced(manager.createQueryBuilder().update('orders').set({ status: 'paid' }).where('id = :id', { id: 42 }), token).execute();
 *   if (!r.applied) console.log(r.reason); // 'stale': a newer holder has written; 'missing': no such order
 * }
 * ```
 */
export function fenced<E extends ObjectLiteral>(builder: UpdateQueryBuilder<E>, token: bigint, opts?: { column?: string }): FencedUpdateQuery {
  const b = builder as unknown as BuilderInternals;
  if (typeof b !== 'object' || b === null || b.expressionMap?.queryType !== 'update' || typeof b.clone !== 'function') {
    throw new InvalidArgumentError('builder', `expected a TypeORM update query builder (createQueryBuilder().update(...)), got ${describeType(builder)}`);
  }
  checkToken(token);
  const o = optionsObject<{ column?: string }>(opts, 'fenced options', FENCED_OPTION_KEYS);
  // A copy: the caller's builder stays as it was (and can still be run unguarded, or fenced again).
  const query = b.clone();
  const map = query.expressionMap;
  if (map.aliases.length > 1 || (map.commonTableExpressions?.length ?? 0) > 0 || map.returning !== undefined || Object.keys(map.orderBys).length > 0 || map.limit) {
    throw new InvalidArgumentError('builder', 'fenced() guards an update of one table (no FROM, WITH, RETURNING, ORDER BY or LIMIT): use fencedUpdate, or add the guard in SQL');
  }
  const metadata = map.mainAlias?.hasMetadata ? map.mainAlias.metadata : undefined;
  const column = quoteColumn(metadata ? columnName(metadata, o.column ?? DEFAULT_FENCING_COLUMN) : (o.column ?? DEFAULT_FENCING_COLUMN), 'column');
  const statement = guardedStatement(query, column, token);
  // TypeORM's execute() runs this statement instead of the bare update (its listeners see the caller's `set`).
  query.getQueryAndParameters = () => statement;
  // Its result is the counts, not the rows a RETURNING would give: nothing to merge into whereEntity()'s entities.
  query.updateEntity(false);
  const table = query.getMainTableName();
  return {
    getQueryAndParameters: () => [statement[0], [...statement[1]]],
    async execute() {
      let raw: unknown;
      try {
        ({ raw } = await query.execute());
      } catch (err) {
        throw guardedWriteError(driverError(err), { call: 'fenced', table, column: bareIdentifier(column), token, where: {} });
      }
      // The statement's one row: TypeORM's UpdateResult keeps a query's rows as `raw`.
      return fencedUpdateResult((raw as GuardedCounts[])[0]!);
    },
  };
}
