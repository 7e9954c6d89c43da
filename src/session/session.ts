import type pg from 'pg';
import { type Cancel, isConnectionLost, LockUnavailableError } from '../core/index.js';
import type { Logger } from '../observe/index.js';
import { takeBatch } from './batch.js';
import { Watchdog } from './watchdog.js';
import type { ConnectionSource, PinnedConnection } from './connection-source.js';
import type { OpStatements } from './op-statements.js';
import { isSchemaGone, statementFailure, undoFailedBatch } from './reconcile.js';
import { type RawRow, sendOpQuery } from './op-query.js';
import { internalOp, isUse, type LockOp, type OpCode, opsStatement, type PendingOp, PROBE, tokenOf } from './pending-op.js';
import { statementQuery, type StatementText } from './statement-query.js';

/** Thrown to the callers of operations that were queued on, or in flight over, a session that died. */
export class SessionLostError extends LockUnavailableError {
  /** False when the connection was never established: the database is unreachable. */
  connected = true;
}

export type { StatementText } from './statement-query.js';

/** The code of a statement taken back before it was sent (Session.statement's `withdraw`). */
export const WITHDRAWN = 'PGFENCE_WITHDRAWN';

interface SessionOptions {
  id: number;
  source: ConnectionSource;
  keepaliveMs: number;
  /** Client-side deadline of every statement on the session, probes included. */
  deadlineMs: number;
  logger: Logger;
  /** What the session runs: its owner's operations. */
  statements: OpStatements;
  onLost(session: Session, err: Error): void;
  /** A NOTIFY this session LISTENs for arrived. */
  onNotification(msg: pg.Notification): void;
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
   * The flavour of statements the session runs, as the setup statement answered (for session locks:
   * pgfence's schema is present, so tries give way to live leases of the same key). Found out by the
   * first statement after connecting; an unguarded session asks again every keepaliveMs (the schema
   * may be migrated meanwhile), never per acquire.
   */
  guarded = false;
  /** performance.now() when the session last looked for the schema. */
  private lookedAt = 0;
  private conn: PinnedConnection | null = null;
  private pending: PendingOp[] = [];
  private inFlight: PendingOp[] | null = null;
  private flushQueued = false;
  /** One timer per session, set for the next moment it must act: a statement's deadline or the next probe. */
  private readonly watchdog = new Watchdog(() => this.onWatchdog());
  /** performance.now() when the statement in flight was sent, and when the session last heard back. */
  private sentAt = 0;
  private inFlightDeadlineMs = 0;
  private lastActivity = 0;
  /** performance.now() when an operation (not a keepalive probe) was last queued or answered: idle sessions are closed by it. */
  usedAt = performance.now();
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
    this.enqueue({ code, key, fenced: false, resolve, reject });
  }

  /** Queues one operation; resolves with its result code. */
  run(code: OpCode, key: bigint): Promise<number> {
    return new Promise((resolve, reject) => this.enqueue({ code, key, fenced: false, resolve, reject }));
  }

  /** Queues a try that issues a fencing token when it grants; resolves with the result code and token. */
  runFenced(code: OpCode, key: bigint): Promise<{ result: number; token: bigint | null }> {
    return new Promise((resolve, reject) =>
      this.enqueue({ code, key, fenced: true, resolve: (result, token) => resolve({ result, token }), reject }),
    );
  }

  /**
   * Queues a statement of its own on this session, in order with the operations around it. It must
   * not block, and a failure must leave no lock taken (the batch reconciliation does not cover it).
   */
  statement<R>(text: StatementText, values: unknown[], opts: { deadlineMs?: number; withdraw?: Cancel } = {}): Promise<R[]> {
    return this.statementOf<R>(text, values, opts, false);
  }

  /**
   * As statement(), its rows as the server sent them (RawRow: text by column position, as OpQuery hands
   * them over): for a hot statement whose reader knows its columns. Its values must be scalars (sent as text).
   */
  rawStatement(text: StatementText, values: unknown[], opts: { deadlineMs?: number; withdraw?: Cancel } = {}): Promise<RawRow[]> {
    return this.statementOf<RawRow>(text, values, opts, true);
  }

  private statementOf<R>(text: StatementText, values: unknown[], opts: { deadlineMs?: number; withdraw?: Cancel }, raw: boolean): Promise<R[]> {
    return new Promise((resolve, reject) => {
      const { withdraw } = opts;
      // `withdraw` takes the statement back while it has not been sent (a cancel cannot reach it yet).
      const onWithdraw = () => {
        const i = this.pending.indexOf(op);
        if (i < 0) return; // sent already: only a server-side cancel reaches it now
        this.pending.splice(i, 1);
        reject(Object.assign(new Error('the statement was withdrawn before it was sent'), { code: WITHDRAWN }));
      };
      const unlisten = () => withdraw?.off(onWithdraw);
      const op = internalOp({ text, values, done: (rows) => (unlisten(), resolve(rows as R[])), deadlineMs: opts.deadlineMs, raw });
      op.reject = (err) => (unlisten(), reject(err));
      if (this.enqueue(op)) withdraw?.onAbort(onWithdraw);
    });
  }

  /** The one way in: false when the session is dead (the operation then fails, never synchronously). */
  private enqueue(op: PendingOp): boolean {
    if (this.state === 'dead') {
      const err = this.lostError();
      queueMicrotask(() => op.reject(err));
      return false;
    }
    this.pending.push(op);
    if (isUse(op)) this.usedAt = performance.now();
    this.scheduleFlush();
    return true;
  }

  /** Nothing queued or in flight. */
  get idle(): boolean {
    return this.inFlight === null && this.pending.length === 0;
  }
  /** Operations queued behind the statement in flight (or behind the connect). */
  get queued(): number {
    return this.pending.length;
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
      (conn.client as pg.Client).on('notification', (msg) => this.opts.onNotification(msg));
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
    const done = (rows: unknown[]) => {
      this.guarded = (rows[0] as { guarded?: boolean } | undefined)?.guarded === true;
      this.setUp = true;
    };
    const op = internalOp({ text: this.opts.statements.setup.text, values: [], done });
    op.upkeep = true;
    // A session is used only after its setup succeeded: the operations queued behind a failed first setup fail
    // with its cause, and the session ends. A later look (an unguarded session asking again for the schema)
    // that fails leaves the session as it was: set up, unguarded.
    op.reject = (err) => {
      if (!this.setUp) this.die(err);
      else this.opts.logger.warn({ err, session: this.id }, 'pgfence: an unguarded session could not look for the schema again');
    };
    return op;
  }

  /** An unguarded session looks for the schema again, first thing (in place of a due keepalive probe). */
  private lookAgain(): void {
    this.lookedAt = performance.now();
    const head = this.pending[0]!;
    if (head.code === PROBE && !head.statement) this.pending.shift();
    this.pending.unshift(this.setupOp());
  }

  private flush(): void {
    if (this.state !== 'ready' || this.inFlight || this.pending.length === 0 || !this.conn) return;
    if (!this.guarded && performance.now() - this.lookedAt >= this.opts.keepaliveMs) this.lookAgain();
    const [batch, rest] = takeBatch(this.pending);
    this.pending = rest;
    this.inFlight = batch;
    this.sentAt = performance.now();
    // A blocking wait may take its whole lock_timeout before the server answers.
    this.inFlightDeadlineMs = batch[0]!.statement?.deadlineMs ?? this.opts.deadlineMs;
    this.send(batch);
    this.arm();
  }

  /**
   * Sends one statement for the batch: a statement of its own, a probe when the batch holds probes
   * only, a lone operation's prepared statement, or a (fenced) batch statement.
   */
  private send(batch: PendingOp[]): void {
    const statement = batch[0]!.statement;
    const ops = batch.filter((op): op is LockOp => op.code !== PROBE);
    if (statement?.raw) {
      const { values, ...query } = statementQuery(statement, this.guarded);
      const asText = values.map((v) => (v == null ? null : String(v)));
      sendOpQuery(this.conn!.client, query, asText, (err, rows) => this.settled(batch, ops, err, () => statement.done(rows)));
      return;
    }
    if (statement) {
      this.conn!.client.query(statementQuery(statement, this.guarded)).then(
        (res) => this.settled(batch, ops, null, () => statement.done(res.rows)),
        (err: Error) => this.settled(batch, ops, err),
      );
      return;
    }
    const { query, values, lone } = opsStatement(this.guarded ? this.opts.statements.guarded : this.opts.statements.plain, ops);
    sendOpQuery(this.conn!.client, query, values, (err, rows) =>
      this.settled(batch, ops, err, () => {
        // Columns by position (OpFlavour): a lone operation's row is (r[, token]), a batch's (i, r[, token]).
        if (lone) for (const row of rows) lone.resolve(Number(row[0]), tokenOf(row[1]));
        else if (ops.length > 0) for (const row of rows) ops[Number(row[0]) - 1]!.resolve(Number(row[1]), tokenOf(row[2]));
      }),
    );
  }

  /** The statement in flight was answered (`deliver` hands its rows out) or failed. */
  private settled(batch: PendingOp[], ops: LockOp[], err: Error | null, deliver?: () => void): void {
    if (err === null) {
      if (this.inFlight !== batch) return; // the session died meanwhile: the batch was already failed
      this.answered(batch);
      deliver!();
      for (const op of batch) if (op.code === PROBE && !op.statement) op.resolve(1, null);
      this.next();
    } else if (batch[0]!.statement && !isConnectionLost(err) && this.inFlight === batch) {
      // A statement of its own fails alone; the session carries on.
      this.answered(batch);
      batch[0]!.reject(err);
      this.next();
    } else void this.failed(batch, ops, err);
  }

  /** The server answered the statement in flight. */
  private answered(batch: PendingOp[]): void {
    this.lastActivity = performance.now();
    if (batch.some(isUse)) this.usedAt = this.lastActivity;
    if (this.inFlight === batch) this.inFlight = null;
  }

  /** Sends what queued up meanwhile, or waits for the next moment to act. */
  private next(): void {
    if (this.state === 'ready' && this.pending.length > 0) this.flush();
    else this.arm();
  }

  /** A statement failed: the connection is gone (the session dies), or the batch is reconciled. */
  private async failed(batch: PendingOp[], ops: LockOp[], err: Error): Promise<void> {
    if (this.state === 'dead') return; // die() already failed the batch
    if (isConnectionLost(err)) {
      this.die(err);
      return;
    }
    // The schema went away under a guarded session: its later statements go without the guard.
    if (this.guarded && isSchemaGone(err)) this.guarded = false;
    await this.reconcile(ops, err);
    for (const op of batch) if (op.code === PROBE) op.resolve(1, null);
    this.answered(batch);
    this.next();
  }

  /** A statement failed on a live connection: undo what it half-did, then fail its operations with its error. */
  private async reconcile(ops: LockOp[], cause: Error): Promise<void> {
    const failure = statementFailure(cause);
    try {
      await undoFailedBatch(this.conn!.client, this.opts.statements, ops);
      for (const op of ops) op.reject(failure);
    } catch (err) {
      for (const op of ops) op.reject(failure);
      this.die(err instanceof Error ? err : failure);
    }
  }

  /**
   * Sets the watchdog for the next moment the session must act: the deadline of the statement in flight,
   * or, when idle, keepaliveMs after it last heard from the server (then it sends a probe). A loss is
   * therefore noticed within keepaliveMs + deadlineMs of the last sign of life.
   */
  private arm(): void {
    if (this.state !== 'ready') return;
    this.watchdog.setFor(this.inFlight ? this.sentAt + this.inFlightDeadlineMs : this.lastActivity + this.opts.keepaliveMs);
  }

  private onWatchdog(): void {
    if (this.state !== 'ready') return;
    const now = performance.now();
    if (this.inFlight) {
      if (now - this.sentAt >= this.inFlightDeadlineMs) {
        this.die(new LockUnavailableError(`PostgreSQL did not answer within ${Math.round(this.inFlightDeadlineMs)} ms`));
        return;
      }
    } else if (this.pending.length === 0 && now - this.lastActivity >= this.opts.keepaliveMs) {
      this.pending.push(internalOp());
      this.flush(); // arms for the probe's deadline
      return;
    }
    this.arm();
  }

  private everReady = false;
  /** Its setup statement succeeded: the session may be used (until then it counts as not connected). Read-only outside. */
  setUp = false;

  private lostError(): SessionLostError {
    const cause = this.deathCause;
    const why = cause?.message ?? 'unknown cause';
    const err = !this.everReady
      ? new SessionLostError(`could not connect to PostgreSQL: ${why}`, { cause })
      : !this.setUp
        ? new SessionLostError(`PostgreSQL session not usable, its setup statement did not succeed: ${why}`, { cause })
        : new SessionLostError(`PostgreSQL session lost: ${why}`, { cause });
    err.connected = this.setUp;
    return err;
  }

  /** `closing`: ended on purpose by close(), not lost (logged at debug). */
  private die(err: Error, notify = true, closing = false): void {
    if (this.state === 'dead') return;
    const wasReady = this.state === 'ready';
    this.state = 'dead';
    this.deathCause = err;
    this.watchdog.stop();
    this.conn?.destroy();
    const lost = this.lostError();
    const failed = [...(this.inFlight ?? []), ...this.pending];
    this.inFlight = null;
    this.pending = [];
    for (const op of failed) op.reject(lost);
    if (closing) this.opts.logger.debug({ session: this.id }, 'pgfence: session closed');
    else if (wasReady) this.opts.logger.warn({ err, session: this.id }, this.setUp ? 'pgfence: session lost' : 'pgfence: session setup failed; the session is not used');
    if (notify) this.opts.onLost(this, err);
  }
}
