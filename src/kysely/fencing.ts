import { sql, type UpdateQueryBuilder } from 'kysely';
import { describeType, InvalidArgumentError } from '../core/index.js';
import { optionKeys, optionsObject } from '../options.js';
import { bareIdentifier, checkToken, DEFAULT_FENCING_COLUMN, type FencedClaimResult, type FencedClaimSpec, fencedClaimWith, type FencedUpdateResult, type FencedUpdateSpec, fencedUpdateWith, type FencingColumnOptions, fencingColumnSql, quoteColumn } from '../fencing/index.js';
import { kyselySqlExecutor, type AnyKysely } from './sql-executor.js';

/**
 * Adds the fencing guard to a Kysely update: it writes `token` into the fencing column and applies
 * only where that column is NULL or not newer than `token`. Check `numUpdatedRows` of the result:
 * 0 means a newer holder has written (or no row matched).
 *
 *   await fenced(db.updateTable('orders').set({ status: 'paid' }).where('id', '=', 1), lease.token).execute();
 */
export function fenced<DB, UT extends keyof DB, TB extends keyof DB, O>(
  builder: UpdateQueryBuilder<DB, UT, TB, O>,
  token: bigint,
  opts?: { column?: string },
): UpdateQueryBuilder<DB, UT, TB, O> {
  if (typeof builder !== 'object' || builder === null || typeof (builder as { set?: unknown }).set !== 'function') {
    throw new InvalidArgumentError('builder', `expected a Kysely update query builder, got ${describeType(builder)}`);
  }
  checkToken(token);
  const o = optionsObject<{ column?: string }>(opts, 'fenced options', FENCED_OPTION_KEYS);
  const column = bareIdentifier(quoteColumn(o.column ?? DEFAULT_FENCING_COLUMN, 'column'));
  const ref = sql.ref(column);
  return (builder as UpdateQueryBuilder<DB, UT, TB, O>)
    .set(() => ({ [column]: token }) as never)
    .where(() => sql<boolean>`(${ref} IS NULL OR ${ref} <= ${token})`);
}

/** fencedUpdate for Kysely (a Kysely instance or a transaction): same spec and result as the root export's. */
export async function fencedUpdate(db: AnyKysely, spec: FencedUpdateSpec): Promise<FencedUpdateResult> {
  return fencedUpdateWith(kyselySqlExecutor(db), spec);
}

/**
 * fencedClaim for Kysely (a Kysely instance or a transaction): stamps `token` into the rows' fencing
 * column before you read them, so an older holder's later guarded write to them is refused. Same spec
 * and result as the root export's.
 *
 *   await db.transaction().execute(async (trx) => {
 *     const claim = await fencedClaim<Counter>(trx, { table: 'counters', where: { id: 1 }, token });
 *     if (!claim.claimed) return; // a newer holder has the row
 *     await fencedUpdate(trx, { table: 'counters', set: { n: claim.rows[0].n + 1 }, where: { id: 1 }, token });
 *   });
 */
export async function fencedClaim<Row extends Record<string, unknown> = Record<string, unknown>>(
  db: AnyKysely,
  spec: FencedClaimSpec,
): Promise<FencedClaimResult<Row>> {
  return fencedClaimWith<Row>(kyselySqlExecutor(db), spec);
}

/**
 * Adds the fencing column (and, with `enforce`, the trigger) to one of your tables, for use inside
 * your own Kysely migrations: `up: (db) => addFencingColumn(db, 'orders', { enforce: true })`.
 */
export async function addFencingColumn(db: AnyKysely, table: string, opts?: FencingColumnOptions): Promise<void> {
  const text = fencingColumnSql(table, opts);
  await kyselySqlExecutor(db).script(text);
}

const FENCED_OPTION_KEYS = optionKeys<{ column?: string }>({ column: true });
