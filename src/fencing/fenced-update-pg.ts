import type pg from 'pg';
import { InvalidArgumentError } from '../errors.js';
import { describeType } from '../keys.js';
import { fencedClaimQuery, fencedClaimResult, type FencedClaimResult, type FencedClaimSpec } from './fenced-claim.js';
import {
  fencedUpdateQuery,
  fencedUpdateResult,
  staleFromTrigger,
  type FencedUpdateResult,
  type FencedUpdateSpec,
  type GuardedCounts,
} from './fenced-update.js';

/**
 * A guarded UPDATE through node-postgres (a client, a pool client or a pool): applied only where the
 * row's fencing token is not newer than `token`. Resolves with the rows written and refused, and why.
 */
export async function fencedUpdate(client: pg.ClientBase | pg.Pool, spec: FencedUpdateSpec): Promise<FencedUpdateResult> {
  checkClient(client);
  const { text, values } = fencedUpdateQuery(spec);
  try {
    const { rows } = await client.query<GuardedCounts>(text, values);
    return fencedUpdateResult(rows[0]!);
  } catch (err) {
    throw staleFromTrigger(err, spec.token);
  }
}

/**
 * Claims rows for `token` before reading them (the safe read-modify-write): stamps the token where the
 * row's is not newer and returns the claimed rows, so that an older holder's later fencedUpdate of them
 * is refused. Resolves with why rows were refused ('stale' with currentToken, or 'missing').
 */
export async function fencedClaim<Row extends Record<string, unknown> = Record<string, unknown>>(
  client: pg.ClientBase | pg.Pool,
  spec: FencedClaimSpec,
): Promise<FencedClaimResult<Row>> {
  checkClient(client);
  const { text, values } = fencedClaimQuery(spec);
  try {
    const { rows } = await client.query<Record<string, unknown>>(text, values);
    return fencedClaimResult<Row>(rows);
  } catch (err) {
    throw staleFromTrigger(err, spec.token);
  }
}

function checkClient(client: unknown): void {
  if (typeof client !== 'object' || client === null || typeof (client as { query?: unknown }).query !== 'function') {
    throw new InvalidArgumentError('client', `expected a node-postgres client or pool, got ${describeType(client)}`);
  }
}
