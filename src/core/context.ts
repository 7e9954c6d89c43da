import type { LockTarget } from '../keys.js';
import type { Logger } from '../observe/logger.js';
import type { LockHandle } from './handle.js';

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
  /** Throws NestedLockError inside a callback of this locker that holds a lock, unless allowNested. */
  checkNesting(target: LockTarget, allowNested: unknown, kind: 'lock' | 'lease' | 'semaphore'): void;
  /** Throws LockBudgetError when `count` more advisory locks would pass maxHeldLocks. */
  checkBudget(target: LockTarget, count?: number): void;
  /** Throws LockerClosedError once close() was called. */
  checkOpen(): void;
  /** Records a key's name for inspect and status (written in batches). */
  noteName(key: bigint, name: string | null): void;
  /** A pinned-session failure is reported as the pooler refusal it may really be. */
  refusedIfPooled<T>(pending: Promise<T>): Promise<T>;
  /** Runs fn holding `handle` (seen by nesting checks), then releases it. */
  runHolding<H extends LockHandle, T>(handle: H, fn: (handle: H) => Promise<T>): Promise<T>;
}
