/**
 * TypeORM's update SQL as fenced() reads and extends it: the builder renders its SET and WHERE, and
 * pgfence frames them as the counted, guarded update every data layer sends (fencing/guarded-sql.ts).
 */
import { InvalidArgumentError } from '../../core/index.js';
import { countedUpdate, fencingGuardSql, sqlText } from '../../fencing/index.js';
import type { columnName } from './entities.js';
import { dataSourceOf } from './sql-executor.js';

/** The UpdateQueryBuilder members fenced() relies on (protected in TypeORM's declarations; the same in 0.3 and 1.x). */
export interface BuilderInternals {
  expressionMap: {
    queryType: string;
    mainAlias?: { hasMetadata: boolean; metadata: Parameters<typeof columnName>[0] };
    aliases: unknown[];
    commonTableExpressions?: unknown[];
    returning?: unknown;
    orderBys: Record<string, unknown>;
    limit?: number;
    nativeParameters?: Record<string, unknown>;
  };
  clone(): BuilderInternals;
  createComment(): string;
  createUpdateExpression(): string;
  createWhereExpression(): string;
  getTableName(tablePath: string): string;
  getMainTableName(): string;
  replacePropertyNamesForTheWholeQuery(statement: string): string;
  getParameters(): Record<string, unknown>;
  hasParameter(name: string): boolean;
  getQueryAndParameters(): [string, unknown[]];
  updateEntity(enabled: boolean): unknown;
  execute(): Promise<{ raw?: unknown }>;
}

/**
 * The builder's update as a data-modifying CTE with the token and the guard, and the rows its WHERE
 * matches counted from the statement's snapshot (before the update): matched - written = refused, as
 * fencedUpdate counts them. The builder's own pieces are used as TypeORM renders them; only their
 * frame is pgfence's (casts written CAST(... AS ...): TypeORM would read `::name` as a parameter).
 */
export function guardedStatement(query: BuilderInternals, column: string, token: bigint): [string, unknown[]] {
  const table = query.getTableName(query.getMainTableName());
  let update: string;
  let where: string;
  try {
    update = query.replacePropertyNamesForTheWholeQuery(query.createUpdateExpression());
    where = query.replacePropertyNamesForTheWholeQuery(query.createWhereExpression());
  } catch (err) {
    // TypeORM's own refusal of the builder (an unknown property in set, no values, an empty criteria).
    throw new InvalidArgumentError('builder', `TypeORM cannot build this update: ${(err as Error)?.message ?? String(err)}`, { cause: err });
  }
  const head = `UPDATE ${table} SET `;
  if (!update.startsWith(head) || !update.endsWith(where) || (where !== '' && !where.startsWith(' WHERE '))) {
    throw new InvalidArgumentError('builder', `fenced() does not recognise this update's SQL (${update.slice(0, 120)}): use fencedUpdate`);
  }
  const assignments = update.slice(head.length, update.length - where.length);
  if (new RegExp(`(^|, )${escapeRegExp(column)} = `).test(assignments)) {
    throw new InvalidArgumentError('builder', `the ${column} column is written by fenced() itself: leave it out of set()`);
  }
  const condition = where.slice(' WHERE '.length);
  let name = 'pgfence_token';
  for (let i = 1; query.hasParameter(name); i++) name = `pgfence_token_${i}`;
  const guard = fencingGuardSql(column, `:${name}`);
  const guarded = `UPDATE ${table} SET ${assignments}, ${column} = :${name} WHERE ${condition ? `(${condition}) AND ` : ''}${guard} RETURNING 1`;
  const text = query.createComment() + countedUpdate(sqlText, guarded, `${table}${where}`, column);
  const driver = dataSourceOf(query).driver as unknown as { escapeQueryWithParameters(sql: string, parameters: object, native: object): [string, unknown[]] };
  // TypeORM 0.3 also takes the builder's native parameters; 1.x has none and ignores the argument.
  return driver.escapeQueryWithParameters(text, { ...query.getParameters(), [name]: token }, query.expressionMap.nativeParameters ?? {});
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
