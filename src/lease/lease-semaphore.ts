import { openSemaphore, type Semaphore, type SemaphoreAcquireOptions, semaphoreAcquireOptions, semaphoreKeys, type SemaphoreManager, semaphoreOptions, type SemaphoreOptions } from '../advisory/index.js';
import { internalKey, type LockName, type LockTarget } from '../keys.js';
import type { LockerContext } from '../locker-parts.js';
import { callback } from '../options.js';
import type { LockHandle } from '../core/index.js';
import type { LeaseManager, PermitLeaseRequest } from './lease-manager.js';

/** A lease-backed permit's TTL when none is given (a pooled locker's semaphore): the leases' default. */
const POOLED_PERMIT_TTL_MS = 15_000;

/**
 * locker.semaphore(): lease-backed permits when ttlMs is given; else advisory permits, until the
 * locker finds itself behind a transaction pooler (where session locks are refused): from then on,
 * lease-backed permits with the default TTL.
 */
export function openSemaphoreOf(
  ctx: LockerContext,
  managers: { advisory: SemaphoreManager; leases: LeaseManager },
  name: LockName,
  opts: SemaphoreOptions,
): Semaphore {
  const { target, permits, ttlMs } = semaphoreOptions(ctx, name, opts);
  const leased = leaseSemaphore(ctx, managers.leases, target, permits, ttlMs ?? POOLED_PERMIT_TTL_MS);
  if (ttlMs !== undefined) return leased;
  const advisory = openSemaphore(ctx, managers.advisory, name, { permits });
  const pooled = (err: unknown) => (err as { code?: unknown })?.code === 'PGFENCE_POOLED_CONNECTION';
  const acquire = async (o?: SemaphoreAcquireOptions) => {
    if (ctx.refusal) return leased.acquire(o);
    return advisory.acquire(o).catch((err: unknown) => (pooled(err) ? leased.acquire(o) : Promise.reject(err)));
  };
  return {
    name: target.name,
    permits,
    acquire,
    tryAcquire: async (o) => {
      if (ctx.refusal) return leased.tryAcquire(o);
      return advisory.tryAcquire(o).catch((err: unknown) => (pooled(err) ? leased.tryAcquire(o) : Promise.reject(err)));
    },
    withPermit: async (fn, o) => {
      callback(fn, 'fn');
      return ctx.runHolding(await acquire(o), fn);
    },
  };
}

/** The keys of a lease-backed semaphore's permits: none a user name or an advisory permit produces. */
function permitSlots(target: LockTarget, permits: number): bigint[] {
  const id = String(target.key);
  return Array.from({ length: permits }, (_, i) => internalKey('permit', id, String(i)));
}

/** A semaphore of lease-backed permits (sql/permits.sql): works through a transaction pooler. */
function leaseSemaphore(ctx: LockerContext, leases: LeaseManager, target: LockTarget, permits: number, ttlMs: number): Semaphore {
  const spec = { target, baseKey: semaphoreKeys(target, 1).baseKey, slots: permitSlots(target, permits) };
  const request = (o: SemaphoreAcquireOptions | undefined, method: 'acquire' | 'tryAcquire'): PermitLeaseRequest => {
    const { timeoutMs, signal, allowNested } = semaphoreAcquireOptions(ctx, o, method);
    ctx.checkNesting(target, allowNested, 'semaphore', timeoutMs);
    ctx.checkOpen();
    return { ...spec, ttlMs, renew: true, timeoutMs, signal, owner: ctx.leaseOwner, data: undefined, minHoldMs: 0 };
  };
  const acquire = async (o?: SemaphoreAcquireOptions): Promise<LockHandle> => (await leases.acquirePermit(request(o, 'acquire'), false))!;
  return {
    name: target.name,
    permits,
    acquire,
    tryAcquire: async (o) => leases.acquirePermit(request(o, 'tryAcquire'), true),
    withPermit: async (fn, o) => {
      callback(fn, 'fn');
      return ctx.runHolding(await acquire(o), fn);
    },
  };
}
