import type pg from 'pg';
import { pgSqlExecutor } from '../core/index.js';
import { fencedClaimWith, type FencedClaimResult, type FencedClaimSpec } from './fenced-claim.js';
import { fencedUpdateWith, type FencedUpdateResult, type FencedUpdateSpec } from './fenced-update.js';
import { versionedUpdateWith, type VersionedUpdateResult, type VersionedUpdateSpec } from './versioned-update.js';

/**
 * A guarded UPDATE through node-postgres (a client, a pool client or a pool): applied only where the
 * row's fencing token is not newer than `token`. Resolves with the rows written and refused, and why.
 *
 * @example
 * ```ts fragment
 * const r = await fencedUpdate(pool, { table: 'invoices', set: { status: 'paid' }, where: { id: 42 }, token: lease.token });
 * if (!r.applied) console.log(r.reason, r.currentToken); // 'stale' and the newer token, or 'missing'
 * ```
 */
export async function fencedUpdate(client: pg.ClientBase | pg.Pool, spec: FencedUpdateSpec): Promise<FencedUpdateResult> {
  return fencedUpdateWith(pgSqlExecutor(client), spec);
}

/**
 * Claims rows for `token` before reading them (the safe read-modify-write): stamps the token where the
 * row's is not newer and returns the claimed rows, so that an older holder's later fencedUpdate of them
 * is refused. Resolves with why rows were refused ('stale' with currentToken, or 'missing').
 *
 * @example
 * ```ts fragment
 * const claim = await fencedClaim<{ id: number; n: number }>(pool, { table: 'counters', where: { id: 1 }, token: lease.token });
 * if (claim.claimed) {
 *   await fencedUpdate(pool, { table: 'counters', set: { n: claim.rows[0]!.n + 1 }, where: { id: 1 }, token: lease.token });
 * }
 * ```
 */
export async function fencedClaim<Row extends Record<string, unknown> = Record<string, unknown>>(
  client: pg.ClientBase | pg.Pool,
  spec: FencedClaimSpec,
): Promise<FencedClaimResult<Row>> {
  return fencedClaimWith<Row>(pgSqlExecutor(client), spec);
}

/**
 * Optimistic concurrency without a lock, through node-postgres: one UPDATE that writes `set` and
 * `version + 1` only where the row still has the version you read. Resolves with `applied`, or why not
 * ('conflict': someone wrote it since, with `currentVersion`; 'missing': no row matched).
 *
 * @example
 * ```ts fragment
 * const [doc] = (await pool.query('SELECT body, version FROM documents WHERE id = $1', [7])).rows;
 * const r = await versionedUpdate(pool, { table: 'documents', set: { body: doc.body + '!' }, where: { id: 7 }, version: BigInt(doc.version) });
 * if (!r.applied) console.log(r.reason, r.currentVersion); // 'conflict': read again and retry
 * ```
 */
export async function versionedUpdate(client: pg.ClientBase | pg.Pool, spec: VersionedUpdateSpec): Promise<VersionedUpdateResult> {
  return versionedUpdateWith(pgSqlExecutor(client), spec);
}
