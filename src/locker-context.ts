import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { type LockBudget, nestingConflict, runHolding } from './advisory/index.js';
import type { LockerContext } from './locker-parts.js';
import { LockerClosedError, type LockHandle, type LockKind, LockLostError, NestedLockError } from './core/index.js';
import type { LockTarget } from './keys.js';
import type { ResolvedLockerOptions } from './locker-options.js';
import type { Logger, NameRegistry } from './observe/index.js';
import { booleanOption } from './options.js';
import type { ConnectionSource } from './session/index.js';

/** A locker's side of LockerContext: its settings, and the checks it runs for every part. */
export class PgLockerContext implements LockerContext {
  readonly namespace: string | undefined;
  readonly defaultTimeoutMs: number;
  readonly deadlineMs: number;
  readonly logger: Logger;
  readonly leaseOwner = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;

  constructor(
    /** The locker: callbacks holding its locks are found by it. */
    private readonly owner: object,
    opts: ResolvedLockerOptions,
    private readonly source: ConnectionSource,
    private readonly budget: LockBudget,
    private readonly names: NameRegistry,
    private readonly closing: () => boolean,
  ) {
    this.namespace = opts.namespace;
    this.defaultTimeoutMs = opts.defaultTimeoutMs;
    this.deadlineMs = opts.deadlineMs;
    this.logger = opts.logger;
  }

  get refusal(): Error | null {
    return this.source.refusal;
  }

  checkNesting(target: LockTarget, allowNested: unknown, kind: 'lock' | 'lease' | 'semaphore', timeoutMs: number): void {
    if (booleanOption(allowNested, 'allowNested', false)) return;
    const outer = nestingConflict(this.owner, kind, timeoutMs !== 0);
    if (outer) {
      const heldKind = (outer.handle as { kind?: LockKind }).kind;
      throw new NestedLockError(target.name, target.key, outer.handle.name, outer.handle.key, { kind, heldKind, context: outer.context });
    }
  }

  checkBudget(target: LockTarget, count?: number): Promise<void> | null {
    return this.budget.check(target, count);
  }

  reserveBudget(total: number): { holding(n: number): void; end(): void } {
    return this.budget.reserve(total);
  }

  checkOpen(): void {
    if (this.closing()) throw new LockerClosedError();
  }

  noteName(key: bigint, name: string | null): void {
    this.names.note(key, name, this.namespace ?? null);
  }

  /**
   * Until the first pinned session has shown it is not behind a transaction pooler, a failure is
   * checked for that cause (the session only reports it as a lost connection). Free afterwards.
   */
  refusedIfPooled<T>(pending: Promise<T>): Promise<T> {
    if (this.source.pinningVerified) return pending;
    return pending.catch((err: unknown) => {
      throw this.source.refusal ?? err;
    });
  }

  runHolding<H extends LockHandle, T>(handle: H, fn: (handle: H) => Promise<T>): Promise<T> {
    return runHolding(this.owner, handle, async () => {
      let value: T;
      try {
        value = await fn(handle);
      } catch (err) {
        await handle.release();
        throw err;
      }
      // Read as the callback settles (a lease checks its deadline there and then); the release may still find
      // the lock already gone, and its signal aborts then too. Either way the callback did not hold it to its end.
      const lost = handle.signal.aborted;
      await handle.release();
      if (lost || handle.signal.aborted) {
        const reason = handle.signal.reason as LockLostError;
        throw new LockLostError(reason.lockName, reason.key, reason.reason, { cause: reason, value });
      }
      return value;
    });
  }
}
