import { describeType, InvalidArgumentError, LockTimeoutError } from '../core/index.js';
import { resolveLock, type LockName, type LockTarget } from '../keys.js';
import type { LockerContext } from '../locker-parts.js';
import { optionsObject } from '../options.js';
import { ACQUIRE_OPTION_KEYS, acquireRequest, type AcquireOptions } from './acquire-options.js';
import type { AcquireRequest, AdvisoryLockHandle } from './advisory-lock.js';
import { CompositeLockHandle } from './composite-handle.js';
import { BURST } from '../session/index.js';
import type { AdvisoryLockManager } from './lock-manager.js';

/**
 * acquireAll: several session locks, all or nothing, in one canonical order (ascending key) for every
 * caller, so that two of them never wait on each other in a cycle.
 *
 * The keys are first tried all at once: tries never wait (no cycle), and concurrent tries on one
 * session go out together, so a free set of thousands of keys costs a few statements. When a key is
 * busy, the locks taken past it are given back and the call waits for that key holding only keys
 * before it (the canonical order again), then tries the rest at once, and so on.
 *
 * The locks of a large set (more than BURST keys) go to the bulk slot's session (SessionPool.lockSessionFor), apart from where single
 * acquires go once many are held there.
 */
export async function acquireAll(
  ctx: LockerContext,
  locks: AdvisoryLockManager,
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
  for (let i = 0; i < names.length; i++) {
    const n = names[i];
    // The argument is named only for a refusal of an explicit key (a name's says 'name'): no string per name.
    const t = resolveLock(n, ctx.namespace, typeof n === 'string' ? undefined : `names[${i}]`);
    targets.set(t.key, t);
  }
  const first = acquireRequest(ctx, names[0], o, 'acquireAll');
  // The set is admitted as a whole just below: the first name's own admission is not waited for, and its
  // refusal (the same guard's) is reported by that check, so it is dropped here rather than left unhandled.
  first.admission?.catch(() => {});
  first.admission = undefined;
  // One canonical order (ascending key) for every caller: two acquireAll calls can never wait on each other in a cycle.
  const ordered = [...targets.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const admission = ctx.checkBudget(first.target, ordered.length);
  const take = () => {
    // Admitted as a whole, the set keeps its room until it is over: its tries in flight and the keys
    // past its wait are in no line yet, and nobody else may take that room meanwhile.
    const reservation = ctx.reserveBudget(ordered.length);
    return takeAll(locks, first, ordered, (pending) => ctx.refusedIfPooled(pending), reservation);
  };
  return admission ? admission.then(take) : take();
}

/** Takes the ordered targets (see acquireAll), all or none. */
async function takeAll(
  locks: AdvisoryLockManager,
  /** The request of the first name: mode, timeout, signal, ttl. */
  template: AcquireRequest,
  /** Distinct targets in ascending key order. */
  ordered: LockTarget[],
  /** Maps a failure of a pinned session to the pooler refusal when that is its cause. */
  refusedIfPooled: <T>(pending: Promise<T>) => Promise<T>,
  /** The set's room in the budget: told what it holds as it goes, ended when the call is over. */
  reservation: { holding(n: number): void; end(): void },
): Promise<CompositeLockHandle> {
  const deadline = template.timeoutMs === Infinity ? Infinity : performance.now() + template.timeoutMs;
  const held: AdvisoryLockHandle[] = [];
  // A few keys stay where single acquires go (one connection under ordinary load); many go to the bulk slot.
  const bulk: AcquireRequest = { ...template, bulk: ordered.length > BURST };
  const acquire = (target: LockTarget, timeoutMs: number) =>
    refusedIfPooled(locks.acquire({ ...bulk, target, timeoutMs }, true)) as Promise<AdvisoryLockHandle | null>;
  try {
    let next = 0;
    while (next < ordered.length) {
      const tries = await refusedIfPooled(locks.tryMany(bulk, ordered.slice(next)));
      let granted = 0;
      while (granted < tries.length && tries[granted] !== null) held.push(tries[granted++]!);
      // The keys held are counted as held now, and the one it waits for as waiting.
      reservation.holding(held.length + 1);
      // Past the first key not granted, give back what was: a wait holds only keys before its own.
      await Promise.all(tries.slice(granted + 1).map((h) => h?.release()));
      template.signal?.throwIfAborted();
      next += granted;
      if (next === ordered.length) break;
      const target = ordered[next]!;
      const timeoutMs = deadline === Infinity ? Infinity : Math.max(0, deadline - performance.now());
      const handle = await acquire(target, timeoutMs);
      if (!handle) throw new LockTimeoutError(target.name, target.key, template.timeoutMs, 'lock', 'acquireAll');
      held.push(handle);
      reservation.holding(held.length);
      next++;
    }
  } catch (err) {
    await Promise.all(held.map((h) => h.release()));
    throw err;
  } finally {
    reservation.end();
  }
  return new CompositeLockHandle(held, () => locks.releaseMany(held));
}
