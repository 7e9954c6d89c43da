import { BaseHandle, type LockHandle, LockLostError, LockUnavailableError, PgfenceError } from '../core/index.js';
import { internalKey, type LockTarget } from '../keys.js';
import { optionKeys } from '../options.js';
import type { Observer } from '../observe/index.js';
import { type ReleaseListener, type Session, SessionLostError, type SessionPool } from '../session/index.js';
import { releaseSlotSql, tryAnySlotSql } from './semaphore-sql.js';
import { afterAdmission } from './lock-budget.js';
import { type Attempt, type AttemptPhase, closedError, type LineRequest, WaitLines } from '../wait/index.js';

export interface SemaphoreOptions {
  /** How many holders at most, across every process. Use the same number everywhere for a name. */
  permits: number;
  /**
   * Lease-backed permits: each a lease with this TTL on the database clock (at least 100), renewed
   * every ttlMs / 3, with its own fencing token, freed at its TTL when its holder dies. The default on
   * a locker behind a transaction pooler (15000 there); without it, direct lockers use advisory permits.
   * Mixed fleets: give every instance the same choice (the two kinds of permits do not see each other).
   */
  ttlMs?: number;
}
export const SEMAPHORE_OPTION_KEYS = optionKeys<SemaphoreOptions>({ permits: true, ttlMs: true });

export interface SemaphoreAcquireOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
  allowNested?: boolean;
}
export const SEMAPHORE_ACQUIRE_OPTION_KEYS = optionKeys<SemaphoreAcquireOptions>({ timeoutMs: true, signal: true, allowNested: true });

/** A counting lock: at most `permits` holders at once across all processes. */
export interface Semaphore {
  readonly name: string | null;
  readonly permits: number;
  /**
   * Waits up to `timeoutMs` for a permit (LockTimeoutError after it).
   *
   * @example
   * ```ts fragment
   * const vendor = locker.semaphore('vendor-api', { permits: 5 });
   * const permit = await vendor.acquire({ timeoutMs: 30_000 });
   * try { await callVendor(); } finally { await permit.release(); }
   * ```
   */
  acquire(opts?: SemaphoreAcquireOptions): Promise<LockHandle>;
  /**
   * One attempt at a permit: null when every permit is taken.
   *
   * @example
   * ```ts fragment
   * const permit = await locker.semaphore('vendor-api', { permits: 5 }).tryAcquire();
   * if (!permit) console.log('every permit is taken: try later');
   * else await permit.release();
   * ```
   */
  tryAcquire(opts?: Omit<SemaphoreAcquireOptions, 'timeoutMs'>): Promise<LockHandle | null>;
  /**
   * Runs `fn` holding a permit, and releases it when `fn` settles. Nothing may wait for a lock, a lease or another permit inside `fn` (a permit is a leaf: see the nesting rules).
   * When the permit was lost before `fn` settled (or its release finds it gone), rejects with LockLostError, `fn`'s value as its `value`, even if `fn` resolved.
   *
   * @example
   * ```ts fragment
   * const vendor = locker.semaphore('vendor-api', { permits: 5 });
   * const answer = await vendor.withPermit(() => callVendor(), { timeoutMs: 30_000 });
   * ```
   */
  withPermit<T>(fn: (permit: LockHandle) => Promise<T>, opts?: SemaphoreAcquireOptions): Promise<T>;
}

export interface PermitRequest extends LineRequest {
  /** The semaphore as named by the caller. */
  target: LockTarget;
  /** Where its waiters are announced and its sessions chosen. */
  baseKey: bigint;
  slots: readonly bigint[];
  /** The server-wide lock-table guard asks the server again before admitting it (see LockBudget.check). */
  admission?: Promise<void>;
}

/** The keys of a semaphore: a base key and one slot key per permit, none of which a user name can produce. */
export function semaphoreKeys(target: LockTarget, permits: number): { baseKey: bigint; slots: bigint[] } {
  const id = String(target.key);
  return {
    baseKey: internalKey('semaphore', id),
    slots: Array.from({ length: permits }, (_, i) => internalKey('semaphore', id, String(i))),
  };
}

/**
 * Semaphores of one locker. A permit is a session advisory lock on one of the semaphore's slot keys,
 * so a session that dies frees its permits. All of a semaphore's slots live on the session of its
 * base key, where one statement takes the first free slot.
 */
export class SemaphoreManager {
  private readonly lines: WaitLines<PermitRequest, PermitHandle>;
  private readonly holding = new Set<PermitHandle>();
  closed = false;

  constructor(
    private readonly sessions: SessionPool,
    listener: ReleaseListener,
    private readonly observer: Observer,
  ) {
    this.lines = new WaitLines('semaphore', sessions, listener, observer, (request, phase) => this.attempt(request, phase));
  }

  get held(): number {
    return this.holding.size;
  }
  get waiting(): number {
    return this.lines.waiting;
  }

  /** This locker's permits, by backend pid and slot key, with their grant. */
  ownLocks(into: Map<string, Date>): void {
    for (const h of this.holding) {
      const pid = h.session.processId;
      if (pid != null) into.set(`${pid}:${h.key}`, h.acquiredAt);
    }
  }

  acquire(request: PermitRequest, nullOnTimeout: boolean): Promise<PermitHandle | null> {
    if (this.closed) return Promise.reject(closedError());
    return afterAdmission(request, () => this.lines.enqueue(request.baseKey, request, nullOnTimeout));
  }

  onRelease(key: bigint): void {
    this.lines.wake(key);
  }

  onSessionLost(session: Session, err: Error): void {
    this.lines.sessionLost(session);
    for (const h of [...this.holding]) if (h.session === session) this.lose(h, err);
  }

  async close(): Promise<void> {
    this.closed = true;
    // Waiters fail; a grant still in flight for one of them is handed back (the line's give-back, nothing else)
    // and their wait announcements withdrawn, before the connections go.
    await Promise.all([this.lines.close(closedError()), ...[...this.holding].map((h) => h.release())]);
  }

  /** @internal */ async release(handle: PermitHandle): Promise<boolean> {
    if (!this.holding.delete(handle) || !handle.markReleased()) return false;
    this.observer.released(handle);
    try {
      const rows = await handle.session.statement<{ released: boolean }>(releaseSlotSql, [handle.key, handle.baseKey]);
      if (!rows[0]!.released) this.lostOnRelease(handle, new Error('the session no longer held the permit'));
      return rows[0]!.released;
    } catch (err) {
      // The session is gone, and the permit with it: nobody can say it lasted until now.
      this.lostOnRelease(handle, err);
      return false;
    } finally {
      this.sessions.noteHolds(handle.session.id, -1);
      this.lines.wake(handle.baseKey);
    }
  }

  /** A release found the permit gone, or could not confirm it: the signal aborts. */
  private lostOnRelease(handle: PermitHandle, cause: unknown): void {
    const err = new LockLostError(handle.name, handle.key, 'session-lost', { cause });
    if (handle.markLostOnRelease(err)) this.observer.lost(handle, handle.holdMs, 'session-lost', err);
  }

  private lose(handle: PermitHandle, cause: Error): void {
    if (!this.holding.delete(handle)) return;
    this.sessions.noteHolds(handle.session.id, -1);
    const err = new LockLostError(handle.name, handle.key, 'session-lost', { cause });
    if (!handle.markLost(err)) return;
    this.observer.lost(handle, handle.holdMs, 'session-lost', err);
  }

  private async attempt(request: PermitRequest, phase: AttemptPhase): Promise<Attempt<PermitHandle>> {
    // A fresh request stands back for waiters elsewhere; a waiting head takes its turn.
    const polite = !phase.waiting;
    const session = this.sessions.sessionFor(request.baseKey);
    // Slots this process already holds would be granted again (advisory locks are re-entrant per session).
    const mine = new Set([...this.holding].filter((h) => h.baseKey === request.baseKey && h.session === session).map((h) => h.key));
    const free = request.slots.filter((k) => !mine.has(k));
    if (free.length === 0) return { busy: true };
    // Start at a random slot, so concurrent callers do not all fight over slot 0.
    const start = Math.floor(Math.random() * free.length);
    const order = [...free.slice(start), ...free.slice(0, start)];
    let rows: { slot: string }[];
    try {
      rows = await session.statement<{ slot: string }>(tryAnySlotSql, [order, request.baseKey, polite]);
    } catch (err) {
      // The session died under the attempt: look again on its replacement.
      if (err instanceof SessionLostError && err.connected && !this.closed) return { busy: true, retryInMs: 0 };
      throw err instanceof PgfenceError ? err : new LockUnavailableError(`a semaphore statement failed: ${(err as Error).message}`, { cause: err });
    }
    if (rows.length === 0) return { busy: true };
    const handle = new PermitHandle(this, request, BigInt(rows[0]!.slot), session);
    this.holding.add(handle);
    this.sessions.noteHolds(session.id, 1);
    return { granted: handle };
  }

}

/** One permit: the slot key it holds, on the session that holds it. */
class PermitHandle extends BaseHandle {
  readonly baseKey: bigint;

  constructor(
    private readonly manager: SemaphoreManager,
    request: PermitRequest,
    slot: bigint,
    readonly session: Session,
  ) {
    super('semaphore', request.target.name, slot, 'exclusive', null);
    this.baseKey = request.baseKey;
  }


  protected doRelease(): Promise<boolean> {
    return this.manager.release(this);
  }
}
