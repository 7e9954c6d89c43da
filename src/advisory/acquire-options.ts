import type { LockerContext } from '../locker-parts.js';
import { InvalidArgumentError, type LockMode } from '../core/index.js';
import { resolveLock, type LockName } from '../keys.js';
import { abortSignal, booleanOption, durationMs, oneOf, optionKeys, optionsObject, singleAttempt } from '../options.js';
import type { AcquireRequest } from './advisory-lock.js';

export interface AcquireOptions {
  mode?: LockMode;
  /** Bound on the whole wait: 0 = a single try, Infinity = no bound. Default: the locker's defaultTimeoutMs. */
  timeoutMs?: number;
  signal?: AbortSignal;
  fencing?: boolean;
  /** Maximum hold: past it the lock is released and the handle's signal aborts. */
  ttlMs?: number;
  /** Allow acquiring inside a callback that already holds a lock of this locker. */
  allowNested?: boolean;
}
export const ACQUIRE_OPTION_KEYS = optionKeys<AcquireOptions>({
  mode: true,
  timeoutMs: true,
  signal: true,
  fencing: true,
  ttlMs: true,
  allowNested: true,
});

/** AcquireOptions asking for a fencing token: the handle's `token` is then a bigint, never null. */
export type FencedAcquireOptions = AcquireOptions & { fencing: true };

const NO_OPTIONS: Partial<AcquireOptions> = Object.freeze({});
const MODES = ['exclusive', 'shared'] as const;
const WAIT_BOUND = { allowInfinity: true } as const;

/**
 * A session lock request from a call's options, checked before any I/O: the options, nesting, the
 * pooler refusal, the lock budget; then its name is noted for inspect.
 */
export function acquireRequest(ctx: LockerContext, name: LockName | undefined, opts: AcquireOptions | undefined, method: string): AcquireRequest {
  // The hot path (no options) allocates nothing beyond the request itself.
  const o: Partial<AcquireOptions> = opts === undefined ? NO_OPTIONS : optionsObject<AcquireOptions>(opts, `${method} options`, ACQUIRE_OPTION_KEYS);
  const target = resolveLock(name, ctx.namespace);
  const mode = o.mode === undefined ? 'exclusive' : oneOf(o.mode, 'mode', MODES, 'exclusive');
  const fencing = booleanOption(o.fencing, 'fencing', false);
  if (fencing && mode === 'shared') {
    throw new InvalidArgumentError('fencing', "fencing tokens are issued to exclusive holders only; use mode 'exclusive'");
  }
  const request: AcquireRequest = {
    target,
    mode,
    timeoutMs: o.timeoutMs === undefined ? ctx.defaultTimeoutMs : durationMs(o.timeoutMs, 'timeoutMs', WAIT_BOUND),
    signal: abortSignal(o.signal),
    ttlMs: o.ttlMs === undefined ? undefined : durationMs(o.ttlMs, 'ttlMs', { min: 1 }),
    fencing,
  };
  ctx.checkNesting(target, o.allowNested, 'lock', request.timeoutMs);
  if (ctx.refusal) throw ctx.refusal;
  request.admission = ctx.checkBudget(target) ?? undefined;
  ctx.noteName(target.key, target.name);
  return request;
}

/**
 * The session lock that guards a leader's term: named, and reported as kind 'leader' (status and
 * metrics show the term, not an anonymous key); bounded by deadlineMs.
 */
export function leaderGuardRequest(ctx: LockerContext, key: bigint, name: string, signal: AbortSignal): AcquireRequest {
  ctx.noteName(key, name);
  if (ctx.refusal) throw ctx.refusal;
  return {
    target: { key, name },
    mode: 'exclusive',
    timeoutMs: ctx.deadlineMs,
    signal, // the campaign's: resign() and close() do not wait for it
    ttlMs: undefined,
    fencing: false,
    kind: 'leader',
  };
}

/** tryAcquire's request: acquire's, with a single attempt. */
export function tryAcquireRequest(ctx: LockerContext, name: LockName | undefined, opts: Omit<AcquireOptions, 'timeoutMs'> | undefined): AcquireRequest {
  const o = optionsObject<AcquireOptions>(opts, 'tryAcquire options', ACQUIRE_OPTION_KEYS);
  return acquireRequest(ctx, name, singleAttempt(o, 'tryAcquire', 'acquire'), 'tryAcquire');
}
