import type { LockerContext } from '../locker-parts.js';
import { BaseHandle, type LockHandle } from '../core/index.js';
import { InvalidArgumentError, LockLostError, LockTimeoutError } from '../core/index.js';
import { resolveLock, type LockName, type LockTarget } from '../keys.js';
import { optionsObject } from '../options.js';
import { describeType } from '../core/index.js';
import { ACQUIRE_OPTION_KEYS, acquireRequest, type AcquireOptions } from './acquire-options.js';
import type { AcquireRequest } from './advisory-lock.js';

/**
 * acquireAll: every name's lock, taken one at a time in ascending key order within one timeout, or
 * none (what was taken is given back).
 */
export async function acquireAll(
  ctx: LockerContext,
  tryAcquire: (request: AcquireRequest) => Promise<LockHandle | null>,
  names: LockName[],
  opts: AcquireOptions | undefined,
): Promise<CompositeLockHandle> {
  if (!Array.isArray(names) || names.length === 0) {
    throw new InvalidArgumentError('names', `expected a non-empty array of lock names, got ${describeType(names)}`);
  }
  const o = optionsObject<AcquireOptions>(opts, 'acquireAll options', ACQUIRE_OPTION_KEYS);
  if (o.fencing) throw new InvalidArgumentError('fencing', 'acquireAll does not issue fencing tokens; fence each resource with its own lock');
  // Every name is checked before acquireRequest() notes the first one for the name registry (a write).
  const targets = new Map<bigint, LockTarget>();
  for (const [i, n] of names.entries()) {
    const t = resolveLock(n, ctx.namespace, `names[${i}]`);
    targets.set(t.key, t);
  }
  const first = acquireRequest(ctx, names[0], o, 'acquireAll');
  // One canonical order (ascending key) for every caller: two acquireAll calls can never wait on each other in a cycle.
  const ordered = [...targets.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  ctx.checkBudget(first.target, ordered.length);
  const deadline = first.timeoutMs === Infinity ? Infinity : performance.now() + first.timeoutMs;
  const held: LockHandle[] = [];
  try {
    for (const target of ordered) {
      const timeoutMs = deadline === Infinity ? Infinity : Math.max(0, deadline - performance.now());
      const handle = await tryAcquire({ ...first, target, timeoutMs });
      if (!handle) throw new LockTimeoutError(target.name, target.key, first.timeoutMs);
      held.push(handle);
    }
  } catch (err) {
    await Promise.all(held.map((h) => h.release()));
    throw err;
  }
  return new CompositeLockHandle(held);
}

/** Several locks taken together (acquireAll): held while all are held, lost when any is lost. */
export class CompositeLockHandle extends BaseHandle {
  constructor(readonly handles: readonly LockHandle[]) {
    // Identified by its first key in canonical order; the members carry their own names and keys.
    super('lock', null, handles[0]!.key, handles[0]!.mode, null);
    for (const h of handles) {
      h.signal.addEventListener(
        'abort',
        () => {
          const reason = h.signal.reason;
          this.markLost(reason instanceof LockLostError ? reason : new LockLostError(h.name, h.key, 'session-lost', { cause: reason }));
          // The rest are useless without the lost one: give them back.
          void this.releaseMembers();
        },
        { once: true },
      );
    }
  }

  get keys(): bigint[] {
    return this.handles.map((h) => h.key);
  }

  protected async doRelease(): Promise<boolean> {
    this.markReleased();
    const results = await this.releaseMembers();
    return results.every(Boolean);
  }

  private releaseMembers(): Promise<boolean[]> {
    return Promise.all(this.handles.map((h) => h.release()));
  }
}
