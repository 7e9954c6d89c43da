import {
  type FencedClaimResult,
  type FencedClaimSpec,
  fencedClaimWith,
  type FencedUpdateResult,
  type FencedUpdateSpec,
  fencedUpdateWith,
  type VersionedUpdateResult,
  type VersionedUpdateSpec,
  versionedUpdateWith,
} from '../../fencing/index.js';
import { type AnySql, postgresSqlExecutor } from './sql-executor.js';

/**
 * A guarded UPDATE through postgres.js (the instance, a transaction or a reserved connection): applied
 * only where the row's fencing token is not newer than `token`. Resolves with the rows written and
 * refused, and why. postgres.js has no schema types: `table` and the columns are names, as in SQL.
 *
 * @example
 * ```ts fragment
 * import postgres from 'postgres';
 * import { fencedUpdate } from 'pgfence/postgres';
 *
 * const sql = postgres(url);
 * const r = await fencedUpdate(sql, { table: 'invoices', set: { status: 'paid' }, where: { id: 42 }, token: lease.token });
 * if (!r.applied) console.log(r.reason, r.currentToken); // 'stale' and the newer token, or 'missing'
 * ```
 */
export async function fencedUpdate(sql: AnySql, spec: FencedUpdateSpec): Promise<FencedUpdateResult> {
  return fencedUpdateWith(postgresSqlExecutor(sql), spec);
}

/**
 * Claims rows for `token` before reading them (the safe read-modify-write): stamps the token where the
 * row's is not newer and returns the claimed rows (`Row`: their type, as you know it; the fencing column
 * is the token, a bigint), so that an older holder's later fencedUpdate of them is refused.
 *
 * @example
 * ```ts fragment
 * import postgres from 'postgres';
 * import { fencedClaim, fencedUpdate } from 'pgfence/postgres';
 *
 * const sql = postgres(url);
 * await sql.begin(async (tx) => {
 *   const claim = await fencedClaim<{ id: number; n: number }>(tx, { table: 'counters', where: { id: 1 }, token });
 *   if (!claim.claimed) return; // a newer holder has the row
 *   await fencedUpdate(tx, { table: 'counters', set: { n: claim.rows[0]!.n + 1 }, where: { id: 1 }, token });
 * });
 * ```
 */
export async function fencedClaim<Row extends Record<string, unknown> = Record<string, unknown>>(sql: AnySql, spec: FencedClaimSpec): Promise<FencedClaimResult<Row>> {
  return fencedClaimWith<Row>(postgresSqlExecutor(sql), spec);
}

/**
 * Optimistic concurrency without a lock, through postgres.js: one UPDATE that writes `set` and
 * `version + 1` only where the row still has the version you read. Resolves with `applied`, or why not
 * ('conflict': someone wrote it since, with `currentVersion`; 'missing': no row matched).
 *
 * @example
 * ```ts fragment
 * import postgres from 'postgres';
 * import { versionedUpdate } from 'pgfence/postgres';
 *
 * const sql = postgres(url);
 * const [doc] = await sql<{ body: string; version: string }[]>`SELECT body, version FROM documents WHERE id = 7`;
 * const r = await versionedUpdate(sql, { table: 'documents', set: { body: doc!.body + '!' }, where: { id: 7 }, version: BigInt(doc!.version) });
 * if (!r.applied) console.log(r.reason, r.currentVersion); // 'conflict': read again and retry
 * ```
 */
export async function versionedUpdate(sql: AnySql, spec: VersionedUpdateSpec): Promise<VersionedUpdateResult> {
  return versionedUpdateWith(postgresSqlExecutor(sql), spec);
}
