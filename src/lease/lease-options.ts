import type { LockerContext } from '../locker-parts.js';
import { describeType, InvalidArgumentError } from '../core/index.js';
import { resolveLock, type LockName } from '../keys.js';
import { abortSignal, booleanOption, durationMs, optionKeys, optionsObject, singleAttempt } from '../options.js';
import type { LeaseRequest } from './lease-manager.js';

export interface LeaseOptions<D = unknown> {
  /** Lease duration on the database clock; default 15000, at least 100. */
  ttlMs?: number;
  /** Renew automatically every ttlMs / 3; default true. */
  renew?: boolean;
  /** Bound on the wait; default: the locker's defaultTimeoutMs. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Who holds it (shown by inspect and status); default host:pid:random. */
  owner?: string;
  /** JSON kept with the lease (the handle's `data`). */
  data?: D;
  /**
   * At-least-for (ShedLock's lockAtLeastFor): the lease holds its name until at least acquiredAt +
   * minHoldMs on the database clock, however it ends (released early, or its holder paused or dead),
   * so a job that finished quickly is not run again by a node whose schedule fired later. The
   * handle's release still resolves true and stops renewal. Default 0.
   */
  minHoldMs?: number;
  allowNested?: boolean;
}
const LEASE_OPTION_KEYS = optionKeys<LeaseOptions>({
  ttlMs: true,
  renew: true,
  timeoutMs: true,
  signal: true,
  owner: true,
  data: true,
  minHoldMs: true,
  allowNested: true,
});
/** A candidate campaigns until it resigns; timeoutMs is listed only to be refused with a reason. */
export const LEADER_OPTION_KEYS = LEASE_OPTION_KEYS.filter((k) => k !== 'allowNested' && k !== 'minHoldMs');

/** A lease request from a call's options, checked before any I/O (nesting too); its name is noted for inspect. */
export function leaseRequest(ctx: LockerContext, name: LockName | undefined, opts: LeaseOptions | undefined, method: string): LeaseRequest {
  const o = optionsObject<LeaseOptions>(opts, `${method} options`, LEASE_OPTION_KEYS);
  const target = resolveLock(name, ctx.namespace);
  const owner = o.owner === undefined ? ctx.leaseOwner : o.owner;
  if (typeof owner !== 'string' || owner.length === 0 || owner.length > 200) {
    throw new InvalidArgumentError('owner', `expected a non-empty string of at most 200 characters, got ${describeType(owner)}`);
  }
  // PostgreSQL text refuses both: caught here, not reported later as an outage.
  if (owner.includes('\0')) throw new InvalidArgumentError('owner', 'must not contain NUL characters');
  if (!owner.isWellFormed()) throw new InvalidArgumentError('owner', 'must be well-formed Unicode (it has a lone surrogate)');
  const request: LeaseRequest = {
    target,
    ttlMs: o.ttlMs === undefined ? 15_000 : durationMs(o.ttlMs, 'ttlMs', { min: 100, integer: true }),
    renew: booleanOption(o.renew, 'renew', true),
    timeoutMs: o.timeoutMs === undefined ? ctx.defaultTimeoutMs : durationMs(o.timeoutMs, 'timeoutMs', { allowInfinity: true }),
    signal: abortSignal(o.signal),
    owner,
    data: jsonData(o.data),
    minHoldMs: o.minHoldMs === undefined ? 0 : durationMs(o.minHoldMs, 'minHoldMs', { integer: true }),
  };
  ctx.checkNesting(target, o.allowNested, 'lease', request.timeoutMs);
  ctx.noteName(target.key, target.name);
  return request;
}

/** tryLease's request: lease's, with a single attempt. */
export function tryLeaseRequest(ctx: LockerContext, name: LockName | undefined, opts: Omit<LeaseOptions, 'timeoutMs'> | undefined): LeaseRequest {
  const o = optionsObject<LeaseOptions>(opts, 'tryLease options', LEASE_OPTION_KEYS);
  return leaseRequest(ctx, name, singleAttempt(o, 'tryLease', 'lease'), 'tryLease');
}

/** Lease data must survive a JSON round trip into jsonb. */
function jsonData(data: unknown): unknown {
  if (data === undefined) return undefined;
  let text: string | undefined;
  try {
    text = JSON.stringify(data);
  } catch (err) {
    throw new InvalidArgumentError('data', `must be JSON-serialisable: ${(err as Error).message}`);
  }
  if (text === undefined) throw new InvalidArgumentError('data', `must be JSON-serialisable, got ${describeType(data)}`);
  const parsed: unknown = JSON.parse(text);
  checkJsonbStrings(parsed, 'data');
  return parsed;
}

/** jsonb refuses \u0000 and lone surrogates in any string, key or value: refuse them before any I/O. */
function checkJsonbStrings(value: unknown, path: string): void {
  const check = (text: string, where: string) => {
    if (text.includes('\0')) throw new InvalidArgumentError(where, 'must not contain NUL characters (PostgreSQL jsonb cannot store \\u0000)');
    if (!text.isWellFormed()) throw new InvalidArgumentError(where, 'must be well-formed Unicode (it has a lone surrogate)');
  };
  if (typeof value === 'string') return check(value, path);
  if (typeof value !== 'object' || value === null) return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => checkJsonbStrings(v, `${path}[${i}]`));
    return;
  }
  for (const [k, v] of Object.entries(value)) {
    check(k, `${path} key ${JSON.stringify(k.slice(0, 40))}`);
    checkJsonbStrings(v, `${path}.${k.slice(0, 40)}`);
  }
}
