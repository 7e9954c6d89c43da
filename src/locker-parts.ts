import type { LockTarget } from './keys.js';
import type { Logger } from './observe/index.js';
import type { LockHandle } from './core/index.js';
import type { Session } from './session/index.js';

/**
 * What a locker lends each of its parts while they turn a call's options into a request: its
 * settings, and the checks every request passes before any I/O, in the order each part runs them.
 */
export interface LockerContext {
  readonly namespace: string | undefined;
  readonly defaultTimeoutMs: number;
  /** How long a statement or a connect may take before its session counts as lost. */
  readonly deadlineMs: number;
  /** The default owner of this locker's leases (host:pid:random). */
  readonly leaseOwner: string;
  readonly logger: Logger;
  /** Why pinned sessions are refused (a transaction pooler), once known; null while they are not. */
  readonly refusal: Error | null;
  /** Throws NestedLockError for a request that would wait inside a callback where the nesting rules forbid it, unless allowNested. */
  checkNesting(target: LockTarget, allowNested: unknown, kind: 'lock' | 'lease' | 'semaphore', timeoutMs: number): void;
  /**
   * Throws LockBudgetError when `count` more advisory locks would pass maxHeldLocks; past the
   * server-wide guard by its last sample, a promise that checks a fresh one (LockTableFullError).
   */
  checkBudget(target: LockTarget, count?: number): Promise<void> | null;
  /**
   * Counts a set admitted as a whole (acquireAll) against the budget for as long as it is in flight;
   * `holding(n)` as it takes them (the n it holds are counted as held), `end()` once it is over.
   */
  reserveBudget(total: number): { holding(n: number): void; end(): void };
  /** Throws LockerClosedError once close() was called. */
  checkOpen(): void;
  /** Records a key's name for inspect and status (written in batches). */
  noteName(key: bigint, name: string | null): void;
  /** A pinned-session failure is reported as the pooler refusal it may really be. */
  refusedIfPooled<T>(pending: Promise<T>): Promise<T>;
  /**
   * Runs fn holding `handle` (seen by nesting checks), then releases it; rejects with LockLostError (fn's
   * value as its `value`) when the lock was lost before fn settled, or the release found it gone.
   */
  runHolding<H extends LockHandle, T>(handle: H, fn: (handle: H) => Promise<T>): Promise<T>;
}

/**
 * One kind of lock a locker offers (session locks, leases, semaphores), as the locker sees it. The
 * locker keeps a list of parts and tells each the same facts in turn, rather than wiring each by hand.
 */
interface LockerPart {
  /** Locks of this part held now. */
  readonly held: number;
  /** Requests of this part waiting now. */
  readonly waiting: number;
  /** A release of `key` was announced: its waiters may try again. */
  onRelease?(key: bigint): void;
  /** A pinned session died: what was held or waited for on it is gone. */
  onSessionLost?(session: Session, err: Error): void;
  /** This locker's server-side locks, by `${pid}:${key}`, with their grant (for inspect). */
  ownLocks?(into: Map<string, Date>): void;
  /** Fails the waiters and gives back what is held. */
  close(): Promise<void>;
}

/** A locker's parts, told every fact in the order they were added. */
export class LockerParts {
  private readonly parts: LockerPart[] = [];

  add<P extends LockerPart>(part: P): P {
    this.parts.push(part);
    return part;
  }

  onRelease(key: bigint): void {
    for (const part of this.parts) part.onRelease?.(key);
  }

  onSessionLost(session: Session, err: Error): void {
    for (const part of this.parts) part.onSessionLost?.(session, err);
  }

  ownLocks(into: Map<string, Date>): void {
    for (const part of this.parts) part.ownLocks?.(into);
  }

  get held(): number {
    let n = 0;
    for (const part of this.parts) n += part.held;
    return n;
  }

  get waiting(): number {
    let n = 0;
    for (const part of this.parts) n += part.waiting;
    return n;
  }

  /** Closes every part at once. */
  async close(): Promise<void> {
    await Promise.all(this.parts.map((part) => part.close()));
  }
}
