import type pg from 'pg';
import { BaseHandle, type Cancel, type LockHandle, LockLostError, type LockLostReason, LockUnavailableError, PgfenceError, schemaMissingError, setLongTimeout } from '../core/index.js';
import type { LockTarget } from '../keys.js';
import type { Observer } from '../observe/index.js';
import { type ReleaseListener, type Session, SessionLostError, type SessionPool, type ShortStatements } from '../session/index.js';
import { type Attempt, type Busy, closedError, type WaiterQueue, WaitLines } from '../wait/index.js';
import { leaseStatements } from './lease-sql.js';
import { acquireQueued, type AcquireRow, busyWith } from './queued-lease.js';

export interface LeaseRequest {
  target: LockTarget;
  ttlMs: number;
  renew: boolean;
  timeoutMs: number;
  signal: AbortSignal | undefined;
  owner: string;
  data: unknown;
  /** The lease holds its name at least until acquired_at + minHoldMs (database clock), however it ends; 0 = none. */
  minHoldMs: number;
}

/** A lease-backed permit: a lease on the first free of `slots` (see sql/permits.sql). */
export interface PermitLeaseRequest extends LeaseRequest {
  /** The semaphore's base key: its waiters line up there. */
  baseKey: bigint;
  slots: readonly bigint[];
}

/** A held lease: a lock handle with an owner, a database-clock expiry and renewal. */
export interface LeaseHandle<D = unknown> extends LockHandle {
  readonly token: bigint;
  readonly owner: string;
  /** When the database will consider the lease expired, as of the last grant or renewal. */
  readonly expiresAt: Date;
  /** The `data` given to lease() (stored with the lease as JSON). */
  readonly data: D;
  /**
   * Extends the lease by its TTL; false (and the handle is lost) when it is no longer this holder's.
   *
   * @example
   * ```ts fragment
   * const lease = await locker.lease('sync', { ttlMs: 60_000, renew: false });
   * if (!(await lease.renew())) console.log('the lease is no longer ours: stop');
   * ```
   */
  renew(): Promise<boolean>;
}

interface PermitRow {
  granted: boolean;
  slot: string | null;
  token: string | null;
  expires_at: Date | null;
  remaining_ms: number | null;
}

/**
 * Table-backed leases of one locker. A lease is taken by one statement that checks expiry on the
 * database clock and issues the fencing token in the same transaction. Local waiters line up per key
 * (src/wait); the head looks at the lease (a busy check writes nothing) when a release is announced,
 * when the current lease is due to expire, or at its poll. While a lock (not a lease) holds the name,
 * the head waits in PostgreSQL's FIFO queue for the key on the locker's waiter session (`queue`), as
 * session locks do, and takes the lease in the same transaction as the grant: lockers that hand the key
 * over among themselves cannot starve it.
 */
export class LeaseManager {
  private readonly lines: WaitLines<LeaseRequest, LeaseHandleImpl>;
  /** Lease-backed permits wait by their semaphore's base key. */
  private readonly permitLines: WaitLines<PermitLeaseRequest, LeaseHandleImpl>;
  private readonly holding = new Set<LeaseHandleImpl>();
  /** Releases under way (giveBack never rejects): close() waits for them. */
  private readonly releasing = new Set<Promise<boolean>>();
  closed = false;

  constructor(
    /** Where lease statements go: the locker's home session (or the pool behind a transaction pooler). */
    private readonly statements: ShortStatements,
    sessions: SessionPool,
    listener: ReleaseListener,
    readonly observer: Observer,
    /**
     * This locker holds (or is taking) a session lock of the key: its lease statements may run on the very
     * backend that holds it, where PostgreSQL sees no conflict (a backend's own locks never conflict).
     */
    private readonly sessionLockHere: (key: bigint) => boolean,
    /** The locker's waiter session (null: none; a waiter then polls). */
    private readonly queue: WaiterQueue | null = null,
  ) {
    this.lines = new WaitLines(
      'lease',
      sessions,
      listener,
      observer,
      (request) => this.attempt(request),
      (request, remainingMs, last, cancel) => this.queued(request, remainingMs, last, cancel),
    );
    this.permitLines = new WaitLines('semaphore', sessions, listener, observer, (request) => this.attemptPermit(request));
  }

  get held(): number {
    return this.holding.size;
  }
  get waiting(): number {
    return this.lines.waiting + this.permitLines.waiting;
  }

  acquire(request: LeaseRequest, nullOnTimeout: boolean): Promise<LeaseHandleImpl | null> {
    if (this.closed) return Promise.reject(closedError());
    return this.lines.enqueue(request.target.key, request, nullOnTimeout);
  }

  /** A lease-backed permit of the semaphore of `request.baseKey`. */
  acquirePermit(request: PermitLeaseRequest, nullOnTimeout: boolean): Promise<LeaseHandleImpl | null> {
    if (this.closed) return Promise.reject(closedError());
    return this.permitLines.enqueue(request.baseKey, request, nullOnTimeout);
  }

  onRelease(key: bigint): void {
    this.lines.wake(key);
    this.permitLines.wake(key);
  }

  onSessionLost(session: Session): void {
    this.lines.sessionLost(session);
    this.permitLines.sessionLost(session);
  }

  async close(): Promise<void> {
    this.closed = true;
    // Waiters fail; a grant still in flight for one of them is handed back (the line's give-back, nothing else)
    // and their wait announcements withdrawn, before the connections go.
    await Promise.all([this.lines.close(closedError()), this.permitLines.close(closedError()), ...[...this.holding].map((h) => h.release())]);
    // Releases the caller started before close(): their statements need the pool the locker ends next.
    await Promise.all(this.releasing);
  }

  // ---- holders ----

  /** @internal */ renew(handle: LeaseHandleImpl): Promise<'renewed' | LockLostReason | 'unavailable'> {
    const sentAt = performance.now();
    return this.statements.run<{ expires_at: Date | null; taken_over: boolean }>(leaseStatements.renew, [handle.key, handle.token, handle.ttlMs])
      .then(
        (rows) => {
          const row = rows[0]!;
          if (row.expires_at) {
            handle.renewed(sentAt, row.expires_at);
            return 'renewed' as const;
          }
          return row.taken_over ? 'lease-stolen' : 'lease-expired';
        },
        () => 'unavailable' as const,
      );
  }

  /** @internal */ release(handle: LeaseHandleImpl): Promise<boolean> {
    if (!this.holding.delete(handle) || !handle.markReleased()) return Promise.resolve(false);
    handle.stopTimers();
    this.observer.released(handle);
    const released = this.giveBack(handle);
    this.releasing.add(released);
    void released.finally(() => this.releasing.delete(released));
    return released;
  }

  private async giveBack(handle: LeaseHandleImpl): Promise<boolean> {
    try {
      const rows = await this.statements.run<{ released: boolean }>(leaseStatements.release, [handle.key, handle.token, handle.minHoldMs]);
      if (!rows[0]!.released) this.lostOnRelease(handle, new Error('the lease was no longer this holder’s'));
      return rows[0]!.released;
    } catch (err) {
      // Unreachable: the lease expires on its own at its TTL, but nobody can say it lasted until now.
      this.lostOnRelease(handle, err);
      return false;
    } finally {
      if (handle.lineKey === handle.key) this.lines.wake(handle.key);
      else this.permitLines.wake(handle.lineKey);
    }
  }

  /** A release found the lease gone (expired, taken over) or could not confirm it: the signal aborts. */
  private lostOnRelease(handle: LeaseHandleImpl, cause: unknown): void {
    const err = new LockLostError(handle.name, handle.key, 'lease-expired', { cause });
    if (handle.markLostOnRelease(err)) this.observer.lost(handle, handle.holdMs, 'lease-expired', err);
  }

  /** @internal */ lose(handle: LeaseHandleImpl, reason: LockLostReason, cause?: unknown): void {
    if (!this.holding.delete(handle)) return;
    const err = new LockLostError(handle.name, handle.key, reason, { cause });
    if (!handle.markLost(err)) return;
    handle.stopTimers();
    this.observer.lost(handle, handle.holdMs, reason, err);
  }

  // ---- waiting ----

  private async attempt(request: LeaseRequest): Promise<Attempt<LeaseHandleImpl>> {
    const { target, owner, ttlMs, data } = request;
    // Busy, as it is: the name is one lock whatever its kind (looked at again at its poll).
    if (this.sessionLockHere(target.key)) return { busy: true };
    const sentAt = performance.now();
    const rows = await this.statement<AcquireRow>(leaseStatements.acquire, [
      target.key,
      target.name,
      owner,
      ttlMs,
      data === undefined ? null : JSON.stringify(data),
      request.minHoldMs,
    ]);
    if (!rows) return { retry: true };
    const row = rows[0]!;
    if (!row.granted) return busyWith(row);
    return { granted: this.grantedTo(request, row, sentAt) };
  }

  /** A grant: the holder's handle, its local deadline counted from `sentAt` (no later than the grant). */
  private grantedTo(request: LeaseRequest, row: AcquireRow, sentAt: number): LeaseHandleImpl {
    const handle = new LeaseHandleImpl(this, request, BigInt(row.token!), row.expires_at, sentAt);
    this.holding.add(handle);
    return handle;
  }

  /** A lock holds the name: wait for it in PostgreSQL's queue, then take the lease (null: not now, poll). */
  private queued(request: LeaseRequest, remainingMs: number, last: Busy | null, cancel: Cancel): Promise<Attempt<LeaseHandleImpl>> | null {
    // Never on a key this locker holds as a session lock: its own backend's locks never conflict.
    if (!last?.lockHeld || !this.queue || this.sessionLockHere(request.target.key)) return null;
    return acquireQueued(this.queue, request, remainingMs, cancel, (row, sentAt) => this.grantedTo(request, row, sentAt));
  }

  private async attemptPermit(request: PermitLeaseRequest): Promise<Attempt<LeaseHandleImpl>> {
    const sentAt = performance.now();
    // Start at a random slot, so concurrent callers do not all fight over slot 0.
    const first = Math.floor(Math.random() * request.slots.length);
    const rows = await this.statement<PermitRow>(leaseStatements.permit, [request.slots, request.target.name ?? `key ${request.target.key}`, request.owner, request.ttlMs, first]);
    if (!rows) return { retry: true };
    const row = rows[0]!;
    // Busy: look again when the soonest permit expires (a release by another process is found by the poll).
    if (!row.granted) return { busy: true, retryInMs: row.remaining_ms === null ? undefined : row.remaining_ms + 1 };
    const handle = new LeaseHandleImpl(this, request, BigInt(row.token!), row.expires_at!, sentAt, { kind: 'semaphore', key: BigInt(row.slot!), lineKey: request.baseKey });
    this.holding.add(handle);
    return { granted: handle };
  }

  /**
   * Runs a lease statement: its rows, or null when the session died under it (look again on its replacement).
   * A failure is typed (schema missing, lock table full, else unavailable).
   */
  private async statement<R extends pg.QueryResultRow>(statement: { name: string; text: string }, values: unknown[]): Promise<R[] | null> {
    try {
      return await this.statements.run<R>(statement, values);
    } catch (err) {
      if (err instanceof SessionLostError && err.connected && !this.closed) return null;
      throw (
        schemaMissingError(err) ??
        (err instanceof PgfenceError ? err : new LockUnavailableError(`a lease statement failed: ${(err as Error)?.message}`, { cause: err }))
      );
    }
  }

}

/**
 * How much earlier than the database's expiry the holder stops trusting its lease. A function, not a
 * static of LeaseHandleImpl: a class that names itself inside its body is renamed _LeaseHandleImpl
 * by the bundler (scripts/build.mjs).
 */
function leaseMarginMs(ttlMs: number): number {
  return Math.min(1000, Math.max(25, ttlMs * 0.05));
}

/**
 * The holder's side of a lease. Its local deadline runs on the monotonic clock from when the last
 * successful grant or renewal was *sent*, minus a margin: the database set the expiry later than that,
 * so the signal aborts before anyone else can be admitted.
 */
class LeaseHandleImpl extends BaseHandle implements LeaseHandle {
  declare readonly token: bigint;
  readonly owner: string;
  readonly data: unknown;
  readonly ttlMs: number;
  readonly minHoldMs: number;
  /** The key its waiters line up at: its own, or a permit's semaphore base key. */
  readonly lineKey: bigint;
  expiresAt: Date;
  private deadlineCancel: (() => void) | null = null;
  /** performance.now() past which the holder no longer trusts its lease. */
  private deadlineAt = Infinity;
  /** Cancels the next renewal's timer (a long timer: a TTL may pass Node's ~24.8-day limit for one). */
  private renewCancel: (() => void) | null = null;
  private renewing: Promise<boolean> | null = null;

  constructor(
    private readonly manager: LeaseManager,
    request: LeaseRequest,
    token: bigint,
    expiresAt: Date,
    sentAt: number,
    /** A lease-backed permit: a semaphore's slot key, its line at the base key. */
    permit?: { kind: 'semaphore'; key: bigint; lineKey: bigint },
  ) {
    super(permit?.kind ?? 'lease', request.target.name, permit?.key ?? request.target.key, 'exclusive', token);
    this.lineKey = permit?.lineKey ?? request.target.key;
    this.owner = request.owner;
    this.data = request.data;
    this.ttlMs = request.ttlMs;
    this.minHoldMs = request.minHoldMs;
    this.expiresAt = expiresAt;
    this.armDeadline(sentAt);
    if (request.renew) this.scheduleRenewal(this.ttlMs / 3);
  }


  /**
   * Checks the deadline as it is read: after a pause (SIGSTOP, a long GC, a blocked event loop) the
   * holder's own code may run before the deadline timer, and must already see the lease lost.
   */
  override get signal(): AbortSignal {
    this.checkDeadline();
    return super.signal;
  }

  override get held(): boolean {
    this.checkDeadline();
    return super.held;
  }

  private checkDeadline(): void {
    if (this.state === 'held' && performance.now() >= this.deadlineAt) this.manager.lose(this, 'lease-expired');
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
    // The state itself, not `held`: the database has just confirmed the lease, a late answer does not lose it.
    if (this.state !== 'held') return;
    this.expiresAt = expiresAt;
    this.armDeadline(sentAt);
  }

  /** @internal */ stopTimers(): void {
    this.deadlineCancel?.();
    this.deadlineCancel = null;
    this.renewCancel?.();
    this.renewCancel = null;
  }

  protected doRelease(): Promise<boolean> {
    return this.manager.release(this);
  }

  private armDeadline(sentAt: number): void {
    this.deadlineCancel?.();
    this.deadlineAt = sentAt + this.ttlMs - leaseMarginMs(this.ttlMs);
    const left = this.deadlineAt - performance.now();
    this.deadlineCancel = setLongTimeout(() => this.manager.lose(this, 'lease-expired'), Math.max(0, left), true);
  }

  private scheduleRenewal(ms: number): void {
    this.renewCancel = setLongTimeout(
      () => {
        this.renewCancel = null;
        if (!this.held) return;
        void this.renew().then((ok) => {
          if (!this.held) return;
          // A failed attempt (database unreachable) is retried soon; the deadline still bounds the hold.
          this.scheduleRenewal(ok ? this.ttlMs / 3 : Math.min(500, this.ttlMs / 10));
        });
      },
      ms,
      true,
    );
  }
}
