import { intArray } from '../core/index.js';
import type { OpFlavour } from './op-statements.js';
import { keepaliveProbeSql } from './session-sql.js';
import type { StatementText } from './statement-query.js';

/** What a session queues: an operation of its statement set, a probe, or a statement of its own. */
export interface PendingOp {
  code: OpCode | typeof PROBE;
  key: bigint;
  /** Issue a fencing token with the grant, in the same statement. */
  fenced: boolean;
  resolve(result: number, token: bigint | null): void;
  reject(err: Error): void;
  /**
   * A statement of its own (semaphores, blocking waits), sent alone in order with the batches. Its text
   * may depend on whether the session is guarded (see `guarded`), known only once it has connected.
   */
  statement?: { text: StatementText; values: unknown[]; done(rows: unknown[]): void; deadlineMs?: number; raw?: boolean };
  /** The session's own upkeep (a probe, a look for the schema): not a use (see usedAt). */
  upkeep?: boolean;
}
/** The code of a probe, and of a statement of its own: not an operation of the statement set. */
export const PROBE = 0;
const noop = () => {};
/** A probe (no statement), or a statement of its own whose caller needs no callbacks. */
export const internalOp = (statement?: PendingOp['statement']): PendingOp => ({ code: PROBE, key: 0n, fenced: false, resolve: noop, reject: noop, statement, upkeep: !statement });
export const isUse = (op: PendingOp) => !op.upkeep;
/** An operation of the statement set (not a probe, not a statement of its own). */
export type LockOp = PendingOp & { code: OpCode };
export const tokenOf = (text: string | null | undefined) => (text == null ? null : BigInt(text));

/** An operation code of the session's statement set (OpStatements): the session does not know what it means. */
export type OpCode = number;

/** The statement for lock operations in a flavour, with its parameters as text; `lone`: the one operation of a single statement. */
export function opsStatement(sql: OpFlavour, ops: LockOp[]): { query: { name?: string; text: string }; values: string[] | null; lone: LockOp | null } {
  if (ops.length === 0) return { query: keepaliveProbeSql, values: null, lone: null };
  const lone = ops.length === 1 ? ops[0]! : undefined;
  const single = lone && (lone.fenced ? sql.fencedSingle[lone.code] : sql.single[lone.code]);
  if (single) return { query: single, values: [String(lone.key)], lone };
  const batch = ops[0]!.fenced ? sql.fencedBatch : sql.batch;
  return { query: batch, values: [intArray(ops, (op) => op.code), intArray(ops, (op) => op.key)], lone: null };
}
