import type { LockLostError } from './errors.js';
import type { LockKind, LockMode } from './vocabulary.js';

/** A held lock. Release it (or let `await using` do so); watch `signal` to learn of its loss. */
export interface LockHandle {
  readonly name: string | null;
  readonly key: bigint;
  readonly mode: LockMode;
  /** The fencing token when fencing was asked for (always for leases), else null. */
  readonly token: bigint | null;
  /** Aborts, with a LockLostError reason, the moment the lock is lost. */
  readonly signal: AbortSignal;
  readonly acquiredAt: Date;
  /**
   * Idempotent: true if this call released a lock that was still held. Never throws on a dead session.
   *
   * @example
   * ```ts fragment
   * const lock = await locker.acquire('order:123');
   * try {
   *   // ...
   * } finally {
   *   const heldToTheEnd = await lock.release(); // false: the lock was lost before (see lock.signal)
   * }
   * ```
   */
  release(): Promise<boolean>;
  /**
   * Releases, for `await using` (Node 24, or TypeScript 5.2+ compiling it down).
   *
   * @example
   * ```ts fragment
   * {
   *   await using lock = await locker.acquire('order:123');
   *   // ...
   * } // released here
   * ```
   */
  [Symbol.asyncDispose](): Promise<void>;
}

/** A lock handle taken with `fencing: true`: its fencing token is always there. */
export interface FencedLockHandle extends LockHandle {
  readonly token: bigint;
}

/**
 * The shared life cycle of every handle kind: held until released or lost, and the loss reaches
 * `signal` exactly once. Subclasses say how to give the lock back.
 */
export abstract class BaseHandle implements LockHandle {
  /** performance.now() at grant, for hold durations. */
  readonly grantedAt = performance.now();
  private readonly grantedEpochMs = Date.now();
  // Created on first use: most handles are released without anyone reading their signal.
  private controller: AbortController | null = null;
  state: 'held' | 'released' | 'lost' = 'held';
  private releasing: Promise<boolean> | null = null;
  /** Told of the loss along with `signal` (a composite handle listens so, without a signal per member). */
  onLoss: ((err: LockLostError) => void) | null = null;

  constructor(
    readonly kind: LockKind,
    readonly name: string | null,
    readonly key: bigint,
    readonly mode: LockMode,
    readonly token: bigint | null,
  ) {}

  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  get acquiredAt(): Date {
    return new Date(this.grantedEpochMs);
  }

  get held(): boolean {
    return this.state === 'held';
  }

  release(): Promise<boolean> {
    if (this.releasing) return this.releasing.then(() => false);
    if (this.state !== 'held') return Promise.resolve(false);
    this.releasing = this.doRelease();
    return this.releasing;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** Gives the lock back; resolves true if it was still held. Called once; never rejects. */
  protected abstract doRelease(): Promise<boolean>;

  /** Marks the handle lost and aborts its signal; false if it was no longer held. */
  markLost(err: LockLostError): boolean {
    if (this.state !== 'held') return false;
    this.state = 'lost';
    this.abort(err);
    return true;
  }

  /**
   * The lock turned out to be gone while it was being released (the unlock found nothing held, or its
   * session died before confirming): the release reports false, and the signal aborts all the same.
   */
  markLostOnRelease(err: LockLostError): boolean {
    if (this.state !== 'released') return false;
    this.state = 'lost';
    this.abort(err);
    return true;
  }

  private abort(err: LockLostError): void {
    (this.controller ??= new AbortController()).abort(err);
    this.onLoss?.(err);
  }

  /** Marks the handle released (the lock manager calls this as it lets go). */
  markReleased(): boolean {
    if (this.state !== 'held') return false;
    this.state = 'released';
    return true;
  }

  get holdMs(): number {
    return performance.now() - this.grantedAt;
  }
}
