import type pg from 'pg';
import { InvalidArgumentError } from '../errors.js';
import { describeType } from '../keys.js';
import { fencedUpdateQuery, fencedUpdateResult, staleFromTrigger, type FencedUpdateResult, type FencedUpdateSpec } from './fenced-update.js';

/**
 * A guarded UPDATE through node-postgres (a client, a pool client or a pool): applied only where the
 * row's fencing token is not newer than `token`. Resolves with why it was refused ('stale' / 'missing').
 */
export async function fencedUpdate(client: pg.ClientBase | pg.Pool, spec: FencedUpdateSpec): Promise<FencedUpdateResult> {
  if (typeof client !== 'object' || client === null || typeof (client as { query?: unknown }).query !== 'function') {
    throw new InvalidArgumentError('client', `expected a node-postgres client or pool, got ${describeType(client)}`);
  }
  const { text, values } = fencedUpdateQuery(spec);
  try {
    const { rows } = await client.query<{ applied: number; matched: number; current: string | null }>(text, values);
    return fencedUpdateResult(rows[0]!);
  } catch (err) {
    throw staleFromTrigger(err, spec.token);
  }
}
