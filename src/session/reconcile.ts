import type pg from 'pg';
import { LockUnavailableError, schemaMissingError } from '../core/index.js';
import type { OpStatements } from './op-statements.js';

/**
 * After a statement failed on a live connection (for instance: the server's lock table is full).
 * Locks taken earlier in that statement survive its failure, so look at what the session really holds
 * and put every operation of the batch back to "not done" with the owner's undo: two round trips
 * whatever the batch size.
 */
export async function undoFailedBatch(
  client: pg.ClientBase,
  statements: OpStatements,
  ops: readonly { code: number; key: bigint }[],
): Promise<void> {
  const { codes, keys } = statements.undoFor(ops, (await client.query(statements.held)).rows);
  if (codes.length > 0) await client.query(statements.undo, [codes, keys]);
}

/** A statement failed because pgfence's schema (or its guard function) is not there any more. */
export function isSchemaGone(err: Error): boolean {
  const code = (err as { code?: unknown }).code;
  return code === '3F000' || code === '42883';
}

/** What the callers of a failed lock statement are told. */
export function statementFailure(cause: Error): Error {
  const known = schemaMissingError(cause);
  if (known) return known;
  return new LockUnavailableError(`a lock statement failed: ${cause.message}`, { cause });
}
