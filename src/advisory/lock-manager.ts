import type { LockLostReason, LockMode } from '../core/vocabulary.js';
import {
  LockerClosedError,
  LockLostError,
  LockTimeoutError,
  LockUnavailableError,
  PgfenceError,
  schemaMissingError,
} from '../errors.js';
import type { LockTarget } from '../keys.js';
import type { Observer } from '../observe/observer.js';
import { setLongTimeout } from '../core/signals.js';
import { blockingLockSql, heldBySessionSql, LEASE_HELD, Op, type OpCode } from './advisory-sql.js';
import type { ReleaseListener } from '../session/listener.js';
import type { Session } from '../session/session.js';
import type { SessionPool } from '../session/session-pool.js';
import { SessionLostError, WITHDRAWN } from '../session/session.js';
import { BaseHandle } from '../core/handle.js';

export interface AcquireRequest {
  target: LockTarget;
  mode: LockMode;
  /** 0 = one attempt; Infinity = no bound. */
  timeoutMs: number;
  signal: AbortSignal | undefined;
  /** Maximum hold, or undefined. */
  ttlMs: number | undefined;
  /** Issue a fencing token with the grant (exclusive only). */
  fencing: boolean;
  /** How events and metrics report it: 'leader' for a leader election's session guard; default 'lock'. */
  kind?: 'lock' | 'leader';
  /** Part of an acquireAll: tried on the bulk slot's session (SessionPool.lockSessionFor). */
  bulk?: boolean;
}

/** Wake-up polls back a waiter up when a release went unannounced (a holder's session died, a non-pgfence holder). */
const FIRST_POLL_MS = 50;
const MAX_POLL_MS = 1000;
/** A marker registration that collided with a release probe is retried this soon. */
const REREGISTER_MS = 5;
/** How long a cancelled blocking wait may take to leave the server's queue before its caller is answered anyway. */
const CANCEL_GRACE_MS = 250;
/** Longer waits go through setLongTimeout (Node caps a single timer at ~24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Key states kept after use (beyond this, idle ones are dropped). */
const MAX_IDLE_STATES = 4096;
/** After seeing a key busy, this locker's fresh tries stand back for waiters elsewhere this long. */
const CONTENDED_MS = 1000;

function registersMarker(code: OpCode): boolean {
  return (
    code === Op.waitTryExclusive ||
    code === Op.waitTryShared ||
    code === Op.waitPoliteTryExclusive ||
    code === Op.waitPoliteTryShared ||
    code === Op.registerMarker
  );
}

interface Waiter {
  readonly request: AcquireRequest;
  readonly startedAt: number;
  /** Has failed a try: it now waits for a wake-up, announced by a marker. */
  waiting: boolean;
  /** Its last polite try stood back for waiters elsewhere (so it registers without trying). */
  yielded: boolean;
  /** A contention event was reported for it. */
  contended: boolean;
  /**
   * Its last try found a live lease of the name: it waits for the lease's release (announced) or expiry
   * (polled), not on the waiter session, where PostgreSQL would grant it the key at once, again and again.
   */
  leased: boolean;
  settled: boolean;
  /**
   * Its timeout passed before its first try was answered, because the session was still connecting: that
   * answer decides (a grant, a timeout, or unavailable), within deadlineMs more.
   */
  expired: boolean;
  /** Gave up while its try was in flight: the answer it gets once nothing of that try is left held. */
  leaving: (() => void) | null;
  /** tryAcquire answers null on a timeout; acquire rejects with LockTimeoutError. */
  readonly nullOnTimeout: boolean;
  readonly resolve: (handle: AdvisoryLockHandle | null) => void;
  readonly reject: (err: unknown) => void;
  timer: NodeJS.Timeout | null;
  cancelLongTimer: (() => void) | null;
  onAbort: (() => void) | null;
}

interface KeyState {
  readonly key: bigint;
  /** The mode this process holds the key in on the server, or null. */
  heldMode: LockMode | null;
  /** The session that holds it. */
  session: Session | null;
  readonly holders: Set<AdvisoryLockHandle>;
  readonly queue: Waiter[];
  /** An operation for this key is in flight: at most one at a time, in order. */
  busy: boolean;
  /** A release was announced (or a poll fell due) while busy. */
  wakePending: boolean;
  /** The session whose marker announces this process's waiters, or null. */
  markerSession: Session | null;
  pollTimer: NodeJS.Timeout | null;
  pollDelayMs: number;
  /** release() calls waiting for the unlock to complete. */
  releaseWaiters: { handle?: AdvisoryLockHandle; resolve: (released: boolean) => void }[];
  /** The waiter whose try is in flight, if any, and the session it went to. */
  attemptFor: Waiter | null;
  attemptSession: Session | null;
  /** Until when local shared grants defer to waiters elsewhere (set when a release found some). */
  contendedUntil: number;
}

/**
 * Session advisory locks of one locker. Per key it keeps the local holders and a FIFO queue of
 * local waiters, and drives at most one database operation at a time:
 *
 * - a fresh request tries once (politely, standing back for waiters elsewhere, when this locker has
 *   seen the key contended);
 * - the first busy key waits on the locker's waiter session, blocked in pg_advisory_lock: PostgreSQL
 *   queues it FIFO and grants it the moment the lock is released, and a blocked waiter makes every
 *   other try fail, so nobody barges. The lock then lives on the waiter session until released;
 * - other busy keys (the waiter session is taken) register a marker for the key and wait for the
 *   NOTIFY a release sends when it sees a marker, with a backing-off poll for releases nobody
 *   announced: waiters for distinct keys never each pin a connection;
 * - only the head of the local queue talks to the database, so N local waiters cost one wait.
 *
 * A key is held at most once per session on the server; several local shared holders share that hold.
 */
export class AdvisoryLockManager {
  private readonly states = new Map<bigint, KeyState>();
  /** The wait in progress on the waiter session, if any. */
  private blocking: {
    state: KeyState;
    waiter: Waiter;
    session: Session;
    /** Takes the statement back while it has not been sent (a server-side cancel cannot reach it yet). */
    withdraw: AbortController;
    cancelling?: boolean;
    onEnd?: () => void;
  } | null = null;
  private waitingCount = 0;
  private heldCount = 0;
  closed = false;

  constructor(
    private readonly sessions: SessionPool,
    private readonly listener: ReleaseListener,
    private readonly observer: Observer,
    /** Extra time a blocked wait's answer may take beyond its lock_timeout. */
    private readonly deadlineMs: number,
  ) {}

  get held(): number {
    return this.heldCount;
  }
  get waiting(): number {
    return this.waitingCount;
  }

  /** Resolves with a handle, or null when timeoutMs ran out and `nullOnTimeout` (tryAcquire). */
  acquire(request: AcquireRequest, nullOnTimeout: boolean): Promise<AdvisoryLockHandle | null> {
    if (this.closed) return Promise.reject(new LockerClosedError());
    if (request.signal?.aborted) return Promise.reject(request.signal.reason);
    const state = this.stateOf(request.target.key);
    return new Promise<AdvisoryLockHandle | null>((resolve, reject) => {
      const waiter: Waiter = {
        request,
        startedAt: performance.now(),
        waiting: false,
        yielded: false,
        contended: false,
        leased: false,
        settled: false,
        expired: false,
        leaving: null,
        nullOnTimeout,
        resolve,
        reject,
        timer: null,
        cancelLongTimer: null,
        onAbort: null,
      };
      const { timeoutMs, signal } = request;
      if (timeoutMs > 0 && timeoutMs < MAX_TIMER_MS) waiter.timer = setTimeout(this.onTimer, timeoutMs, state, waiter);
      else if (timeoutMs > 0) waiter.cancelLongTimer = setLongTimeout(() => this.giveUp(state, waiter, null), timeoutMs);
      if (signal) {
        waiter.onAbort = () => this.giveUp(state, waiter, signal.reason);
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      state.queue.push(waiter);
      this.waitingCount++;
      // A hold with no holder left is being given back (a late grant, a release): not busy, just not free yet.
      if (state.queue.length > 1 || (state.heldMode && state.holders.size > 0)) {
        // Busy here already: a single try fails at once; anyone else queues behind the local holders.
        if (request.timeoutMs === 0 && !this.canShare(state, waiter)) {
          if (this.settle(state, waiter)) this.finish(waiter, null);
          this.pump(state);
          return;
        }
        if (!this.canShare(state, waiter)) this.contended(waiter);
      }
      this.pump(state);
    });
  }

  /**
   * One plain try for each of many keys, sent together (acquireAll's first step). A key this locker does
   * not use now (no state in flight, held, queued, marked or recently contended) is tried straight on its
   * session, without a waiter or a promise of its own: thousands cost a few batched statements. Any other
   * key takes the usual path with timeoutMs 0. Resolves with a handle or null (busy) per target, in order;
   * rejects, once every try has answered and what they took is given back, when any try failed.
   */
  tryMany(template: AcquireRequest, targets: readonly LockTarget[]): Promise<(AdvisoryLockHandle | null)[]> {
    if (this.closed) return Promise.reject(new LockerClosedError());
    if (template.signal?.aborted) return Promise.reject(template.signal.reason);
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
      const usual = (i: number, target: LockTarget) =>
        this.acquire({ ...template, target, timeoutMs: 0 }, true).then(
          (h) => answered(i, h),
          (err: unknown) => answered(i, null, err),
        );
      const now = performance.now();
      const exclusive = template.mode === 'exclusive';
      for (let i = 0; i < targets.length; i++) {
        const target = targets[i]!;
        const known = this.states.get(target.key);
        if (known && (known.busy || known.heldMode || known.queue.length > 0 || known.markerSession || known.contendedUntil > now)) {
          usual(i, target);
          continue;
        }
        let session: Session;
        try {
          session = this.sessions.lockSessionFor(target.key, template.bulk === true);
        } catch (err) {
          answered(i, null, err);
          continue;
        }
        const state = known ?? this.stateOf(target.key);
        state.busy = true;
        state.attemptSession = session;
        this.waitingCount++;
        session.submit(
          exclusive ? Op.tryExclusive : Op.tryShared,
          target.key,
          (result) => {
            state.busy = false;
            this.waitingCount--;
            if ((result & 1) === 1) {
              state.heldMode = template.mode;
              state.session = session;
              // Closed meanwhile: no handle; pump() gives the lock back.
              if (!this.closed) answered(i, this.grantTry(state, target, session, template, now));
              else answered(i, null, new LockerClosedError('the locker was closed'));
            } else {
              state.contendedUntil = performance.now() + CONTENDED_MS;
              answered(i, null);
            }
            this.pump(state);
          },
          (err) => {
            state.busy = false;
            this.waitingCount--;
            this.pump(state);
            // The session died under the try: try again the usual way, on its replacement.
            if (err instanceof SessionLostError && err.connected && !this.closed) usual(i, target);
            else answered(i, null, err instanceof PgfenceError ? err : new LockUnavailableError(err.message, { cause: err }));
          },
        );
      }
    });
  }

  /** A handle for a grant of tryMany (no waiter to answer). */
  private grantTry(state: KeyState, target: LockTarget, session: Session, template: AcquireRequest, startedAt: number): AdvisoryLockHandle {
    const handle = new AdvisoryLockHandle(this, target.name, target.key, template.mode, null, session.id, template.kind);
    state.holders.add(handle);
    this.heldCount++;
    this.sessions.noteHolds(session.id, 1);
    if (template.ttlMs !== undefined) handle.cancelTtl = setLongTimeout(() => this.expire(handle), template.ttlMs, true);
    this.observer.acquired(handle, performance.now() - startedAt);
    return handle;
  }

  /** This locker's held locks, by backend pid and key, with their earliest grant. */
  ownLocks(into: Map<string, Date>): void {
    for (const state of this.states.values()) {
      const pid = state.session?.processId;
      if (!state.heldMode || pid == null) continue;
      for (const h of state.holders) {
        const id = `${pid}:${state.key}`;
        const prev = into.get(id);
        if (!prev || h.acquiredAt < prev) into.set(id, h.acquiredAt);
      }
    }
  }

  /** Called by the listener: a release of `key` was announced. */
  onRelease(key: bigint): void {
    const state = this.states.get(key);
    if (!state || state.queue.length === 0) return;
    this.wake(state);
  }

  /** Called by the session pool: everything the session held is gone. */
  onSessionLost(session: Session, err: Error): void {
    for (const state of this.states.values()) {
      if (state.markerSession === session) state.markerSession = null;
      if (state.session !== session) continue;
      const holders = [...state.holders];
      state.heldMode = null;
      state.session = null;
      for (const h of holders) this.loseHandle(state, h, 'session-lost', err);
      this.settleReleases(state, false, err);
      this.pump(state);
    }
  }

  /** Releases every held lock, fails every waiter, and stops. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.blocking) {
      this.blocking.withdraw.abort();
      void this.sessions.cancel(this.blocking.session);
    }
    const unlocks: Promise<boolean>[] = [];
    for (const state of this.states.values()) {
      for (const w of [...state.queue]) if (this.settle(state, w)) w.reject(new LockerClosedError('the locker was closed'));
      for (const h of [...state.holders]) unlocks.push(h.release());
    }
    await Promise.all(unlocks);
    // Operations still in flight may yet grant (a try, a blocking wait that was just cancelled): wait until each
    // has answered and what it granted is given back, so that others can take it as soon as close() resolves.
    // Bounded: the sessions are ended next, and the server then frees whatever is left anyway.
    await new Promise<void>((resolve) => {
      const bound = setTimeout(resolve, this.deadlineMs);
      this.onDrained = () => {
        clearTimeout(bound);
        resolve();
      };
      this.checkDrained();
    });
    for (const state of this.states.values()) if (state.pollTimer) clearTimeout(state.pollTimer);
  }

  private onDrained: (() => void) | null = null;

  /** After close: resolves close()'s wait once no key has an operation in flight or a lock held. */
  private checkDrained(): void {
    if (!this.onDrained || this.blocking) return;
    for (const st of this.states.values()) if (st.busy || st.heldMode) return;
    const done = this.onDrained;
    this.onDrained = null;
    done();
  }

  /** A handle gives its lock back. */
  release(handle: AdvisoryLockHandle): Promise<boolean> {
    const state = this.states.get(handle.key);
    if (!state || !state.holders.has(handle) || !handle.markReleased()) return Promise.resolve(false);
    this.dropHolder(state, handle);
    this.observer.released(handle);
    if (state.holders.size > 0) return Promise.resolve(true); // other local shared holders keep the server hold
    return new Promise((resolve) => {
      state.releaseWaiters.push({ handle, resolve });
      this.pump(state);
    });
  }

  /** A handle's TTL ran out: it is lost, and the lock goes back. */
  expire(handle: AdvisoryLockHandle): void {
    const state = this.states.get(handle.key);
    if (!state || !state.holders.has(handle)) return;
    this.loseHandle(state, handle, 'ttl-expired');
    this.pump(state);
  }

  // ---- the per-key state machine ----

  private pump(state: KeyState): void {
    if (state.busy) return;
    // 1. Nobody here holds it any more: give the server hold back.
    if (state.heldMode && state.holders.size === 0) {
      this.unlock(state);
      return;
    }
    // 2. Serve the local queue.
    const head = state.queue[0];
    if (head) {
      if (state.heldMode) {
        if (this.canShare(state, head)) {
          this.grant(state, head, state.session!, null);
          this.pump(state);
        }
        return; // else: wait for the local holders to release
      }
      this.attempt(state, head);
      return;
    }
    // 3. Nobody waits here any more: withdraw the marker.
    if (state.markerSession) {
      this.unregisterMarker(state);
      return;
    }
    if (this.closed) this.checkDrained();
    // Idle: keep the state for the next use of the key (and what it learned of contention), within bounds.
    if (state.heldMode === null && state.releaseWaiters.length === 0 && this.states.size > MAX_IDLE_STATES) {
      if (state.pollTimer) clearTimeout(state.pollTimer);
      this.states.delete(state.key);
    }
  }

  private attempt(state: KeyState, head: Waiter): void {
    let session: Session;
    try {
      // A key waits and is tried where its marker is, so that its own marker never stands in its way.
      session = state.markerSession ?? this.sessions.lockSessionFor(state.key, head.request.bulk === true);
    } catch (err) {
      if (this.settle(state, head)) head.reject(new LockerClosedError('the locker is closed', { cause: err }));
      return;
    }
    const shared = head.request.mode === 'shared';
    let code: OpCode;
    if (!head.waiting) {
      const polite = state.contendedUntil !== 0 && state.contendedUntil > performance.now();
      // Seen busy lately, and the waiter session is free: straight into PostgreSQL's queue (the wait's
      // statement tries first), one statement instead of a try that most likely fails, then the wait.
      if (polite && head.request.timeoutMs > 0 && !state.markerSession && this.canBlock()) {
        head.waiting = true;
        return this.blockFor(state, head);
      }
      code = polite ? (shared ? Op.politeTryShared : Op.politeTryExclusive) : shared ? Op.tryShared : Op.tryExclusive;
    } else if (state.markerSession === session) code = shared ? Op.tryShared : Op.tryExclusive;
    // Having stood back for other waiters, announce and look again politely: a release in between is not missed.
    else if (head.yielded) code = shared ? Op.waitPoliteTryShared : Op.waitPoliteTryExclusive;
    else code = shared ? Op.waitTryShared : Op.waitTryExclusive;
    state.busy = true;
    state.attemptFor = head;
    state.attemptSession = session;
    state.wakePending = false;
    this.clearPoll(state);
    const onResult = (result: number, token: bigint | null) => {
      state.busy = false;
      state.attemptFor = null;
      if (registersMarker(code) && (result & 2) === 0) state.markerSession = session;
      if ((result & 1) === 1) {
        state.heldMode = head.request.mode;
        state.session = session;
        // A waiter that gave up while the grant was in flight gets nothing: pump() unlocks at once, and one that
        // is still leaving hears its answer once the unlock is done.
        const leaving = head.leaving;
        if (leaving) {
          if (this.settle(state, head)) state.releaseWaiters.push({ resolve: () => leaving() });
        } else if (!head.settled) this.grant(state, head, session, token);
        this.pump(state);
        return;
      }
      head.yielded = (result & 4) === 4;
      head.leased = (result & LEASE_HELD) === LEASE_HELD;
      state.contendedUntil = performance.now() + CONTENDED_MS;
      this.onBusy(state, head, (result & 2) === 2);
    };
    const onError = (err: Error) => {
      state.busy = false;
      state.attemptFor = null;
      if (err instanceof SessionLostError && err.connected && !this.closed) {
        // The session died under the attempt: try again on its replacement.
        this.pump(state);
        return;
      }
      const failure = err instanceof PgfenceError ? err : new LockUnavailableError(err.message, { cause: err });
      const leaving = head.leaving;
      if (this.settle(state, head)) (leaving ?? (() => head.reject(failure)))();
      this.pump(state);
    };
    if (head.request.fencing) session.runFenced(code, state.key).then(({ result, token }) => onResult(result, token), onError);
    else session.submit(code, state.key, (result) => onResult(result, null), onError);
  }

  private onBusy(state: KeyState, head: Waiter, registrationFailed: boolean): void {
    if (head.leaving) {
      const leaving = head.leaving;
      if (this.settle(state, head)) leaving();
    }
    if (head.settled) {
      this.pump(state);
      return;
    }
    if (head.expired) {
      this.timedOut(state, head);
      return;
    }
    if (head.request.timeoutMs === 0) {
      if (this.settle(state, head)) this.finish(head, null);
      this.pump(state);
      return;
    }
    if (!head.waiting) {
      head.waiting = true;
      this.contended(head);
      if (this.canBlock() && !head.leased) return this.blockFor(state, head);
      return this.announce(state, head);
    }
    if (this.canBlock() && !head.leased) return this.blockFor(state, head);
    if (state.wakePending) this.wake(state);
    else this.schedulePoll(state, registrationFailed ? REREGISTER_MS : undefined);
  }

  /** Listens, then tries again announcing the wait with a marker: no announcement can be missed. */
  private announce(state: KeyState, head: Waiter): void {
    state.busy = true;
    void this.listener.ensure().then(() => {
      state.busy = false;
      if (!head.settled) this.attempt(state, head);
      else this.pump(state);
    });
  }

  /** A wait is blocked on the waiter session, or a lock granted there is held (the pool must not close it). */
  usesWaiterSession(): boolean {
    return this.blocking !== null || !this.canBlock();
  }

  /** The waiter session is free: open, not waiting, and holding nothing (a wait never blocks a release). */
  private canBlock(): boolean {
    if (this.blocking || this.closed) return false;
    for (const st of this.states.values()) {
      if (st.heldMode && this.sessions.isWaiterSession(st.session)) return false;
    }
    return true;
  }

  /** Waits for the head's key in PostgreSQL's own queue, on the waiter session. */
  private blockFor(state: KeyState, head: Waiter): void {
    let session: Session;
    try {
      session = this.sessions.waiterSession();
    } catch {
      return this.schedulePoll(state);
    }
    const { mode, timeoutMs, fencing } = head.request;
    const remaining = timeoutMs === Infinity ? Infinity : head.startedAt + timeoutMs - performance.now();
    if (remaining <= 0) return this.schedulePoll(state, 1); // the timer settles the head
    const blocking: NonNullable<typeof this.blocking> = { state, waiter: head, session, withdraw: new AbortController() };
    this.blocking = blocking;
    state.busy = true;
    this.clearPoll(state);
    const lockTimeout = remaining === Infinity ? '0' : `${Math.max(1, Math.ceil(remaining))}ms`;
    session
      .statement<{ r: number; waited: boolean; token: string | null }>(
        (guarded) => blockingLockSql(mode === 'shared', fencing, guarded), // prepared: one per flavour
        [state.key, lockTimeout],
        { deadlineMs: remaining + this.deadlineMs, withdraw: blocking.withdraw.signal },
      )
      .then(
        (rows) => {
          this.blocking = null;
          state.busy = false;
          // Its try found the key busy: contention (for a wait that skipped its own try, reported now).
          if (rows[0]?.waited && !head.settled) this.contended(head);
          blocking.onEnd?.(); // a cancelled waiter settles now; the grant below then goes straight back
          if (rows[0]?.r === LEASE_HELD) {
            // Granted, but a lease of the name was taken meanwhile: the statement gave the key back.
            head.leased = true;
            if (!head.settled && !this.closed) this.announce(state, head);
            else this.pump(state);
            return;
          }
          state.heldMode = mode;
          state.session = session;
          const token = rows[0]?.token;
          if (!head.settled) this.grant(state, head, session, token ? BigInt(token) : null);
          this.pump(state);
        },
        (err: unknown) => {
          this.blocking = null;
          state.busy = false;
          const code = (err as { code?: unknown })?.code;
          // A lock_timeout or a cancel ended a wait: the key was busy all along.
          if ((code === '55P03' || code === '57014') && !head.settled) this.contended(head);
          blocking.onEnd?.();
          if (code === WITHDRAWN) {
            // Taken back before it was sent: it never waited, and holds nothing.
            if (!head.settled && !this.closed) this.schedulePoll(state, 1);
            else this.pump(state);
            return;
          }
          if (code === '55P03' || code === '57014') {
            // PostgreSQL may grant the lock in the very moment its lock_timeout or a cancel fires: the statement
            // fails, yet the session lock is held (LockErrorCleanup keeps a grant it finds). Look, give it back if
            // so, then go on as after a timeout.
            state.busy = true;
            const goOn = () => {
              state.busy = false;
              if (!head.settled && !this.closed) this.schedulePoll(state, 1);
              else this.pump(state);
            };
            const unlock = () => session.submit(mode === 'shared' ? Op.unlockShared : Op.unlockExclusive, state.key, goOn, goOn);
            const heldMode = mode === 'shared' ? 'ShareLock' : 'ExclusiveLock';
            session.statement<{ space: number; key: string; mode: string }>(heldBySessionSql, []).then(
              (rows) => (rows.some((r) => r.space === 1 && r.key === String(state.key) && r.mode === heldMode) ? unlock() : goOn()),
              unlock, // the look itself failed (a second cancel, say): unlock anyway (harmless when not held)
            );
            return;
          }
          if (err instanceof SessionLostError && err.connected) {
            // The session died (and what it held with it): go on.
            if (!head.settled && !this.closed) this.schedulePoll(state, 1);
            else this.pump(state);
            return;
          }
          // Taken but its token failed (say, the schema is missing): give the lock back, report why.
          if (!(err instanceof SessionLostError)) {
            session.run(mode === 'shared' ? Op.unlockShared : Op.unlockExclusive, state.key).catch(() => {});
          }
          const failure = schemaMissingError(err) ?? (err instanceof PgfenceError ? err : new LockUnavailableError(String((err as Error)?.message), { cause: err }));
          if (this.settle(state, head)) head.reject(failure);
          this.pump(state);
        },
      );
  }

  private unlock(state: KeyState): void {
    const session = state.session!;
    const code = state.heldMode === 'shared' ? Op.unlockShared : Op.unlockExclusive;
    state.busy = true;
    const done = (result: number, lostCause?: Error) => {
      state.busy = false;
      if (state.session === session) {
        state.heldMode = null;
        state.session = null;
      }
      if (result === 3) state.contendedUntil = performance.now() + 1000;
      // 0: the backend no longer held it (the lock was lost before this release).
      // The cause only when there is a loss to report: an Error's stack costs more than the rest of a release.
      this.settleReleases(state, result !== 0, result === 0 ? (lostCause ?? new Error('the session no longer held the lock')) : undefined);
      this.pump(state);
    };
    // A failed unlock leaves nothing held: the session is gone, or reconciliation undid it. A dead session
    // cannot say whether the lock lasted until the unlock: that release is a loss.
    session.submit(code, state.key, done, (err) => (err instanceof SessionLostError ? done(0, err) : done(1)));
  }

  private unregisterMarker(state: KeyState): void {
    const session = state.markerSession!;
    state.busy = true;
    const done = () => {
      state.busy = false;
      if (state.markerSession === session) state.markerSession = null;
      this.pump(state);
    };
    session.submit(Op.unregisterMarker, state.key, done, done);
  }

  private grant(state: KeyState, waiter: Waiter, session: Session, token: bigint | null): void {
    const { target, mode, ttlMs } = waiter.request;
    const handle = new AdvisoryLockHandle(this, target.name, target.key, mode, token, session.id, waiter.request.kind);
    state.holders.add(handle);
    this.heldCount++;
    this.sessions.noteHolds(session.id, 1);
    const waitMs = performance.now() - waiter.startedAt;
    if (this.settle(state, waiter)) this.finish(waiter, handle);
    if (ttlMs !== undefined) handle.cancelTtl = setLongTimeout(() => this.expire(handle), ttlMs, true);
    this.observer.acquired(handle, waitMs);
  }

  /** Local shared holders admit a shared request at the head of the queue, unless others wait elsewhere. */
  private canShare(state: KeyState, waiter: Waiter): boolean {
    return (
      state.heldMode === 'shared' &&
      waiter.request.mode === 'shared' &&
      state.queue[0] === waiter &&
      state.contendedUntil < performance.now()
    );
  }

  private contended(waiter: Waiter): void {
    if (waiter.contended) return;
    waiter.contended = true;
    this.observer.contention(info(waiter.request));
  }

  private wake(state: KeyState): void {
    const head = state.queue[0];
    if (!head || !head.waiting) return;
    if (state.busy) {
      state.wakePending = true;
      return;
    }
    state.pollDelayMs = FIRST_POLL_MS;
    this.attempt(state, head);
  }

  private schedulePoll(state: KeyState, delayMs?: number): void {
    this.clearPoll(state);
    const delay = delayMs ?? state.pollDelayMs;
    if (delayMs === undefined) state.pollDelayMs = Math.min(MAX_POLL_MS, state.pollDelayMs * 2);
    state.pollTimer = setTimeout(() => {
      state.pollTimer = null;
      this.wake(state);
    }, delay);
  }

  private clearPoll(state: KeyState): void {
    if (state.pollTimer) clearTimeout(state.pollTimer);
    state.pollTimer = null;
  }

  /** Timeout or abort: the waiter leaves the queue; a grant still in flight for it is given back by pump(). */
  private giveUp(state: KeyState, waiter: Waiter, abortReason: unknown): void {
    if (waiter.settled) return;
    const blocking = this.blocking;
    if (blocking?.waiter === waiter && !blocking.cancelling) {
      // Interrupt the blocked wait and settle once it has left PostgreSQL's queue (so that, when this call
      // rejects, nothing of it is left in the database), or after a short grace if the server is silent.
      blocking.cancelling = true;
      blocking.withdraw.abort();
      void this.sessions.cancel(blocking.session);
      const grace = setTimeout(() => this.giveUp(state, waiter, abortReason), CANCEL_GRACE_MS);
      blocking.onEnd = () => {
        clearTimeout(grace);
        this.giveUp(state, waiter, abortReason);
      };
      return;
    }
    if (waiter.leaving) return;
    if (abortReason === null && !waiter.expired && this.firstTryPending(state, waiter)) {
      // Nothing is known yet, busy or unreachable: the first answer decides. The connection attempt is bounded
      // by its own timeout; this bounds it once more (a caller's pool may have none).
      waiter.expired = true;
      waiter.timer = setTimeout(() => {
        const err = new LockUnavailableError(`could not connect to PostgreSQL within ${Math.round(this.deadlineMs)} ms`, {
          cause: this.connectingCause(waiter),
        });
        if (this.settle(state, waiter)) waiter.reject(err);
        this.pump(state);
      }, this.deadlineMs);
    } else if (state.attemptFor === waiter) {
      // Its try is in flight: answer once that is back (a grant it brings given back first), so that nothing of
      // this request is left held when the caller hears of it; after a short grace if the server is silent.
      waiter.leaving = abortReason !== null ? () => waiter.reject(abortReason) : () => this.answerTimeout(waiter);
      if (waiter.timer) clearTimeout(waiter.timer);
      waiter.cancelLongTimer?.();
      waiter.cancelLongTimer = null;
      waiter.timer = setTimeout(() => {
        if (this.settle(state, waiter)) waiter.leaving!();
        this.pump(state);
      }, CANCEL_GRACE_MS);
    } else if (abortReason !== null) {
      if (this.settle(state, waiter)) waiter.reject(abortReason);
      this.pump(state);
    } else {
      this.timedOut(state, waiter);
    }
  }

  /** The waiter's first try is on its way over a session that is still connecting. */
  private firstTryPending(state: KeyState, waiter: Waiter): boolean {
    if (waiter.waiting || state.queue[0] !== waiter || !state.busy) return false;
    return state.attemptSession?.state === 'connecting';
  }

  /** The wait ran out on a busy lock: LockTimeoutError, or null for tryAcquire. */
  private timedOut(state: KeyState, waiter: Waiter): void {
    if (this.settle(state, waiter)) this.answerTimeout(waiter);
    this.pump(state);
  }

  /**
   * Why a wait ended unconnected: the server has not answered the connection attempt yet (a failed
   * attempt rejects at once, with its own error; this one goes on until the connect timeout, deadlineMs).
   */
  private connectingCause(waiter: Waiter): Error {
    return new Error(
      `no answer to the connection attempt after ${Math.round(performance.now() - waiter.startedAt)} ms ` +
        `(the server or the network is slow or down; the attempt itself gives up after ${this.deadlineMs} ms)`,
    );
  }

  private answerTimeout(waiter: Waiter): void {
    this.observer.timeout(info(waiter.request), performance.now() - waiter.startedAt);
    this.finish(waiter, null);
  }

  /** Takes the waiter out of the line; false if it had already left (the caller then answers nothing). */
  private settle(state: KeyState, waiter: Waiter): boolean {
    if (waiter.settled) return false;
    waiter.settled = true;
    if (waiter.timer) clearTimeout(waiter.timer);
    waiter.cancelLongTimer?.();
    if (waiter.onAbort) waiter.request.signal!.removeEventListener('abort', waiter.onAbort);
    const i = state.queue[0] === waiter ? 0 : state.queue.indexOf(waiter);
    if (i >= 0) state.queue.splice(i, 1);
    this.waitingCount--;
    return true;
  }

  /** Answers a settled waiter: its handle, or null / LockTimeoutError when it timed out. */
  private finish(waiter: Waiter, handle: AdvisoryLockHandle | null): void {
    if (handle || waiter.nullOnTimeout) waiter.resolve(handle);
    else waiter.reject(this.timeoutError(waiter));
  }

  private readonly onTimer = (state: KeyState, waiter: Waiter): void => this.giveUp(state, waiter, null);

  /** Answers the release() calls waiting on the key's unlock; when the lock was gone, each one's signal aborts. */
  private settleReleases(state: KeyState, released: boolean, cause?: unknown): void {
    const waiters = state.releaseWaiters;
    state.releaseWaiters = [];
    for (const { handle, resolve } of waiters) {
      if (!released && handle) {
        const err = new LockLostError(handle.name, handle.key, 'session-lost', { cause });
        if (handle.markLostOnRelease(err)) this.observer.lost(handle, handle.holdMs, 'session-lost', err);
      }
      resolve(released);
    }
  }

  private dropHolder(state: KeyState, handle: AdvisoryLockHandle): void {
    state.holders.delete(handle);
    handle.cancelTtl?.();
    this.heldCount--;
    this.sessions.noteHolds(handle.sessionId, -1);
  }

  private loseHandle(state: KeyState, handle: AdvisoryLockHandle, reason: LockLostReason, cause?: unknown): void {
    const err = new LockLostError(handle.name, handle.key, reason, { cause });
    if (!handle.markLost(err)) return;
    this.dropHolder(state, handle);
    this.observer.lost(handle, handle.holdMs, reason, err);
  }

  private timeoutError(waiter: Waiter): LockTimeoutError {
    return new LockTimeoutError(waiter.request.target.name, waiter.request.target.key, waiter.request.timeoutMs);
  }

  private stateOf(key: bigint): KeyState {
    let state = this.states.get(key);
    if (!state) {
      state = {
        key,
        heldMode: null,
        session: null,
        holders: new Set(),
        queue: [],
        busy: false,
        wakePending: false,
        markerSession: null,
        pollTimer: null,
        pollDelayMs: FIRST_POLL_MS,
        releaseWaiters: [],
        attemptFor: null,
        attemptSession: null,
        contendedUntil: 0,
      };
      this.states.set(key, state);
    }
    return state;
  }
}

function info(request: AcquireRequest) {
  return { kind: request.kind ?? 'lock', name: request.target.name, key: request.target.key, mode: request.mode };
}

/** A session advisory lock held by this locker. */
export class AdvisoryLockHandle extends BaseHandle {
  /** @internal */ cancelTtl: (() => void) | undefined;

  constructor(
    private readonly manager: AdvisoryLockManager,
    name: string | null,
    key: bigint,
    mode: LockMode,
    token: bigint | null,
    /** The session id the lock lives on (pgfence-internal). */ readonly sessionId: number,
    kind: 'lock' | 'leader' = 'lock',
  ) {
    super(kind, name, key, mode, token);
  }

  protected doRelease(): Promise<boolean> {
    return this.manager.release(this);
  }

}
