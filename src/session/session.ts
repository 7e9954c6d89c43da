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
import { CONNECTING, connectionOf, type Dead, type Flushing, type Idle, type Reconciling, SESSION_STATES, type SessionState, type SettingUp } from './session-state.js';
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
  /** Its one state (session-state.ts): changed only by move(). */
  private current: SessionState = CONNECTING;
  /** Operations queued behind the statement out (or behind the connect and the setup statement). */
  private pending: PendingOp[] = [];
  /** One timer per session, set for the next moment it must act: a statement's deadline or the next probe. */
  private readonly watchdog = new Watchdog(() => this.onWatchdog());
  /** performance.now() when the session last heard back from the server. */
  private lastActivity = 0;
  /** performance.now() when an operation (not a keepalive probe) was last queued or answered: idle sessions are closed by it. */
  usedAt = performance.now();
  /** A statement out that was withdrawn after it was sent, and by when the server must answer it (see answerSoon). */
  private withdrawnOut: { batch: readonly PendingOp[]; answerBy: number } | null = null;

  constructor(private readonly opts: SessionOptions) {
    this.id = opts.id;
    void this.connect();
  }

  /** The session's state (read-only outside: see SESSION_STATES). */
  get state(): SessionState {
    return this.current;
  }

  /** Set up and not dead: its statements go out in order (until then it counts as not connected). */
  get usable(): boolean {
    const { kind } = this.current;
    return kind === 'idle' || kind === 'flushing' || kind === 'reconciling';
  }

  /** Why the session died; null while it lives. */
  get deathCause(): Error | null {
    return this.current.kind === 'dead' ? this.current.cause : null;
  }

  /** The only transition function: a move SESSION_STATES does not list throws IllegalTransitionError (a bug). */
  private move(next: SessionState): void {
    this.current = SESSION_STATES.transition(this.current, next);
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
        if (i < 0) return this.answerSoon(op); // sent already: only a server-side cancel reaches it now
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
    const s = this.current;
    if (s.kind === 'dead') {
      const err = this.lostError(s);
      queueMicrotask(() => op.reject(err));
      return false;
    }
    this.pending.push(op);
    if (isUse(op)) this.usedAt = performance.now();
    // An idle session sends a lone operation at once; whatever comes while a statement is out (or before the
    // session is set up, or while an answer is handed out) goes out together, as the next statement, right after.
    if (s.kind === 'idle' && this.pending.length === 1) this.flush(s);
    return true;
  }

  /** Operations queued behind the statement out (or behind the connect). */
  get queued(): number {
    return this.pending.length;
  }

  /** The backend pid while connected, for diagnostics and tests. */
  get processId(): number | null {
    return (connectionOf(this.current)?.client as { processID?: number } | undefined)?.processID ?? null;
  }

  /** Ends the session: the server releases everything it held. */
  close(): void {
    this.die(new SessionLostError('the locker was closed'), false, true);
  }

  /** connecting -> settingUp, its setup statement sent at once (or -> dead). */
  private async connect(): Promise<void> {
    let conn: PinnedConnection;
    try {
      conn = await this.opts.source.pin((err) => this.die(err));
    } catch (err) {
      this.die(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    if (this.current.kind === 'dead') {
      conn.destroy(); // closed (or failed) while it connected
      return;
    }
    (conn.client as pg.Client).once('end', () => this.die(new Error('connection ended')));
    (conn.client as pg.Client).on('notification', (msg) => this.opts.onNotification(msg));
    this.lastActivity = performance.now();
    // The first statement finds out whether the schema is there, before any lock statement is sent.
    const settingUp: SettingUp = { kind: 'settingUp', conn, batch: [this.setupOp()], sentAt: this.lastActivity, deadlineMs: this.opts.deadlineMs };
    this.move(settingUp);
    this.send(settingUp);
    this.arm();
  }

  /** The setup statement as an operation of its own (it also serves as a probe). */
  private setupOp(): PendingOp {
    const done = (rows: unknown[]) => this.lookedFor((rows[0] as { guarded?: boolean } | undefined)?.guarded === true);
    const op = internalOp({ text: this.opts.statements.setup.text, values: [], done });
    op.upkeep = true;
    // A failed first setup ends the session: the operations queued behind it fail with its cause. A later look (an
    // unguarded session asking again for the schema) that fails leaves the session as it was: set up, unguarded.
    op.reject = (err) => {
      if (this.current.kind === 'settingUp') this.die(err);
      else if (this.current.kind === 'flushing') this.opts.logger.warn({ err, session: this.id }, 'pgfence: an unguarded session could not look for the schema again');
    };
    return op;
  }

  /** The setup statement answered: settingUp (or flushing, for a look again) -> idle, in the flavour it found. */
  private lookedFor(guarded: boolean): void {
    const s = this.current;
    if (s.kind === 'settingUp') this.move({ kind: 'idle', conn: s.conn, guarded, lookedAt: s.sentAt });
    else if (s.kind === 'flushing') this.move(guarded === s.idle.guarded ? s.idle : { ...s.idle, guarded });
  }

  /** idle -> flushing: the next statement goes out (an unguarded session due to look for the schema again looks first). */
  private flush(s: Idle): void {
    const now = performance.now();
    let idle = s;
    if (!s.guarded && now - s.lookedAt >= this.opts.keepaliveMs) {
      // In place of a due keepalive probe.
      const head = this.pending[0]!;
      if (head.code === PROBE && !head.statement) this.pending.shift();
      this.pending.unshift(this.setupOp());
      idle = { kind: 'idle', conn: s.conn, guarded: false, lookedAt: now };
    }
    const [batch, rest] = takeBatch(this.pending);
    this.pending = rest;
    // A blocking wait may take its whole lock_timeout before the server answers.
    const flushing: Flushing = { kind: 'flushing', idle, batch, sentAt: now, deadlineMs: batch[0]!.statement?.deadlineMs ?? this.opts.deadlineMs };
    this.move(flushing);
    this.send(flushing);
    this.arm();
  }

  /**
   * Sends the statement out: a statement of its own (the setup statement too), a probe when the batch holds
   * probes only, a lone operation's prepared statement, or a (fenced) batch statement.
   */
  private send(s: SettingUp | Flushing): void {
    const { client } = s.kind === 'settingUp' ? s.conn : s.idle.conn;
    const guarded = s.kind === 'flushing' && s.idle.guarded;
    const statement = s.batch[0]!.statement;
    const ops = s.batch.filter((op): op is LockOp => op.code !== PROBE);
    if (statement?.raw) {
      const { values, ...query } = statementQuery(statement, guarded);
      const asText = values.map((v) => (v == null ? null : String(v)));
      sendOpQuery(client, query, asText, (err, rows) => this.settled(s, ops, err, () => statement.done(rows)));
      return;
    }
    if (statement) {
      client.query(statementQuery(statement, guarded)).then(
        (res) => this.settled(s, ops, null, () => statement.done(res.rows)),
        (err: Error) => this.settled(s, ops, err),
      );
      return;
    }
    const { query, values, lone } = opsStatement(guarded ? this.opts.statements.guarded : this.opts.statements.plain, ops);
    sendOpQuery(client, query, values, (err, rows) =>
      this.settled(s, ops, err, () => {
        // Columns by position (OpFlavour): a lone operation's row is (r[, token]), a batch's (i, r[, token]).
        if (lone) for (const row of rows) lone.resolve(Number(row[0]), tokenOf(row[1]));
        else if (ops.length > 0) for (const row of rows) ops[Number(row[0]) - 1]!.resolve(Number(row[1]), tokenOf(row[2]));
      }),
    );
  }

  /** The statement out was answered (`deliver` hands its rows out) or failed. */
  private settled(s: SettingUp | Flushing, ops: LockOp[], err: Error | null, deliver?: () => void): void {
    if (this.current !== s) return; // the session died meanwhile: die() failed the batch
    const statement = s.batch[0]!.statement;
    if (err !== null && (!statement || isConnectionLost(err))) {
      void this.failed(s, ops, err);
      return;
    }
    this.heardBack(s.batch);
    if (statement) {
      // A statement of its own goes alone and is answered first: its caller hears back through a promise, later;
      // the setup statement's answer moves the session to idle itself (a failed first one ends it). It fails alone.
      if (err === null) deliver!();
      else s.batch[0]!.reject(err);
      if (this.current === s && s.kind === 'flushing') this.move(s.idle);
    } else if (s.kind === 'flushing') {
      // Lock operations: back to idle before their callbacks run, so that an operation they queue goes out at once
      // and a close they call finds no batch out to fail a second time.
      this.move(s.idle);
      deliver!();
      for (const op of s.batch) if (op.code === PROBE) op.resolve(1, null);
    }
    this.next();
  }

  /** The server answered the statement out. */
  private heardBack(batch: readonly PendingOp[]): void {
    this.lastActivity = performance.now();
    if (batch.some(isUse)) this.usedAt = this.lastActivity;
  }

  /** Sends what queued up meanwhile, or waits for the next moment to act. */
  private next(): void {
    const s = this.current;
    if (s.kind === 'idle' && this.pending.length > 0) this.flush(s);
    else this.arm();
  }

  /**
   * A statement failed: the connection is gone (the session dies), or flushing -> reconciling: what it half did
   * is undone (two round trips whatever the batch size), its operations fail with its error, exactly once
   * (die() leaves a batch being reconciled to this), and the session is idle again.
   */
  private async failed(s: SettingUp | Flushing, ops: LockOp[], err: Error): Promise<void> {
    if (isConnectionLost(err) || s.kind !== 'flushing') {
      this.die(err);
      return;
    }
    // The schema went away under a guarded session: its later statements go without the guard.
    const idle: Idle = s.idle.guarded && isSchemaGone(err) ? { ...s.idle, guarded: false } : s.idle;
    const reconciling: Reconciling = { kind: 'reconciling', idle, batch: s.batch, sentAt: s.sentAt, deadlineMs: s.deadlineMs };
    this.move(reconciling);
    const failure = statementFailure(err);
    let undoFailed: Error | null = null;
    try {
      await undoFailedBatch(idle.conn.client, this.opts.statements, ops);
    } catch (e) {
      undoFailed = e instanceof Error ? e : failure;
    }
    if (undoFailed === null && this.current === reconciling) {
      this.heardBack(s.batch);
      this.move(idle);
    }
    for (const op of ops) op.reject(failure);
    for (const op of s.batch) if (op.code === PROBE) op.resolve(1, null);
    if (undoFailed) this.die(undoFailed);
    else this.next();
  }

  /**
   * Sets the watchdog for the next moment the session must act: the deadline of the statement out, or, when
   * idle, keepaliveMs after it last heard from the server (then it sends a probe). A loss is therefore
   * noticed within keepaliveMs + deadlineMs of the last sign of life.
   */
  private arm(): void {
    const s = this.current;
    if (s.kind === 'connecting' || s.kind === 'dead') return;
    this.watchdog.setFor(s.kind === 'idle' ? this.lastActivity + this.opts.keepaliveMs : this.dueAt(s));
  }

  /** When the statement out must have been answered: its deadline, or sooner once withdrawn (answerSoon). */
  private dueAt(s: SettingUp | Flushing | Reconciling): number {
    const withdrawn = this.withdrawnOut?.batch === s.batch ? this.withdrawnOut.answerBy : Infinity;
    return Math.min(s.sentAt + s.deadlineMs, withdrawn);
  }

  /**
   * The statement out was withdrawn (its waiter gave up, and a server-side cancel is on its way): the server has
   * deadlineMs from now to answer it, however long the statement was allowed to wait (a wait without a timeout
   * too), or the session is lost, as after any late statement. A cancel lost in a dead network then holds up
   * whatever waits for the statement's end (a close, the next wait) no longer than that.
   */
  private answerSoon(op: PendingOp): void {
    const s = this.current;
    if ((s.kind !== 'flushing' && s.kind !== 'reconciling') || !s.batch.includes(op)) return;
    const answerBy = performance.now() + this.opts.deadlineMs;
    if (answerBy >= s.sentAt + s.deadlineMs) return;
    this.withdrawnOut = { batch: s.batch, answerBy };
    this.arm();
  }

  private onWatchdog(): void {
    const s = this.current;
    if (s.kind === 'connecting' || s.kind === 'dead') return;
    const now = performance.now();
    if (s.kind !== 'idle') {
      if (now >= this.dueAt(s)) {
        const cancelled = this.dueAt(s) < s.sentAt + s.deadlineMs;
        this.die(new LockUnavailableError(`PostgreSQL did not answer ${cancelled ? 'a cancelled statement ' : ''}within ${Math.round(cancelled ? this.opts.deadlineMs : s.deadlineMs)} ms`));
        return;
      }
    } else if (this.pending.length === 0 && now - this.lastActivity >= this.opts.keepaliveMs) {
      this.pending.push(internalOp());
      this.flush(s); // arms for the probe's deadline
      return;
    }
    this.arm();
  }

  private lostError({ cause, diedIn }: Dead): SessionLostError {
    const why = cause.message ?? 'unknown cause';
    const err =
      diedIn === 'connecting'
        ? new SessionLostError(`could not connect to PostgreSQL: ${why}`, { cause })
        : diedIn === 'settingUp'
          ? new SessionLostError(`PostgreSQL session not usable, its setup statement did not succeed: ${why}`, { cause })
          : new SessionLostError(`PostgreSQL session lost: ${why}`, { cause });
    err.connected = diedIn !== 'connecting' && diedIn !== 'settingUp';
    return err;
  }

  /** Any state but dead -> dead. `closing`: ended on purpose by close(), not lost (logged at debug). */
  private die(err: Error, notify = true, closing = false): void {
    const s = this.current;
    if (s.kind === 'dead') return;
    const dead: Dead = { kind: 'dead', cause: err, diedIn: s.kind };
    this.move(dead);
    this.watchdog.stop();
    connectionOf(s)?.destroy();
    const lost = this.lostError(dead);
    // The statement out fails with the session (a batch being reconciled fails with its statement's error instead).
    const out = s.kind === 'settingUp' || s.kind === 'flushing' ? s.batch : [];
    const queued = this.pending;
    this.pending = [];
    for (const op of out) op.reject(lost);
    for (const op of queued) op.reject(lost);
    if (closing) this.opts.logger.debug({ session: this.id }, 'pgfence: session closed');
    else if (s.kind !== 'connecting') this.opts.logger.warn({ err, session: this.id }, s.kind === 'settingUp' ? 'pgfence: session setup failed; the session is not used' : 'pgfence: session lost');
    if (notify) this.opts.onLost(this, err);
  }
}
