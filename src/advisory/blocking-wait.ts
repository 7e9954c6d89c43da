import { type Cancel, isLockNotAvailable, isQueryCanceled, LockUnavailableError, PgfenceError, schemaMissingError, sqlState } from '../core/index.js';
import { BLOCKING_COLUMNS, blockingLockSql, heldBySessionSql, Op } from './advisory-sql.js';
import { type Session, SessionLostError, type SessionPool, type StatementText, WITHDRAWN } from '../session/index.js';
import type { Attempt, WaiterQueue } from '../wait/index.js';
import type { AcquireRequest, AdvisoryLockHandle } from './advisory-lock.js';
import { lockTimeoutSetting } from './lock-timeout.js';
import { decodeBlockResult } from './op-result.js';

/** The key a blocking wait is for, as its per-key lock state lets the wait report a grant. */
interface BlockedKey {
  readonly key: bigint;
  /** The wait was granted on `session`: the key is held there, and the request gets its handle. */
  taken(request: AcquireRequest, session: Session, token: bigint | null): AdvisoryLockHandle;
}

/** After a blocking wait ended without a grant, the waiter looks again this soon. */
const LOOK_AGAIN_MS = 1;

/**
 * The blocking waits of one locker, on its single waiter session: blocked in pg_advisory_lock,
 * PostgreSQL queues the waiter FIFO and grants it the moment the lock is released, and a blocked
 * waiter makes every other try fail, so nobody barges. One key at a time; the others announce
 * themselves and poll, so waiters for distinct keys never each pin a connection.
 */
export class BlockingWait implements WaiterQueue {
  /** A wait is in flight on the waiter session. */
  active = false;

  constructor(
    private readonly sessions: SessionPool,
    /** Extra time a blocked wait's answer may take beyond its lock_timeout. */
    private readonly deadlineMs: number,
    private readonly closed: () => boolean,
  ) {}

  /** Waits for `request`'s key for at most remainingMs, or null when the waiter session is not free. */
  block(lock: BlockedKey, request: AcquireRequest, remainingMs: number, cancel: Cancel): Promise<Attempt<AdvisoryLockHandle>> | null {
    const { mode, fencing } = request;
    const started = this.start(
      (guarded) => blockingLockSql(mode === 'shared', fencing, guarded), // prepared: one per flavour
      [lock.key, lockTimeoutSetting(remainingMs)],
      remainingMs,
      cancel,
      (session, statement, params, opts) => session.rawStatement(statement, params, opts),
    );
    if (!started) return null;
    const { session, rows: answered } = started;
    return answered.then(
      ([row]) => {
        // Its try found the key busy: contention (for a wait that skipped a try of its own, reported now).
        const contended = row?.[BLOCKING_COLUMNS.waited] === 't';
        // Granted, but a lease of the name was taken meanwhile: the statement gave the key back.
        if (decodeBlockResult(Number(row?.[BLOCKING_COLUMNS.r])).leaseHeld) return { busy: true as const, leaseHeld: true, contended };
        const token = row?.[BLOCKING_COLUMNS.token];
        return { granted: lock.taken(request, session, token ? BigInt(token) : null), contended };
      },
      (err: unknown) => this.failed(lock, request, session, err, cancel.aborted),
    );
  }

  /**
   * Runs one blocking statement on the waiter session (one at a time, whatever the kind: see
   * WaiterQueue): cancelled when `cancel` aborts, answered within remainingMs plus the deadline. Null
   * when the waiter session is not free now.
   */
  run<R>(statement: StatementText, params: unknown[], remainingMs: number, cancel: Cancel): { session: Session; rows: Promise<R[]> } | null {
    return this.start(statement, params, remainingMs, cancel, (session, text, values, opts) => session.statement<R>(text, values, opts));
  }

  /** run(), its statement sent by `send` (as rows by name, or raw). */
  private start<R>(
    statement: StatementText,
    params: unknown[],
    remainingMs: number,
    cancel: Cancel,
    send: (session: Session, statement: StatementText, params: unknown[], opts: { deadlineMs: number; withdraw: Cancel }) => Promise<R[]>,
  ): { session: Session; rows: Promise<R[]> } | null {
    // A lock of this locker lives on the waiter session: a wait there would hold up its release.
    if (this.active || this.closed() || this.sessions.waiterHolds()) return null;
    let session: Session;
    try {
      session = this.sessions.waiterSession();
    } catch {
      return null;
    }
    this.active = true;
    // `cancel` also withdraws the statement while it has not been sent (a server-side cancel cannot reach it
    // yet): the session's listener, added first, runs before the one that sends the server-side cancel.
    const rows = send(session, statement, params, { deadlineMs: remainingMs + this.deadlineMs, withdraw: cancel });
    const onCancel = () => void this.sessions.cancel(session);
    cancel.onAbort(onCancel);
    const ended = () => {
      this.active = false;
      cancel.off(onCancel);
    };
    rows.then(ended, ended);
    return { session, rows };
  }

  /** `cancelled`: this wait's own cancel was sent (a cancel meant for an earlier statement may hit this one). */
  private async failed(
    lock: BlockedKey,
    request: AcquireRequest,
    session: Session,
    err: unknown,
    cancelled: boolean,
  ): Promise<Attempt<AdvisoryLockHandle>> {
    const lookAgain = { busy: true as const, retryInMs: LOOK_AGAIN_MS };
    // Taken back before it was sent: it never waited, and holds nothing.
    if (sqlState(err) === WITHDRAWN) return lookAgain;
    const unlockOp = request.mode === 'shared' ? Op.unlockShared : Op.unlockExclusive;
    if (isLockNotAvailable(err) || isQueryCanceled(err)) {
      // PostgreSQL may grant the lock in the very moment its lock_timeout or a cancel fires: the statement fails,
      // yet the session lock is held (LockErrorCleanup keeps a grant it finds). Look, give it back if so, then go
      // on as after a timeout.
      await new Promise<void>((goOn) => {
        const unlock = () => session.submit(unlockOp, lock.key, () => goOn(), () => goOn());
        const heldMode = request.mode === 'shared' ? 'ShareLock' : 'ExclusiveLock';
        session.statement<{ space: number; key: string; mode: string }>(heldBySessionSql, []).then(
          (rows) => (rows.some((r) => r.space === 1 && r.key === String(lock.key) && r.mode === heldMode) ? unlock() : goOn()),
          unlock, // the look itself failed (a second cancel, say): unlock anyway (harmless when not held)
        );
      });
      // Its lock_timeout, or its own cancel, ended a wait: the key was busy all along.
      return { ...lookAgain, contended: isLockNotAvailable(err) || cancelled };
    }
    // The session died (and what it held with it): go on.
    if (err instanceof SessionLostError && err.connected) return lookAgain;
    // Taken but its token failed (say, the schema is missing): give the lock back, report why.
    // Dropped on failure: the unlock fails only when the session died (and the lock with it) or when a failed
    // statement was reconciled (which leaves nothing held, or ends the session).
    if (!(err instanceof SessionLostError)) session.run(unlockOp, lock.key).catch(() => {});
    throw schemaMissingError(err) ?? (err instanceof PgfenceError ? err : new LockUnavailableError(String((err as Error)?.message), { cause: err }));
  }
}
