import { InvalidArgumentError } from '../../core/index.js';
import {
  type FencedClaimResult,
  type FencedClaimSpec,
  fencedClaimWith,
  type FencedUpdateResult,
  type FencedUpdateSpec,
  fencedUpdateWith,
  type FencingColumnOptions,
  fencingColumnSql,
  type VersionColumnOptions,
  versionColumnSql,
  versionedUpdateWith,
  type VersionedUpdateResult,
  type VersionedUpdateSpec,
} from '../../fencing/index.js';
import { dropFencingColumnSql, dropVersionColumnSql } from '../../fencing/index.js';
import type { AnyKnex } from './raw.js';
import { knexSqlExecutor } from './sql-executor.js';
import type { ClaimedRow, KnexFencedClaimSpec, KnexFencedUpdateSpec, KnexVersionedUpdateSpec } from './tables.js';

/**
 * fencedUpdate for Knex (a Knex instance or a transaction): the root export's, with the table and its
 * columns typed from the tables you declared to Knex (`knex/types/tables`). Same result.
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { fencedUpdate } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * const r = await fencedUpdate(db, { table: 'orders', set: { status: 'paid' }, where: { id: 1 }, token: lease.token });
 * if (!r.applied) console.log(r.reason, r.currentToken); // 'stale' and the newer token, or 'missing'
 * ```
 */
export async function fencedUpdate<T extends string, C extends string = 'fencing_token'>(db: AnyKnex, spec: KnexFencedUpdateSpec<T, C>): Promise<FencedUpdateResult> {
  const exec = knexSqlExecutor(db);
  refuseExpressions(spec, 'fencedUpdate');
  return fencedUpdateWith(exec, spec as unknown as FencedUpdateSpec);
}

/**
 * fencedClaim for Knex: stamps `token` into the rows' fencing column before you read them, so an older
 * holder's later guarded write to them is refused. The rows are the declared table's rows (the fencing
 * column as a bigint). Same result as the root export's.
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { fencedClaim, fencedUpdate } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * await db.transaction(async (trx) => {
 *   const claim = await fencedClaim(trx, { table: 'counters', where: { id: 1 }, token });
 *   if (!claim.claimed) return; // a newer holder has the row
 *   await fencedUpdate(trx, { table: 'counters', set: { n: Number(claim.rows[0]!.n) + 1 }, where: { id: 1 }, token });
 * });
 * ```
 */
export async function fencedClaim<T extends string, C extends string = 'fencing_token'>(
  db: AnyKnex,
  spec: KnexFencedClaimSpec<T, C>,
): Promise<FencedClaimResult<ClaimedRow<T, C>>> {
  const exec = knexSqlExecutor(db);
  refuseExpressions(spec, 'fencedClaim');
  return fencedClaimWith<ClaimedRow<T, C>>(exec, spec as unknown as FencedClaimSpec);
}

/**
 * versionedUpdate for Knex: optimistic concurrency, no lock. Writes `set` and `version + 1` only where
 * the row still has the version you read; 'conflict' (with `currentVersion`) when someone wrote it since.
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { versionedUpdate } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * const doc = await db('documents').where({ id: 7 }).first('body', 'version');
 * if (!doc) return;
 * const r = await versionedUpdate(db, { table: 'documents', set: { body: `${doc.body}!` }, where: { id: 7 }, version: BigInt(doc.version) });
 * if (!r.applied) console.log(r.reason); // 'conflict': read again and retry
 * ```
 */
export async function versionedUpdate<T extends string, C extends string = 'version'>(
  db: AnyKnex,
  spec: KnexVersionedUpdateSpec<T, C>,
): Promise<VersionedUpdateResult> {
  const exec = knexSqlExecutor(db);
  refuseExpressions(spec, 'versionedUpdate');
  return versionedUpdateWith(exec, spec as unknown as VersionedUpdateSpec);
}

/**
 * Adds the fencing column (and, with `enforce`, the trigger that makes the table refuse a lower token,
 * whoever writes) to one of your tables, inside your own Knex migration. Idempotent.
 *
 * @example
 * ```ts fragment
 * import type { Knex } from 'knex';
 * import { addFencingColumn } from 'pgfence/knex';
 *
 * // In one of your own Knex migrations (migrations/20250101000000_fence_orders.ts):
 * const up = (knex: Knex) => addFencingColumn(knex, 'orders', { enforce: true });
 * const down = (knex: Knex) => dropFencingColumn(knex, 'orders');
 * ```
 */
export async function addFencingColumn(knex: AnyKnex, table: string, opts?: FencingColumnOptions): Promise<void> {
  const exec = knexSqlExecutor(knex, 'knex');
  await exec.script(fencingColumnSql(table, opts));
}

/**
 * The way back from addFencingColumn, for your migration's down(): drops the enforcing trigger (if there
 * is one: left behind, it would still run on every UPDATE, and guard a column of that name added later)
 * and the fencing column. Idempotent.
 *
 * @example
 * ```ts fragment
 * import type { Knex } from 'knex';
 * import { dropFencingColumn } from 'pgfence/knex';
 *
 * const down = (knex: Knex) => dropFencingColumn(knex, 'orders'); // in one of your own Knex migrations
 * ```
 */
export async function dropFencingColumn(knex: AnyKnex, table: string, opts?: { column?: string }): Promise<void> {
  const exec = knexSqlExecutor(knex, 'knex');
  await exec.script(dropFencingColumnSql(table, opts));
}

/**
 * Adds the version column (bigint NOT NULL DEFAULT 0) to one of your tables, for versionedUpdate, inside
 * your own Knex migration. Idempotent.
 *
 * @example
 * ```ts fragment
 * import type { Knex } from 'knex';
 * import { addVersionColumn } from 'pgfence/knex';
 *
 * const up = (knex: Knex) => addVersionColumn(knex, 'documents'); // in one of your own Knex migrations
 * ```
 */
export async function addVersionColumn(knex: AnyKnex, table: string, opts?: VersionColumnOptions): Promise<void> {
  const exec = knexSqlExecutor(knex, 'knex');
  await exec.script(versionColumnSql(table, opts));
}

/**
 * The way back from addVersionColumn, for your migration's down(): drops the version column. Idempotent.
 *
 * @example
 * ```ts fragment
 * import type { Knex } from 'knex';
 * import { dropVersionColumn } from 'pgfence/knex';
 *
 * const down = (knex: Knex) => dropVersionColumn(knex, 'documents'); // in one of your own Knex migrations
 * ```
 */
export async function dropVersionColumn(knex: AnyKnex, table: string, opts?: { column?: string }): Promise<void> {
  const exec = knexSqlExecutor(knex, 'knex');
  await exec.script(dropVersionColumnSql(table, opts));
}

/**
 * Knex compiles a function, a raw expression or a query builder among a raw query's bindings into SQL;
 * pgfence's specs take values only (every value a parameter), so such a value is refused before any I/O.
 * Expressions belong in an update builder: fenced(builder, token) guards it.
 */
function refuseExpressions(spec: unknown, call: string): void {
  if (typeof spec !== 'object' || spec === null) return; // the shared validation names what is wrong
  for (const part of ['set', 'where'] as const) {
    const entries = (spec as Record<string, unknown>)[part];
    if (typeof entries !== 'object' || entries === null) continue;
    for (const [name, value] of Object.entries(entries)) {
      if (isKnexExpression(value)) {
        throw new InvalidArgumentError(`${part}.${name}`, `${call} takes values, not Knex expressions: write the update with Knex and guard it with fenced(builder, token)`);
      }
    }
  }
}

function isKnexExpression(value: unknown): boolean {
  if (typeof value === 'function') return true;
  if (typeof value !== 'object' || value === null) return false;
  const v = value as { isRawInstance?: unknown; toSQL?: unknown };
  return v.isRawInstance === true || typeof v.toSQL === 'function';
}
