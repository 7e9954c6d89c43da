import type pg from 'pg';
import { LockUnavailableError, schemaMissingError } from '../errors.js';
import type { Logger } from '../observe/logger.js';
import {
  guardedLockSql,
  heldBySessionSql,
  type LockStatements,
  Op,
  type OpCode,
  plainLockSql,
  probeSql,
  sessionSetupSql,
} from './advisory-sql.js';
import { type ConnectionSource, isConnectionError, type PinnedConnection } from './connection-source.js';
import { undoBatchSql } from './undo-sql.js';

/** Thrown to the callers of operations that were queued on, or in flight over, a session that died. */
export class SessionLostError extends LockUnavailableError {
  /** False when the connection was never established: the database is unreachable. */
  connected = true;
}

interface PendingOp {
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
  statement: { text: StatementText; values: unknown[]; done(rows: unknown[]): void; deadlineMs?: number } | undefined;
}
const PROBE = 0;

/** A statement's text, or a prepared statement (name and text), possibly per flavour (guarded or not). */
export type StatementText = string | PreparedText | ((guarded: boolean) => string | PreparedText);
type PreparedText = { name: string; text: string };

const MAX_TIMER_MS = 2 ** 31 - 1;

/** The code of a statement taken back before it was sent (Session.statement's `withdraw`). */
export const WITHDRAWN = 'PGFENCE_WITHDRAWN';

/** Large batches are split: a statement with many thousand array elements gains nothing more. */
const MAX_BATCH = 4096;

export interface SessionOptions {
  id: number;
  source: ConnectionSource;
  keepaliveMs: number;
  /** Client-side deadline of every statement on the session, probes included. */
  deadlineMs: number;
  logger: Logger;
  onLost(session: Session, err: Error): void;
}

/**
 * One pinned connection that holds session advisory locks. Operations queue up while a statement
 * is in flight and go out together as the next statement, so many callers share one round trip.
 * An idle session is probed every keepaliveMs; a failed or late statement, a socket error or a
 * server-side kill ends it, and `onLost` tells the lock manager once.
 */
export class Session {
  readonly id: number;
  state: 'connecting' | 'ready' | 'dead' = 'connecting';
  /** Why the session died (set once, with state 'dead'). */
  deathCause: Error | null = null;
  /**
   * pgfence's schema is present: its lock tries give way to live leases of the same key (a name is one
   * lock whatever its kind). Found out by the first statement after connecting; a session without it
   * looks again every keepaliveMs (the schema may be migrated meanwhile), never per acquire.
   */
  guarded = false;
  /** performance.now() when the session last looked for the schema. */
  private lookedAt = 0;
  private conn: PinnedConnection | null = null;
  private pending: PendingOp[] = [];
  private inFlight: PendingOp[] | null = null;
  private flushQueued = false;
  /** One timer per session, set for the next moment it must act: a statement's deadline or the next probe. */
  private watchdog: NodeJS.Timeout | null = null;
  private watchdogDue = Infinity;
  /** performance.now() when the statement in flight was sent, and when the session last heard back. */
  private sentAt = 0;
  private inFlightDeadlineMs = 0;
  private lastActivity = 0;
  readonly ready: Promise<void>;

  constructor(private readonly opts: SessionOptions) {
    this.id = opts.id;
    this.ready = this.connect();
    // Callers await `ready` themselves; an unobserved failure is already handled by connect().
    this.ready.catch(() => {});
  }

  /**
   * Queues one operation with callbacks instead of a promise (the lock manager's hot path: one
   * microtask less per statement). Exactly one of them is called, never synchronously.
   */
  submit(code: OpCode, key: bigint, resolve: (result: number) => void, reject: (err: Error) => void): void {
    if (this.state === 'dead') {
      const err = this.lostError();
      queueMicrotask(() => reject(err));
      return;
    }
    this.pending.push({ code, key, fenced: false, resolve, reject, statement: undefined });
    this.scheduleFlush();
  }

  /** Queues one operation; resolves with its result code. */
  run(code: OpCode, key: bigint): Promise<number> {
    return new Promise((resolve, reject) => {
      if (this.state === 'dead') return reject(this.lostError());
      this.pending.push({ code, key, fenced: false, resolve, reject, statement: undefined });
      this.scheduleFlush();
    });
  }

  private scheduleFlush(): void {
    if (this.flushQueued) return;
    if (this.state === 'ready' && !this.inFlight && this.pending.length === 1) {
      // An idle session sends a lone operation at once; whatever comes while it is in flight is batched.
      this.flush();
      return;
    }
    this.flushQueued = true;
    // A microtask lets operations issued in the same tick share one statement.
    queueMicrotask(() => {
      this.flushQueued = false;
      this.flush();
    });
  }

  /**
   * Queues a statement of its own on this session, in order with the operations around it. It must
   * not block, and a failure must leave no lock taken (the batch reconciliation does not cover it).
   */
  statement<R>(text: StatementText, values: unknown[], opts: { deadlineMs?: number; withdraw?: AbortSignal } = {}): Promise<R[]> {
    return new Promise((resolve, reject) => {
      if (this.state === 'dead') return reject(this.lostError());
      const { withdraw } = opts;
      // `withdraw` takes the statement back while it has not been sent (a cancel cannot reach it yet).
      const onWithdraw = () => {
        const i = this.pending.indexOf(op);
        if (i < 0) return; // sent already: only a server-side cancel reaches it now
        this.pending.splice(i, 1);
        reject(Object.assign(new Error('the statement was withdrawn before it was sent'), { code: WITHDRAWN }));
      };
      const op: PendingOp = {
        code: PROBE,
        key: 0n,
        fenced: false,
        resolve: () => {},
        reject: (err) => {
          withdraw?.removeEventListener('abort', onWithdraw);
          reject(err);
        },
        statement: {
          text,
          values,
          done: (rows) => {
            withdraw?.removeEventListener('abort', onWithdraw);
            resolve(rows as R[]);
          },
          deadlineMs: opts.deadlineMs,
        },
      };
      this.pending.push(op);
      withdraw?.addEventListener('abort', onWithdraw, { once: true });
      this.scheduleFlush();
    });
  }

  /** Queues a try that issues a fencing token when it grants; resolves with the result code and token. */
  runFenced(code: OpCode, key: bigint): Promise<{ result: number; token: bigint | null }> {
    return new Promise((resolve, reject) => {
      if (this.state === 'dead') return reject(this.lostError());
      this.pending.push({ code, key, fenced: true, resolve: (result, token) => resolve({ result, token }), reject, statement: undefined });
      this.scheduleFlush();
    });
  }

  /** The backend pid, for diagnostics and tests. */
  get processId(): number | null {
    return (this.conn?.client as { processID?: number } | undefined)?.processID ?? null;
  }

  /** Ends the session: the server releases everything it held. */
  close(): void {
    this.die(new SessionLostError('the locker was closed'), false, true);
  }

  private async connect(): Promise<void> {
    try {
      const conn = await this.opts.source.pin((err) => this.die(err));
      if (this.state === 'dead') {
        conn.destroy();
        throw this.lostError();
      }
      this.conn = conn;
      (conn.client as pg.Client).once('end', () => this.die(new Error('connection ended')));
      this.state = 'ready';
      this.everReady = true;
      // The first statement finds out whether the schema is there, before any lock statement is sent.
      this.lookedAt = performance.now();
      this.pending.unshift(this.setupOp());
      this.scheduleFlush();
      this.lastActivity = performance.now();
      this.arm();
    } catch (err) {
      this.die(err instanceof Error ? err : new Error(String(err)));
      throw this.lostError();
    }
  }

  /** The setup statement as an operation of its own (it also serves as a probe). */
  private setupOp(): PendingOp {
    return {
      code: PROBE,
      key: 0n,
      fenced: false,
      resolve: () => {},
      reject: () => {}, // a failed detection leaves the session unguarded, as without the schema
      statement: {
        text: sessionSetupSql.text,
        values: [],
        done: (rows) => {
          this.guarded = (rows[0] as { guarded: boolean } | undefined)?.guarded === true;
        },
      },
    };
  }

  /** An unguarded session looks for the schema again, first thing (in place of a due keepalive probe). */
  private lookAgain(): void {
    this.lookedAt = performance.now();
    const head = this.pending[0]!;
    if (head.code === PROBE && !head.statement) this.pending.shift();
    this.pending.unshift(this.setupOp());
  }

  /** The lock statements of this session's flavour. */
  private get sql(): LockStatements {
    return this.guarded ? guardedLockSql : plainLockSql;
  }

  private flush(): void {
    if (this.state !== 'ready' || this.inFlight || this.pending.length === 0 || !this.conn) return;
    if (!this.guarded && performance.now() - this.lookedAt >= this.opts.keepaliveMs) this.lookAgain();
    const batch = this.takeBatch();
    this.inFlight = batch;
    this.sentAt = performance.now();
    // A blocking wait may take its whole lock_timeout before the server answers.
    this.inFlightDeadlineMs = batch[0]!.statement?.deadlineMs ?? this.opts.deadlineMs;
    const lone = batch.length === 1 ? batch[0]! : null;
    if (lone && lone.code !== PROBE && !lone.fenced && !lone.statement) this.sendLone(lone as PendingOp & { code: OpCode });
    else void this.sendBatch(batch);
    this.arm();
  }

  /** The common case, kept lean: one plain operation, one small prepared statement. */
  private sendLone(op: PendingOp & { code: OpCode }): void {
    const batch = this.inFlight;
    const sql = this.sql.single[op.code];
    this.conn!.client.query<{ r: number }>({ name: sql.name, text: sql.text, values: [op.key] }).then(
      (res) => {
        if (this.inFlight !== batch) return; // the session died meanwhile: the op was already failed
        this.lastActivity = performance.now();
        this.inFlight = null;
        op.resolve(res.rows[0]!.r, null);
        if (this.pending.length > 0) this.flush();
        else this.arm();
      },
      (err: Error) => void this.failed(batch!, [op], err),
    );
  }

  private async sendBatch(batch: PendingOp[]): Promise<void> {
    const ops = (batch.length === 1 && batch[0]!.code !== PROBE ? batch : batch.filter((op) => op.code !== PROBE)) as (PendingOp & {
      code: OpCode;
    })[];
    const statement = batch[0]!.statement;
    try {
      if (statement) await this.executeStatement(batch[0]!, statement);
      else await this.execute(ops);
      for (const op of batch) if (op.code === PROBE && !op.statement) op.resolve(1, null);
    } catch (err) {
      return this.failed(batch, ops, err as Error);
    }
    this.lastActivity = performance.now();
    if (this.inFlight === batch) this.inFlight = null;
    if (this.state === 'ready' && this.pending.length > 0) this.flush();
    else this.arm();
  }

  /** A statement failed: the connection is gone (the session dies), or the batch is reconciled. */
  private async failed(batch: PendingOp[], ops: (PendingOp & { code: OpCode })[], err: Error): Promise<void> {
    if (this.state === 'dead') return; // die() already failed the batch
    if (isConnectionError(err)) {
      this.die(err);
      return;
    }
    // The schema went away under a guarded session: its later statements go without the guard.
    if (this.guarded && isSchemaGone(err)) this.guarded = false;
    await this.reconcile(ops, err);
    for (const op of batch) if (op.code === PROBE) op.resolve(1, null);
    this.lastActivity = performance.now();
    if (this.inFlight === batch) this.inFlight = null;
    if (this.state === 'ready' && this.pending.length > 0) this.flush();
    else this.arm();
  }

  /**
   * The next statement's operations: fenced and plain operations go in separate statements (a plain
   * batch may make its commit asynchronous for a NOTIFY; a token's commit must be durable).
   */
  private takeBatch(): PendingOp[] {
    if (this.pending.length === 1) {
      const batch = this.pending;
      this.pending = [];
      return batch;
    }
    if (this.pending[0]!.statement) return [this.pending.shift()!];
    const fenced = this.pending[0]!.fenced;
    const batch: PendingOp[] = [];
    const rest: PendingOp[] = [];
    for (const op of this.pending) {
      if (op.fenced === fenced && !op.statement && batch.length < MAX_BATCH) batch.push(op);
      else rest.push(op);
    }
    this.pending = rest;
    return batch;
  }

  private async executeStatement(op: PendingOp, statement: NonNullable<PendingOp['statement']>): Promise<void> {
    try {
      const text = typeof statement.text === 'function' ? statement.text(this.guarded) : statement.text;
      const query = typeof text === 'string' ? { text, values: statement.values } : { ...text, values: statement.values };
      statement.done((await this.conn!.client.query(query)).rows);
    } catch (err) {
      if (isConnectionError(err)) throw err; // the session dies, failing the operation with it
      op.reject(err as Error);
    }
  }

  private async execute(ops: (PendingOp & { code: OpCode })[]): Promise<void> {
    const client = this.conn!.client;
    const sql = this.sql;
    if (ops.length === 0) {
      await client.query(probeSql);
    } else if (ops[0]!.fenced) {
      const single = ops.length === 1 ? sql.fencedSingle[ops[0]!.code] : undefined;
      const res = single
        ? await client.query<{ r: number; token: string | null }>({ ...single, values: [ops[0]!.key] })
        : await client.query<{ i: number; r: number; token: string | null }>({
            ...sql.fencedBatch,
            values: [intArray(ops, (op) => op.code), intArray(ops, (op) => op.key)],
          });
      res.rows.forEach((row, n) => {
        const op = ops['i' in row ? (row as { i: number }).i - 1 : n]!;
        op.resolve(row.r, row.token === null ? null : BigInt(row.token));
      });
    } else if (ops.length === 1) {
      const op = ops[0]!;
      const res = await client.query<{ r: number }>({ ...sql.single[op.code], values: [op.key] });
      op.resolve(res.rows[0]!.r, null);
    } else {
      const res = await client.query<{ i: number; r: number }>({
        ...sql.batch,
        values: [intArray(ops, (op) => op.code), intArray(ops, (op) => op.key)],
      });
      for (const row of res.rows) ops[row.i - 1]!.resolve(row.r, null);
    }
  }

  /**
   * A statement failed on a live connection (for instance: the server's lock table is full). Session
   * locks taken earlier in that statement survive its failure, so look at what the session really holds
   * and put every operation of the batch back to "not done": tries that took a lock are undone, unlocks
   * that did not happen are redone one by one. The operations then fail with the statement's error.
   */
  private async reconcile(ops: (PendingOp & { code: OpCode })[], cause: Error): Promise<void> {
    const failure = statementFailure(cause);
    try {
      const client = this.conn!.client;
      const { rows } = await client.query<{ space: number; key: string; mode: string }>(heldBySessionSql);
      const held = new Set(rows.map((r) => `${r.space}:${r.key}:${r.mode}`));
      // Two round trips whatever the batch size (a full lock table fails batches of thousands).
      const codes: OpCode[] = [];
      const keys: bigint[] = [];
      for (const op of ops) {
        for (const undo of undoFor(op.code, op.key, held)) {
          codes.push(undo);
          keys.push(op.key);
        }
      }
      if (codes.length > 0) await client.query(undoBatchSql, [codes, keys]);
      for (const op of ops) op.reject(failure);
    } catch (err) {
      for (const op of ops) op.reject(failure);
      this.die(err instanceof Error ? err : failure);
    }
  }

  /**
   * Sets the watchdog for the next moment the session must act: the deadline of the statement in flight,
   * or, when idle, keepaliveMs after it last heard from the server (then it sends a probe). A loss is
   * therefore noticed within keepaliveMs + deadlineMs of the last sign of life. A watchdog already set
   * for an earlier moment is kept (it re-arms itself when it fires early): moving it costs a timer only
   * when the next moment comes sooner.
   */
  private arm(): void {
    if (this.state !== 'ready') return;
    const due = this.inFlight ? this.sentAt + this.inFlightDeadlineMs : this.lastActivity + this.opts.keepaliveMs;
    if (this.watchdog && this.watchdogDue <= due) return;
    if (due === Infinity) return; // an unbounded blocking wait: re-armed when it ends
    if (this.watchdog) clearTimeout(this.watchdog);
    this.watchdogDue = due;
    // Node caps one timer at ~24.8 days: a later moment is reached in steps (the watchdog re-arms itself).
    this.watchdog = setTimeout(this.onWatchdog, Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(due - performance.now()))));
    this.watchdog.unref();
  }

  private readonly onWatchdog = (): void => {
    this.watchdog = null;
    this.watchdogDue = Infinity;
    if (this.state !== 'ready') return;
    const now = performance.now();
    if (this.inFlight) {
      if (now - this.sentAt >= this.inFlightDeadlineMs) {
        this.die(new LockUnavailableError(`PostgreSQL did not answer within ${Math.round(this.inFlightDeadlineMs)} ms`));
        return;
      }
    } else if (this.pending.length === 0 && now - this.lastActivity >= this.opts.keepaliveMs) {
      this.pending.push({ code: PROBE, key: 0n, fenced: false, resolve: () => {}, reject: () => {}, statement: undefined });
      this.flush(); // arms for the probe's deadline
      return;
    }
    this.arm();
  };

  private everReady = false;

  private lostError(): SessionLostError {
    const cause = this.deathCause;
    const err = this.everReady
      ? new SessionLostError(`PostgreSQL session lost: ${cause?.message ?? 'unknown cause'}`, { cause })
      : new SessionLostError(`could not connect to PostgreSQL: ${cause?.message ?? 'unknown cause'}`, { cause });
    err.connected = this.everReady;
    return err;
  }

  /** `closing`: ended on purpose by close(), not lost (logged at debug). */
  private die(err: Error, notify = true, closing = false): void {
    if (this.state === 'dead') return;
    const wasReady = this.state === 'ready';
    this.state = 'dead';
    this.deathCause = err;
    if (this.watchdog) clearTimeout(this.watchdog);
    this.watchdog = null;
    this.conn?.destroy();
    const lost = this.lostError();
    const failed = [...(this.inFlight ?? []), ...this.pending];
    this.inFlight = null;
    this.pending = [];
    for (const op of failed) op.reject(lost);
    if (closing) this.opts.logger.debug({ session: this.id }, 'pgfence: session closed');
    else if (wasReady) this.opts.logger.warn({ err, session: this.id }, 'pgfence: session lost');
    if (notify) this.opts.onLost(this, err);
  }
}

/**
 * An array parameter of integers as PostgreSQL's array text, written here: node-postgres quotes and
 * escapes each element with two regular expressions, which costs more than the statement for thousands.
 */
function intArray<T>(items: readonly T[], value: (item: T) => number | bigint): string {
  return `{${items.map(value).join(',')}}`;
}

/** The operations that reverse what a failed statement may have done for `code` on `key`. */
function undoFor(code: OpCode, key: bigint, held: Set<string>): OpCode[] {
  const undo: OpCode[] = [];
  const exclusive = held.has(`1:${key}:ExclusiveLock`);
  const shared = held.has(`1:${key}:ShareLock`);
  const marker = held.has(`2:${key}:ShareLock`);
  switch (code) {
    case Op.waitTryExclusive:
    case Op.waitTryShared:
    case Op.waitPoliteTryExclusive:
    case Op.waitPoliteTryShared:
      // Markers are bookkeeping: the lock manager registers them again when it still waits.
      if (marker) undo.push(Op.unregisterMarker);
      break;
    case Op.unregisterMarker:
    case Op.registerMarker:
      if (marker) undo.push(Op.unregisterMarker);
      break;
  }
  switch (code) {
    case Op.tryExclusive:
    case Op.politeTryExclusive:
    case Op.waitTryExclusive:
    case Op.waitPoliteTryExclusive:
    case Op.unlockExclusive:
      if (exclusive) undo.push(Op.unlockExclusive);
      break;
    case Op.tryShared:
    case Op.politeTryShared:
    case Op.waitTryShared:
    case Op.waitPoliteTryShared:
    case Op.unlockShared:
      if (shared) undo.push(Op.unlockShared);
      break;
  }
  return undo;
}

/** A statement failed because pgfence's schema (or its guard function) is not there any more. */
function isSchemaGone(err: Error): boolean {
  const code = (err as { code?: unknown }).code;
  return code === '3F000' || code === '42883';
}

/** What the callers of a failed lock statement are told. */
function statementFailure(cause: Error): Error {
  const known = schemaMissingError(cause);
  if (known) return known;
  return new LockUnavailableError(`a lock statement failed: ${cause.message}`, { cause });
}
