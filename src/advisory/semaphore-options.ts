import type { LockerContext } from '../locker-parts.js';
import { type LockName, type LockTarget, resolveLock } from '../keys.js';
import { abortSignal, callback, durationMs, optionsObject, positiveInteger, singleAttempt } from '../options.js';
import {
  SEMAPHORE_ACQUIRE_OPTION_KEYS,
  SEMAPHORE_OPTION_KEYS,
  semaphoreKeys,
  type PermitRequest,
  type Semaphore,
  type SemaphoreAcquireOptions,
  type SemaphoreManager,
  type SemaphoreOptions,
} from './semaphore.js';

/** A semaphore's keys: its base key and one slot per permit. */
interface SemaphoreSpec {
  target: LockTarget;
  baseKey: bigint;
  slots: readonly bigint[];
}

/**
 * The Semaphore that locker.semaphore() returns: its options checked (and its keys named for inspect)
 * at once, each acquire's options as it is called.
 */
export function openSemaphore(ctx: LockerContext, manager: SemaphoreManager, name: LockName, opts: SemaphoreOptions): Semaphore {
  const { target, permits } = semaphoreOptions(ctx, name, opts);
  const { baseKey, slots } = semaphoreKeys(target, permits);
  if (target.name !== null) {
    ctx.noteName(baseKey, `${target.name} (semaphore)`);
    slots.slice(0, 1000).forEach((slot, i) => ctx.noteName(slot, `${target.name} (permit ${i + 1} of ${permits})`));
  }
  const spec: SemaphoreSpec = { target, baseKey, slots };
  const acquire = async (acquireOpts?: SemaphoreAcquireOptions) =>
    (await ctx.refusedIfPooled(manager.acquire(permitRequest(ctx, spec, acquireOpts, 'acquire'), false)))!;
  return {
    name: target.name,
    permits,
    acquire,
    tryAcquire: async (acquireOpts) => ctx.refusedIfPooled(manager.acquire(permitRequest(ctx, spec, acquireOpts, 'tryAcquire'), true)),
    withPermit: async (fn, acquireOpts) => {
      callback(fn, 'fn');
      return ctx.runHolding(await acquire(acquireOpts), fn);
    },
  };
}

/** A semaphore's options and target, checked before any I/O (ttlMs: undefined when not given). */
export function semaphoreOptions(ctx: LockerContext, name: LockName, opts: SemaphoreOptions): { target: LockTarget; permits: number; ttlMs: number | undefined } {
  const o = optionsObject<SemaphoreOptions>(opts, 'semaphore options', SEMAPHORE_OPTION_KEYS);
  const target = resolveLock(name, ctx.namespace);
  const permits = positiveInteger(o.permits, 'permits', 10_000);
  const ttlMs = o.ttlMs === undefined ? undefined : durationMs(o.ttlMs, 'ttlMs', { min: 100, integer: true });
  return { target, permits, ttlMs };
}

/** One semaphore acquire's options, checked before any I/O. */
export function semaphoreAcquireOptions(
  ctx: LockerContext,
  opts: SemaphoreAcquireOptions | undefined,
  method: 'acquire' | 'tryAcquire',
): { timeoutMs: number; signal: AbortSignal | undefined; allowNested: unknown } {
  let a = optionsObject<SemaphoreAcquireOptions>(opts, `${method} options`, SEMAPHORE_ACQUIRE_OPTION_KEYS);
  if (method === 'tryAcquire') a = singleAttempt(a, 'tryAcquire', 'acquire');
  const timeoutMs = a.timeoutMs === undefined ? ctx.defaultTimeoutMs : durationMs(a.timeoutMs, 'timeoutMs', { allowInfinity: true });
  return { timeoutMs, signal: abortSignal(a.signal), allowNested: a.allowNested };
}

/** One acquire's request, checked before any I/O: its options, nesting, the pooler refusal, the lock budget. */
function permitRequest(
  ctx: LockerContext,
  spec: SemaphoreSpec,
  opts: SemaphoreAcquireOptions | undefined,
  method: 'acquire' | 'tryAcquire',
): PermitRequest {
  const { timeoutMs, signal, allowNested } = semaphoreAcquireOptions(ctx, opts, method);
  const request: PermitRequest = { ...spec, timeoutMs, signal };
  ctx.checkNesting(spec.target, allowNested, 'semaphore', timeoutMs);
  if (ctx.refusal) throw ctx.refusal;
  request.admission = ctx.checkBudget(spec.target) ?? undefined;
  return request;
}
