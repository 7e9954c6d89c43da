import {
  LockLostError,
  LockTimeoutError,
  LockUnavailableError,
  PgfenceError,
  schemaMissingError,
  type LockLostReason,
} from '../errors.js';
import type { LockTarget } from '../keys.js';
import type { Observer } from '../observe/observer.js';
import { setLongTimeout } from '../options.js';
import { Op } from '../session/advisory-sql.js';
import type { ConnectionSource } from '../session/connection-source.js';
import type { ReleaseListener } from '../session/listener.js';
import type { Session } from '../session/session.js';
import type { SessionPool } from '../session/session-pool.js';
import { BaseHandle, type LockHandle } from '../advisory/handle.js';
import { acquireLeaseSql, releaseLeaseSql, renewLeaseSql } from './lease-sql.js';

export interface LeaseRequest {
  target: LockTarget;
  ttlMs: number;
  renew: boolean;
  timeoutMs: number;
  signal: AbortSignal | undefined;
  owner: string;
  data: unknown;
}

/** A held lease: a lock handle with an owner, a database-clock expiry and renewal. */
export interface LeaseHandle extends LockHandle {
  readonly token: bigint;
  readonly owner: string;
  /** When the database will consider the lease expired, as of the last grant or renewal. */
  readonly expiresAt: Date;
  readonly data: unknown;
  /** Extends the lease by its TTL; false (and the handle is lost) when it is no longer this holder's. */
  renew(): Promise<boolean>;
}

/** Busy leases are polled at least this often, in case a release announcement was missed. */
const MAX_POLL_MS = 1000;

interface LeaseWaiter {
  readonly request: LeaseRequest;
  readonly startedAt: number;
  waiting: boolean;
  settled: boolean;
  resolve(handle: LeaseHandleImpl | null): void;
  reject(err: unknown): void;
  cleanup(): void;
}

interface LeaseKeyState {
  readonly key: bigint;
  readonly queue: LeaseWaiter[];
  busy: boolean;
  wakePending: boolean;
  markerSession: Session | null;
  pollTimer: NodeJS.Timeout | null;
}

interface AcquireRow {
  granted: boolean;
  token: string;
  owner: string;
  acquired_at: Date;
  expires_at: Date;
  remaining_ms: number;
}

/**
 * Table-backed leases of one locker. A lease is taken by one statement that checks expiry on the
 * database clock and issues the fencing token in the same transaction. Local waiters queue FIFO per
 * key; the head polls the lease (a busy check writes nothing) and is woken at once by the NOTIFY of a
 * release, announced by a marker on the key's session as for advisory locks.
 */
export class LeaseManager {
  private readonly states = new Map<bigint, LeaseKeyState>();
  private readonly holding = new Set<LeaseHandleImpl>();
  private waitingCount = 0;
  closed = false;

  constructor(
    private readonly source: ConnectionSource,
    private readonly sessions: SessionPool,
    private readonly listener: ReleaseListener,
    readonly observer: Observer,
  ) {}

  get held(): number {
    return this.holding.size;
  }
  get waiting(): number {
    return this.waitingCount;
  }

  acquire(request: LeaseRequest, nullOnTimeout: boolean): Promise<LeaseHandleImpl | null> {
    if (this.closed) return Promise.reject(new LockUnavailableError('the locker is closed'));
    if (request.signal?.aborted) return Promise.reject(request.signal.reason);
    const state = this.stateOf(request.target.key);
    return new Promise<LeaseHandleImpl | null>((resolve, reject) => {
      const cancelTimer = request.timeoutMs > 0 ? setLongTimeout(() => this.giveUp(state, waiter, null), request.timeoutMs) : () => {};
      const onAbort = () => this.giveUp(state, waiter, request.signal!.reason);
      request.signal?.addEventListener('abort', onAbort, { once: true });
      const waiter: LeaseWaiter = {
        request,
        startedAt: performance.now(),
        waiting: false,
        settled: false,
        resolve: (h) => (nullOnTimeout || h ? resolve(h) : reject(timeoutError(request))),
        reject,
        cleanup: () => {
          cancelTimer();
          request.signal?.removeEventListener('abort', onAbort);
        },
      };
      state.queue.push(waiter);
      this.waitingCount++;
      if (state.queue.length > 1) {
        if (request.timeoutMs === 0) {
          this.settle(state, waiter, () => waiter.resolve(null));
          return;
        }
        this.contended(waiter);
      }
      this.drive(state);
    });
  }

  onRelease(key: bigint): void {
    const state = this.states.get(key);
    if (state?.queue[0]?.waiting) this.wake(state);
  }

  onSessionLost(session: Session): void {
    for (const state of this.states.values()) if (state.markerSession === session) state.markerSession = null;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const state of this.states.values()) {
      for (const w of [...state.queue]) this.settle(state, w, () => w.reject(new LockUnavailableError('the locker was closed')));
      if (state.pollTimer) clearTimeout(state.pollTimer);
    }
    await Promise.all([...this.holding].map((h) => h.release()));
  }

  // ---- holders ----

  /** @internal */ renew(handle: LeaseHandleImpl): Promise<'renewed' | LockLostReason | 'unavailable'> {
    const sentAt = performance.now();
    return this.source.pool
      .query<{ expires_at: Date | null; current_token: string | null }>(renewLeaseSql, [handle.key, handle.token, handle.ttlMs])
      .then(
        ({ rows }) => {
          const row = rows[0]!;
          if (row.expires_at) {
            handle.renewed(sentAt, row.expires_at);
            return 'renewed' as const;
          }
          return row.current_token !== null && BigInt(row.current_token) !== handle.token ? 'lease-stolen' : 'lease-expired';
        },
        () => 'unavailable' as const,
      );
  }

  /** @internal */ async release(handle: LeaseHandleImpl): Promise<boolean> {
    if (!this.holding.delete(handle) || !handle.markReleased()) return false;
    handle.stopTimers();
    this.observer.released({ ...handle.info(), token: handle.token, holdMs: handle.holdMs });
    try {
      const { rows } = await this.source.pool.query<{ released: boolean }>(releaseLeaseSql, [handle.key, handle.token]);
      return rows[0]!.released;
    } catch {
      return false; // unreachable: the lease expires on its own at its TTL
    }
  }

  /** @internal */ lose(handle: LeaseHandleImpl, reason: LockLostReason, cause?: unknown): void {
    if (!this.holding.delete(handle)) return;
    const err = new LockLostError(handle.name, handle.key, reason, { cause });
    if (!handle.markLost(err)) return;
    handle.stopTimers();
    this.observer.lost({ ...handle.info(), token: handle.token, holdMs: handle.holdMs, reason, error: err });
  }

  // ---- waiting ----

  private drive(state: LeaseKeyState): void {
    if (state.busy) return;
    const head = state.queue[0];
    if (!head) {
      this.cleanup(state);
      return;
    }
    state.busy = true;
    state.wakePending = false;
    this.clearPoll(state);
    const { target, owner, ttlMs, data } = head.request;
    const sentAt = performance.now();
    this.source.pool
      .query<AcquireRow>(acquireLeaseSql, [target.key, target.name, owner, ttlMs, data === undefined ? null : JSON.stringify(data)])
      .then(
        ({ rows }) => {
          state.busy = false;
          const row = rows[0]!;
          if (row.granted) this.granted(state, head, row, sentAt);
          else this.busyLease(state, head, row);
        },
        (err: unknown) => {
          state.busy = false;
          const failure =
            schemaMissingError(err) ??
            (err instanceof PgfenceError ? err : new LockUnavailableError(`a lease statement failed: ${(err as Error)?.message}`, { cause: err }));
          this.settle(state, head, () => head.reject(failure));
          this.drive(state);
        },
      );
  }

  private granted(state: LeaseKeyState, head: LeaseWaiter, row: AcquireRow, sentAt: number): void {
    const { request } = head;
    const handle = new LeaseHandleImpl(this, request, BigInt(row.token), row.expires_at, sentAt);
    this.holding.add(handle);
    if (head.settled) {
      // The waiter gave up while the grant was in flight: give the lease straight back.
      void handle.release();
    } else {
      this.settle(state, head, () => head.resolve(handle));
      this.observer.acquired({ ...handle.info(), token: handle.token, waitMs: performance.now() - head.startedAt });
    }
    this.drive(state);
  }

  private busyLease(state: LeaseKeyState, head: LeaseWaiter, row: AcquireRow): void {
    if (head.settled) {
      this.drive(state);
      return;
    }
    if (head.request.timeoutMs === 0) {
      this.settle(state, head, () => head.resolve(null));
      this.drive(state);
      return;
    }
    const pollMs = Math.max(1, Math.min(MAX_POLL_MS, row.remaining_ms + 1));
    if (!head.waiting) {
      head.waiting = true;
      this.contended(head);
      // Announce the wait (listen first, then the marker), then look again: a release in between is not missed.
      state.busy = true;
      void this.announce(state).then(() => {
        state.busy = false;
        this.drive(state);
      });
      return;
    }
    if (state.wakePending) this.drive(state);
    else this.schedulePoll(state, pollMs);
  }

  private async announce(state: LeaseKeyState): Promise<void> {
    if (!(await this.listener.ensure()) || state.markerSession) return;
    try {
      const session = this.sessions.sessionFor(state.key);
      const result = await session.run(Op.registerMarker, state.key);
      if ((result & 2) === 0) state.markerSession = session;
    } catch {
      // No marker: the poll still finds the release.
    }
  }

  private cleanup(state: LeaseKeyState): void {
    this.clearPoll(state);
    const session = state.markerSession;
    state.markerSession = null;
    this.states.delete(state.key);
    if (session && session.state === 'ready') session.run(Op.unregisterMarker, state.key).catch(() => {});
  }

  private wake(state: LeaseKeyState): void {
    if (state.busy) state.wakePending = true;
    else this.drive(state);
  }

  private schedulePoll(state: LeaseKeyState, ms: number): void {
    this.clearPoll(state);
    state.pollTimer = setTimeout(() => {
      state.pollTimer = null;
      this.wake(state);
    }, ms);
  }

  private clearPoll(state: LeaseKeyState): void {
    if (state.pollTimer) clearTimeout(state.pollTimer);
    state.pollTimer = null;
  }

  private giveUp(state: LeaseKeyState, waiter: LeaseWaiter, abortReason: unknown): void {
    if (waiter.settled) return;
    if (abortReason !== null) {
      this.settle(state, waiter, () => waiter.reject(abortReason));
    } else {
      this.observer.timeout({ ...info(waiter.request), waitMs: performance.now() - waiter.startedAt });
      this.settle(state, waiter, () => waiter.resolve(null));
    }
    this.drive(state);
  }

  private settle(state: LeaseKeyState, waiter: LeaseWaiter, outcome: () => void): void {
    if (waiter.settled) return;
    waiter.settled = true;
    waiter.cleanup();
    const i = state.queue.indexOf(waiter);
    if (i >= 0) state.queue.splice(i, 1);
    this.waitingCount--;
    outcome();
  }

  private contended(waiter: LeaseWaiter): void {
    this.observer.contention(info(waiter.request));
  }

  private stateOf(key: bigint): LeaseKeyState {
    let state = this.states.get(key);
    if (!state) {
      state = { key, queue: [], busy: false, wakePending: false, markerSession: null, pollTimer: null };
      this.states.set(key, state);
    }
    return state;
  }
}

function info(request: LeaseRequest) {
  return { kind: 'lease' as const, name: request.target.name, key: request.target.key, mode: 'exclusive' as const };
}

function timeoutError(request: LeaseRequest): LockTimeoutError {
  return new LockTimeoutError(request.target.name, request.target.key, request.timeoutMs);
}

/**
 * The holder's side of a lease. Its local deadline runs on the monotonic clock from when the last
 * successful grant or renewal was *sent*, minus a margin: the database set the expiry later than that,
 * so the signal aborts before anyone else can be admitted.
 */
export class LeaseHandleImpl extends BaseHandle implements LeaseHandle {
  declare readonly token: bigint;
  readonly owner: string;
  readonly data: unknown;
  readonly ttlMs: number;
  expiresAt: Date;
  private deadlineCancel: (() => void) | null = null;
  private renewTimer: NodeJS.Timeout | null = null;
  private renewing: Promise<boolean> | null = null;

  constructor(
    private readonly manager: LeaseManager,
    request: LeaseRequest,
    token: bigint,
    expiresAt: Date,
    sentAt: number,
  ) {
    super(request.target.name, request.target.key, 'exclusive', token);
    this.owner = request.owner;
    this.data = request.data;
    this.ttlMs = request.ttlMs;
    this.expiresAt = expiresAt;
    this.armDeadline(sentAt);
    if (request.renew) this.scheduleRenewal(this.ttlMs / 3);
  }

  info() {
    return { kind: 'lease' as const, name: this.name, key: this.key, mode: 'exclusive' as const };
  }

  /** How much earlier than the database's expiry the holder stops trusting its lease. */
  static marginMs(ttlMs: number): number {
    return Math.min(1000, Math.max(25, ttlMs * 0.05));
  }

  renew(): Promise<boolean> {
    if (!this.held) return Promise.resolve(false);
    this.renewing ??= this.manager
      .renew(this)
      .then((outcome) => {
        if (outcome === 'renewed') return true;
        if (outcome !== 'unavailable') this.manager.lose(this, outcome);
        return false;
      })
      .finally(() => {
        this.renewing = null;
      });
    return this.renewing;
  }

  /** @internal a renewal sent at `sentAt` succeeded. */
  renewed(sentAt: number, expiresAt: Date): void {
    if (!this.held) return;
    this.expiresAt = expiresAt;
    this.armDeadline(sentAt);
  }

  /** @internal */ stopTimers(): void {
    this.deadlineCancel?.();
    this.deadlineCancel = null;
    if (this.renewTimer) clearTimeout(this.renewTimer);
    this.renewTimer = null;
  }

  protected doRelease(): Promise<boolean> {
    return this.manager.release(this);
  }

  private armDeadline(sentAt: number): void {
    this.deadlineCancel?.();
    const left = sentAt + this.ttlMs - LeaseHandleImpl.marginMs(this.ttlMs) - performance.now();
    this.deadlineCancel = setLongTimeout(() => this.manager.lose(this, 'lease-expired'), Math.max(0, left), true);
  }

  private scheduleRenewal(ms: number): void {
    this.renewTimer = setTimeout(() => {
      this.renewTimer = null;
      if (!this.held) return;
      void this.renew().then((ok) => {
        if (!this.held) return;
        // A failed attempt (database unreachable) is retried soon; the deadline still bounds the hold.
        this.scheduleRenewal(ok ? this.ttlMs / 3 : Math.min(500, this.ttlMs / 10));
      });
    }, ms);
    this.renewTimer.unref();
  }
}
