import { LockerClosedError, LockUnavailableError, PgfenceError } from '../core/index.js';
import type { Observer } from '../observe/index.js';
import { type ReleaseListener, type Session, SessionLostError, type SessionPool } from '../session/index.js';
import { WaitCount, type WaiterQueue } from '../wait/index.js';
import { BlockingWait } from './blocking-wait.js';
import { afterAdmission } from './lock-budget.js';
import { KeyLock, type KeyLockContext } from './key-lock.js';
import { AdvisoryLockHandle, type AcquireRequest } from './advisory-lock.js';
import type { LockTarget } from '../keys.js';


/** Key states kept after use (beyond this, idle ones are dropped). */
const MAX_IDLE_STATES = 4096;

/**
 * Session advisory locks of one locker. Per key (KeyLock) it keeps the local holders and a FIFO line
 * of local waiters (src/wait), and drives at most one database operation at a time:
 *
 * - a fresh request tries once (politely, standing back for waiters elsewhere, when this locker has
 *   seen the key contended);
 * - the first busy key waits on the locker's waiter session (BlockingWait), blocked in
 *   pg_advisory_lock; the lock then lives on the waiter session until released;
 * - other busy keys register a marker for the key and wait for the NOTIFY a release sends when it
 *   sees a marker, with a backing-off poll for releases nobody announced;
 * - only the head of the local line talks to the database, so N local waiters cost one wait.
 *
 * A key is held at most once per session on the server; several local shared holders share that hold.
 */
export class AdvisoryLockManager {
  private readonly locks = new Map<bigint, KeyLock>();
  private readonly context: KeyLockContext;
  private heldCount = 0;
  closed = false;

  constructor(
    sessions: SessionPool,
    listener: ReleaseListener,
    observer: Observer,
    /** Extra time a blocked wait's answer may take beyond its lock_timeout. */
    private readonly deadlineMs: number,
  ) {
    const blocking = new BlockingWait(sessions, deadlineMs, () => this.closed);
    const manager = this;
    this.context = {
      sessions,
      listener,
      observer,
      deadlineMs,
      get closed() {
        return manager.closed;
      },
      waitCount: new WaitCount(),
      blocking,
      newHandle: (request, session, token) =>
        new AdvisoryLockHandle(this, request.target.name, request.target.key, request.mode, token, session.id, request.kind),
      expire: (handle) => this.expire(handle),
      heldDelta: (n) => {
        this.heldCount += n;
      },
      idle: (lock) => this.forgetIfIdle(lock),
    };
  }

  get held(): number {
    return this.heldCount;
  }
  get waiting(): number {
    return this.context.waitCount.n;
  }

  /** Resolves with a handle, or null when timeoutMs ran out and `nullOnTimeout` (tryAcquire). */
  acquire(request: AcquireRequest, nullOnTimeout: boolean): Promise<AdvisoryLockHandle | null> {
    if (this.closed) return Promise.reject(new LockerClosedError());
    if (request.signal?.aborted) return Promise.reject(request.signal.reason);
    return afterAdmission(request, () => this.lockOf(request.target.key).line.enqueue(request, nullOnTimeout));
  }

  /**
   * One try for each of many keys, all issued at once (acquireAll's first step): concurrent tries on one
   * session go out together, so thousands cost a few batched statements. A quiet key (KeyLock.quiet) is
   * tried straight on its session, without a waiter or a promise of its own; any other takes the usual
   * path with timeoutMs 0. A handle or null (busy) per target, in order; when any try failed, what the
   * others took is given back and the first failure is thrown.
   */
  tryMany(template: AcquireRequest, targets: readonly LockTarget[]): Promise<(AdvisoryLockHandle | null)[]> {
    if (this.closed) return Promise.reject(new LockerClosedError());
    if (template.signal?.aborted) return Promise.reject(template.signal.reason);
    const startedAt = performance.now();
    const results: (AdvisoryLockHandle | null)[] = new Array(targets.length).fill(null);
    return new Promise((resolve, reject) => {
      let left = targets.length;
      let failure: unknown = null;
      const answered = (i: number, handle: AdvisoryLockHandle | null, err?: unknown) => {
        results[i] = handle;
        if (err !== undefined && failure === null) failure = err;
        if (--left > 0) return;
        if (failure === null) return resolve(results);
        void Promise.all(results.map((h) => h?.release())).then(() => reject(failure));
      };
      const usual = (i: number, request: AcquireRequest) =>
        this.acquire({ ...request, timeoutMs: 0 }, true).then(
          (h) => answered(i, h),
          (err: unknown) => answered(i, null, err),
        );
      for (let i = 0; i < targets.length; i++) {
        const request: AcquireRequest = { ...template, target: targets[i]! };
        const lock = this.lockOf(request.target.key);
        if (!lock.quiet) {
          usual(i, request);
          continue;
        }
        let session: Session;
        try {
          session = this.context.sessions.lockSessionFor(lock.key, template.bulk === true);
        } catch (err) {
          answered(i, null, new LockerClosedError('the locker is closed', { cause: err }));
          continue;
        }
        // Occupies the key's line: an acquire of it meanwhile waits for this try, as for any operation on the key.
        // beginOperation/endOperation rather than a promise per key: thousands of keys are tried at once.
        lock.line.beginOperation();
        session.submit(
          lock.bulkTryCode(request),
          lock.key,
          (result) => {
            const handle = lock.bulkTried(request, session, result);
            if (handle && this.closed) {
              // Closed meanwhile: nothing of it is kept.
              void lock.giveBack(handle).then(lock.line.endOperation);
              answered(i, null, new LockerClosedError('the locker was closed'));
              return;
            }
            if (handle) lock.granted(request, handle, performance.now() - startedAt);
            answered(i, handle);
            lock.line.endOperation();
          },
          (err) => {
            lock.line.endOperation();
            // The session died under the try: try again the usual way, on its replacement.
            if (err instanceof SessionLostError && err.connected && !this.closed) usual(i, request);
            else answered(i, null, err instanceof PgfenceError ? err : new LockUnavailableError(err.message, { cause: err }));
          },
        );
      }
    });
  }

  /** The locker's waiter session, for the other kinds that wait in PostgreSQL's queue (leases). */
  get waiterQueue(): WaiterQueue {
    return this.context.blocking;
  }

  /** This locker holds the key, or has an operation for it in flight or waiting (it may be granted at any moment). */
  pinsKey(key: bigint): boolean {
    const lock = this.locks.get(key);
    return lock !== undefined && (lock.heldMode !== null || lock.releasing || !lock.line.quiet);
  }

  /** A wait is blocked on the waiter session (the pool must not close it). */
  waiterBlocked(): boolean {
    return this.context.blocking.active;
  }

  /** This locker's held locks, by backend pid and key, with their earliest grant. */
  ownLocks(into: Map<string, Date>): void {
    for (const lock of this.locks.values()) {
      const pid = lock.session?.processId;
      if (!lock.heldMode || pid == null) continue;
      for (const h of lock.holders) {
        const id = `${pid}:${lock.key}`;
        const prev = into.get(id);
        if (!prev || h.acquiredAt < prev) into.set(id, h.acquiredAt);
      }
    }
  }

  /** Called by the listener: a release of `key` was announced. */
  onRelease(key: bigint): void {
    this.locks.get(key)?.line.wake();
  }

  /** Called by the session pool: everything the session held is gone. */
  onSessionLost(session: Session, err: Error): void {
    for (const lock of this.locks.values()) {
      lock.line.sessionLost(session);
      if (lock.session === session) lock.sessionLost(err);
    }
  }

  /** Releases every held lock, fails every waiter, and stops. */
  async close(): Promise<void> {
    this.closed = true;
    const unlocks: Promise<boolean>[] = [];
    for (const lock of this.locks.values()) {
      lock.line.close(() => new LockerClosedError('the locker was closed'));
      for (const h of [...lock.holders]) unlocks.push(h.release());
    }
    await Promise.all(unlocks);
    // Operations still in flight may yet grant (a try, a blocking wait that was just cancelled): wait until each
    // has answered and what it granted is given back, so that others can take it as soon as close() resolves.
    // Bounded: the sessions are ended next, and the server then frees whatever is left anyway.
    let bound: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all([...this.locks.values()].map((lock) => lock.line.drained())),
      new Promise<void>((resolve) => (bound = setTimeout(resolve, this.deadlineMs))),
    ]);
    clearTimeout(bound);
  }

  /** A handle gives its lock back. */
  release(handle: AdvisoryLockHandle): Promise<boolean> {
    const lock = this.locks.get(handle.key);
    if (!lock || !lock.holders.has(handle) || !handle.markReleased()) return Promise.resolve(false);
    return new Promise((resolve) => lock.release(handle, resolve));
  }

  /**
   * Many handles give their locks back at once (acquireAll's release): the unlocks queue up together
   * (a few batched statements), with one promise for all. Resolves true when every one was still held.
   */
  releaseMany(handles: readonly AdvisoryLockHandle[]): Promise<boolean> {
    return new Promise((resolve) => {
      let left = handles.length;
      let all = true;
      const one = (released: boolean) => {
        if (!released) all = false;
        if (--left === 0) resolve(all);
      };
      for (const handle of handles) {
        const lock = this.locks.get(handle.key);
        if (!lock || !lock.holders.has(handle) || !handle.markReleased()) one(false);
        else lock.release(handle, one);
      }
      if (handles.length === 0) resolve(true);
    });
  }

  /** A handle's TTL ran out: it is lost, and the lock goes back. */
  expire(handle: AdvisoryLockHandle): void {
    const lock = this.locks.get(handle.key);
    if (!lock || !lock.holders.has(handle)) return;
    lock.lose(handle, 'ttl-expired');
    lock.line.kick();
  }

  private lockOf(key: bigint): KeyLock {
    let lock = this.locks.get(key);
    if (!lock) {
      lock = new KeyLock(key, this.context);
      this.locks.set(key, lock);
    }
    return lock;
  }

  /** Idle: keep the key's state for its next use (and what it learned of contention), within bounds. */
  private forgetIfIdle(lock: KeyLock): void {
    if (lock.heldMode === null && !lock.releasing && this.locks.size > MAX_IDLE_STATES && this.locks.get(lock.key) === lock) {
      this.locks.delete(lock.key);
    }
  }
}
