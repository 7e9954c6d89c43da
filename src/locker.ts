import { EventEmitter } from 'node:events';
import type pg from 'pg';
import { acquireAll } from './advisory/acquire-all.js';
import type { CompositeLockHandle } from './advisory/composite-handle.js';
import type { FencedLockHandle, LockHandle } from './advisory/handle.js';
import { AdvisoryLockManager, type AcquireRequest } from './advisory/lock-manager.js';
import { heldInCallback, runHolding } from './advisory/nesting.js';
import { InvalidArgumentError, LockerClosedError, NestedLockError } from './errors.js';
import { LeaderCampaign, type LeaderElection } from './lease/leader.js';
import { inspectDatabase, type LockReport, type OwnLocks } from './observe/inspect.js';
import { NameRegistry } from './observe/name-registry.js';
import { describeType, nameToBytes, resolveLock, type LockName, type LockTarget } from './keys.js';
import { jsonSafeLogger, type Logger, silentLogger } from './observe/logger.js';
import type { Meter } from './observe/metrics.js';
import { type LockerEvents, type LockerStats, type LockMode, Observer, reportBounce } from './observe/observer.js';
import { abortSignal, booleanOption, callback, durationMs, oneOf, optionKeys, optionsObject, positiveInteger } from './options.js';
import { ConnectionSource } from './session/connection-source.js';
import { deadClientBounds, PinnedSessionSettings } from './session/server-settings.js';
import { LockBudget } from './advisory/lock-budget.js';
import { ReleaseListener } from './session/listener.js';
import { SessionPool } from './session/session-pool.js';
import { LeaseManager, type LeaseHandle, type LeaseRequest } from './lease/lease-manager.js';
import {
  SEMAPHORE_ACQUIRE_OPTION_KEYS,
  SEMAPHORE_OPTION_KEYS,
  SemaphoreManager,
  semaphoreKeys,
  type PermitRequest,
  type Semaphore,
  type SemaphoreAcquireOptions,
  type SemaphoreOptions,
} from './advisory/semaphore.js';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';

export interface LockerOptions {
  /**
   * A PostgreSQL URL or libpq keyword/value settings; the locker builds its own pool from it. Several
   * hosts (`postgresql://h1:5432,h2:5432/db?target_session_attrs=read-write`) send every new
   * connection to the current primary.
   */
  connectionString?: string;
  /** Or a pool to pin the locker's connections from, for the locker's lifetime. */
  pool?: pg.Pool;
  /**
   * For the locker's pinned sessions (session locks, semaphores, the waiter, the listener) when
   * connectionString/pool goes through a transaction pooler such as PgBouncer: a URL straight to
   * PostgreSQL (or a session-mode pool). Without it, session locks behind a transaction pooler are
   * refused with PGFENCE_POOLED_CONNECTION.
   */
  directConnectionString?: string;
  /** Prefix of every lock name (hashed together with it). */
  namespace?: string;
  /** Pinned connections for session locks; default 2. */
  maxSessions?: number;
  /**
   * Lock-table budget: the most advisory locks this locker holds or waits for at once; beyond it an
   * acquisition is refused (PGFENCE_LOCK_BUDGET) before touching the server. Default: a quarter of the
   * server's lock table, max_locks_per_transaction x (max_connections + max_prepared_transactions).
   */
  maxHeldLocks?: number;
  /** Loss-detection cadence; default 5000. Probes get max(2 x keepaliveMs, 2000 ms) to answer. */
  keepaliveMs?: number;
  /** Default acquire wait; default 10000. */
  defaultTimeoutMs?: number;
  logger?: Logger;
  /** An @opentelemetry/api Meter. */
  meter?: Meter;
}
export const LOCKER_OPTION_KEYS = optionKeys<LockerOptions>({
  connectionString: true,
  pool: true,
  directConnectionString: true,
  namespace: true,
  maxSessions: true,
  maxHeldLocks: true,
  keepaliveMs: true,
  defaultTimeoutMs: true,
  logger: true,
  meter: true,
});

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
   * At-least-for (ShedLock's lockAtLeastFor): release keeps the lease until acquiredAt + minHoldMs
   * on the database clock, so a job that finished quickly is not run again by a node whose schedule
   * fired later. The handle's release still resolves true and stops renewal. Default 0.
   */
  minHoldMs?: number;
  allowNested?: boolean;
}
export const LEASE_OPTION_KEYS = optionKeys<LeaseOptions>({
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

/** A locker: its events ('acquired', 'released', 'timeout', 'lost', 'contention', 'bounce') are typed by LockerEvents. */
export interface Locker extends EventEmitter<LockerEvents> {
  acquire(name: LockName, opts: FencedAcquireOptions): Promise<FencedLockHandle>;
  acquire(name: LockName, opts?: AcquireOptions): Promise<LockHandle>;
  tryAcquire(name: LockName, opts: Omit<FencedAcquireOptions, 'timeoutMs'>): Promise<FencedLockHandle | null>;
  tryAcquire(name: LockName, opts?: Omit<AcquireOptions, 'timeoutMs'>): Promise<LockHandle | null>;
  withLock<T>(name: LockName, fn: (handle: FencedLockHandle) => Promise<T>, opts: FencedAcquireOptions): Promise<T>;
  withLock<T>(name: LockName, fn: (handle: LockHandle) => Promise<T>, opts?: AcquireOptions): Promise<T>;
  tryWithLock<T>(
    name: LockName,
    fn: (handle: FencedLockHandle) => Promise<T>,
    opts: Omit<FencedAcquireOptions, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }>;
  tryWithLock<T>(
    name: LockName,
    fn: (handle: LockHandle) => Promise<T>,
    opts?: Omit<AcquireOptions, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }>;
  acquireAll(names: LockName[], opts?: AcquireOptions): Promise<LockHandle & { readonly handles: readonly LockHandle[] }>;
  lease<D = unknown>(name: LockName, opts?: LeaseOptions<D>): Promise<LeaseHandle<D>>;
  tryLease<D = unknown>(name: LockName, opts?: Omit<LeaseOptions<D>, 'timeoutMs'>): Promise<LeaseHandle<D> | null>;
  withLease<T, D = unknown>(name: LockName, fn: (handle: LeaseHandle<D>) => Promise<T>, opts?: LeaseOptions<D>): Promise<T>;
  semaphore(name: LockName, opts: SemaphoreOptions): Semaphore;
  leader(name: LockName, opts?: Omit<LeaseOptions, 'timeoutMs' | 'allowNested' | 'minHoldMs'>): LeaderElection;
  /** Held and waiting locks across the whole database, with names, and the leases held now. */
  inspect(): Promise<LockReport>;
  stats(): LockerStats;
  close(): Promise<void>;
}

interface ResolvedLockerOptions {
  namespace: string | undefined;
  maxSessions: number;
  keepaliveMs: number;
  deadlineMs: number;
  defaultTimeoutMs: number;
  logger: Logger;
}

export function createLocker(options: LockerOptions): Locker {
  return new PgLocker(options);
}

class PgLocker extends EventEmitter<LockerEvents> implements Locker {
  private readonly opts: ResolvedLockerOptions;
  private readonly source: ConnectionSource;
  private readonly sessions: SessionPool;
  private readonly listener: ReleaseListener;
  private readonly locks: AdvisoryLockManager;
  private readonly leases: LeaseManager;
  private readonly semaphores: SemaphoreManager;
  private readonly campaigns = new Set<LeaderCampaign>();
  private readonly names: NameRegistry;
  private readonly defaultOwner = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  private readonly observer: Observer;
  private readonly budget: LockBudget;
  private closing: Promise<void> | null = null;

  constructor(options: LockerOptions) {
    super();
    const o = optionsObject<LockerOptions>(options, 'createLocker options', LOCKER_OPTION_KEYS);
    if ((o.connectionString === undefined) === (o.pool === undefined)) {
      throw new InvalidArgumentError('createLocker options', 'pass exactly one of connectionString or pool');
    }
    if (o.connectionString !== undefined && (typeof o.connectionString !== 'string' || o.connectionString.trim() === '')) {
      // node-postgres would quietly fall back to localhost and the PG* environment for a blank one.
      throw new InvalidArgumentError('connectionString', `expected a PostgreSQL URL, got ${describeType(o.connectionString)}`);
    }
    if (o.pool !== undefined && (typeof o.pool !== 'object' || o.pool === null || typeof o.pool.connect !== 'function')) {
      throw new InvalidArgumentError('pool', `expected a pg.Pool, got ${describeType(o.pool)}`);
    }
    if (o.directConnectionString !== undefined && (typeof o.directConnectionString !== 'string' || o.directConnectionString === '')) {
      throw new InvalidArgumentError('directConnectionString', `expected a PostgreSQL URL, got ${describeType(o.directConnectionString)}`);
    }
    if (o.namespace !== undefined) nameToBytes('namespace', o.namespace);
    const keepaliveMs = o.keepaliveMs === undefined ? 5000 : durationMs(o.keepaliveMs, 'keepaliveMs', { min: 10 });
    this.opts = {
      namespace: o.namespace,
      maxSessions: o.maxSessions === undefined ? 2 : positiveInteger(o.maxSessions, 'maxSessions', 64),
      keepaliveMs,
      deadlineMs: Math.max(2 * keepaliveMs, 2000),
      defaultTimeoutMs:
        o.defaultTimeoutMs === undefined ? 10_000 : durationMs(o.defaultTimeoutMs, 'defaultTimeoutMs', { allowInfinity: true }),
      logger: checkLogger(o.logger),
    };
    if (o.meter !== undefined && (typeof o.meter !== 'object' || typeof o.meter?.createHistogram !== 'function')) {
      throw new InvalidArgumentError('meter', 'expected an @opentelemetry/api Meter');
    }
    this.budget = new LockBudget(
      o.maxHeldLocks === undefined ? undefined : positiveInteger(o.maxHeldLocks, 'maxHeldLocks', 100_000_000),
      () => this.locks.held + this.locks.waiting + this.semaphores.held + this.semaphores.waiting,
      this.opts.logger,
    );
    const pinnedSettings = new PinnedSessionSettings(deadClientBounds(keepaliveMs, this.opts.deadlineMs), this.opts.logger);
    pinnedSettings.onLockTable = (size) => this.budget.learnLockTable(size);
    this.source = new ConnectionSource(
      {
        connectionString: o.connectionString,
        pool: o.pool,
        directConnectionString: o.directConnectionString,
        // The sessions, the waiter session, the release listener, and two for short statements (leases, inspect).
        poolSize: this.opts.maxSessions + 4,
        connectTimeoutMs: this.opts.deadlineMs,
        pinnedSettings,
      },
      this.opts.logger,
    );
    // Names go out on the waiter session while it is idle (no connection of their own), else through the pool.
    this.names = new NameRegistry(
      (text, values) => this.sessions.idleWaiter()?.statement(text, values) ?? this.source.pool.query(text, values),
      this.opts.logger,
    );
    this.observer = new Observer(this, this.opts.logger, o.meter, () => this.stats().held);
    this.listener = new ReleaseListener(
      this.source,
      { keepaliveMs, deadlineMs: this.opts.deadlineMs, logger: this.opts.logger },
      (key) => {
        this.locks.onRelease(key);
        this.leases.onRelease(key);
        this.semaphores.onRelease(key);
      },
    );
    this.sessions = new SessionPool(
      this.source,
      { size: this.opts.maxSessions, keepaliveMs, deadlineMs: this.opts.deadlineMs, logger: this.opts.logger },
      (session, err) => {
        this.locks.onSessionLost(session, err);
        this.leases.onSessionLost(session);
        this.semaphores.onSessionLost(session, err);
      },
    );
    this.locks = new AdvisoryLockManager(this.sessions, this.listener, this.observer, this.opts.deadlineMs);
    this.sessions.waiterInUse = () => this.locks.usesWaiterSession();
    this.leases = new LeaseManager(this.source, this.sessions, this.listener, this.observer);
    this.semaphores = new SemaphoreManager(this.sessions, this.listener, this.observer);
  }

  acquire(name: LockName, opts: FencedAcquireOptions): Promise<FencedLockHandle>;
  acquire(name: LockName, opts?: AcquireOptions): Promise<LockHandle>;
  acquire(name: LockName, opts?: AcquireOptions): Promise<LockHandle> {
    // Not async: one promise less on the hot path. Validation errors still arrive as rejections.
    let request: AcquireRequest;
    try {
      request = this.request(name, opts, 'acquire');
    } catch (err) {
      return Promise.reject(err);
    }
    return this.refusedIfPooled(this.locks.acquire(request, false) as Promise<LockHandle>);
  }

  tryAcquire(name: LockName, opts: Omit<FencedAcquireOptions, 'timeoutMs'>): Promise<FencedLockHandle | null>;
  tryAcquire(name: LockName, opts?: Omit<AcquireOptions, 'timeoutMs'>): Promise<LockHandle | null>;
  async tryAcquire(name: LockName, opts?: Omit<AcquireOptions, 'timeoutMs'>): Promise<LockHandle | null> {
    const o = optionsObject<AcquireOptions>(opts, 'tryAcquire options', ACQUIRE_OPTION_KEYS);
    if (o.timeoutMs !== undefined && o.timeoutMs !== 0) {
      throw new InvalidArgumentError('timeoutMs', 'tryAcquire makes a single attempt; use acquire() to wait');
    }
    return this.refusedIfPooled(this.locks.acquire(this.request(name, { ...o, timeoutMs: 0 }, 'tryAcquire'), true));
  }

  withLock<T>(name: LockName, fn: (handle: FencedLockHandle) => Promise<T>, opts: FencedAcquireOptions): Promise<T>;
  withLock<T>(name: LockName, fn: (handle: LockHandle) => Promise<T>, opts?: AcquireOptions): Promise<T>;
  // fn takes a FencedLockHandle only under the fencing overload, where the token is there.
  async withLock<T>(name: LockName, fn: (handle: FencedLockHandle) => Promise<T>, opts?: AcquireOptions): Promise<T> {
    callback(fn, 'fn');
    const handle = await this.acquire(name, opts);
    return this.runHolding(handle as FencedLockHandle, fn);
  }

  tryWithLock<T>(
    name: LockName,
    fn: (handle: FencedLockHandle) => Promise<T>,
    opts: Omit<FencedAcquireOptions, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }>;
  tryWithLock<T>(
    name: LockName,
    fn: (handle: LockHandle) => Promise<T>,
    opts?: Omit<AcquireOptions, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }>;
  async tryWithLock<T>(
    name: LockName,
    fn: (handle: FencedLockHandle) => Promise<T>,
    opts?: Omit<AcquireOptions, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }> {
    callback(fn, 'fn');
    const handle = await this.tryAcquire(name, opts);
    if (!handle) return { acquired: false };
    return { acquired: true, value: await this.runHolding(handle as FencedLockHandle, fn) };
  }

  async acquireAll(names: LockName[], opts?: AcquireOptions): Promise<CompositeLockHandle> {
    if (!Array.isArray(names) || names.length === 0) {
      throw new InvalidArgumentError('names', `expected a non-empty array of lock names, got ${describeType(names)}`);
    }
    const o = optionsObject<AcquireOptions>(opts, 'acquireAll options', ACQUIRE_OPTION_KEYS);
    if (o.fencing) throw new InvalidArgumentError('fencing', 'acquireAll does not issue fencing tokens; fence each resource with its own lock');
    // Every name is checked before request() notes the first one for the name registry (a write).
    const targets = new Map<bigint, LockTarget>();
    for (const [i, n] of names.entries()) {
      const t = resolveLock(n, this.opts.namespace, `names[${i}]`);
      targets.set(t.key, t);
    }
    const first = this.request(names[0], o, 'acquireAll');
    // One canonical order (ascending key) for every caller: two acquireAll calls can never wait on each other in a cycle.
    const ordered = [...targets.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    this.budget.check(first.target, ordered.length);
    return acquireAll(this.locks, this.sessions, first, ordered, (pending) => this.refusedIfPooled(pending));
  }

  // The handle's data is the caller's own value (what it stored as JSON), hence the casts to LeaseHandle<D>.
  async lease<D = unknown>(name: LockName, opts?: LeaseOptions<D>): Promise<LeaseHandle<D>> {
    return (await this.leases.acquire(this.leaseRequest(name, opts, 'lease'), false)) as LeaseHandle<D>;
  }

  async tryLease<D = unknown>(name: LockName, opts?: Omit<LeaseOptions<D>, 'timeoutMs'>): Promise<LeaseHandle<D> | null> {
    const o = optionsObject<LeaseOptions>(opts, 'tryLease options', LEASE_OPTION_KEYS);
    if (o.timeoutMs !== undefined && o.timeoutMs !== 0) {
      throw new InvalidArgumentError('timeoutMs', 'tryLease makes a single attempt; use lease() to wait');
    }
    return (await this.leases.acquire(this.leaseRequest(name, { ...o, timeoutMs: 0 }, 'tryLease'), true)) as LeaseHandle<D> | null;
  }

  async withLease<T, D = unknown>(name: LockName, fn: (handle: LeaseHandle<D>) => Promise<T>, opts?: LeaseOptions<D>): Promise<T> {
    callback(fn, 'fn');
    const handle = await this.lease(name, opts);
    return this.runHolding(handle, fn);
  }

  semaphore(name: LockName, opts: SemaphoreOptions): Semaphore {
    const o = optionsObject<SemaphoreOptions>(opts, 'semaphore options', SEMAPHORE_OPTION_KEYS);
    const target = resolveLock(name, this.opts.namespace);
    const permits = positiveInteger(o.permits, 'permits', 10_000);
    const { baseKey, slots } = semaphoreKeys(target, permits);
    if (target.name !== null) {
      const ns = this.opts.namespace ?? null;
      this.names.note(baseKey, `${target.name} (semaphore)`, ns);
      slots.slice(0, 1000).forEach((slot, i) => this.names.note(slot, `${target.name} (permit ${i + 1} of ${permits})`, ns));
    }
    const request = (acquireOpts: SemaphoreAcquireOptions | undefined, method: string, tryOnly: boolean): PermitRequest => {
      const a = optionsObject<SemaphoreAcquireOptions>(acquireOpts, `${method} options`, SEMAPHORE_ACQUIRE_OPTION_KEYS);
      if (tryOnly && a.timeoutMs !== undefined && a.timeoutMs !== 0) {
        throw new InvalidArgumentError('timeoutMs', 'tryAcquire makes a single attempt; use acquire() to wait');
      }
      const timeoutMs = tryOnly
        ? 0
        : a.timeoutMs === undefined
          ? this.opts.defaultTimeoutMs
          : durationMs(a.timeoutMs, 'timeoutMs', { allowInfinity: true });
      const r: PermitRequest = { target, baseKey, slots, timeoutMs, signal: abortSignal(a.signal) };
      this.checkNesting(target, a.allowNested, 'semaphore');
      if (this.source.refusal) throw this.source.refusal;
      this.budget.check(target);
      return r;
    };
    const acquire = async (acquireOpts?: SemaphoreAcquireOptions) =>
      (await this.refusedIfPooled(this.semaphores.acquire(request(acquireOpts, 'acquire', false), false)))!;
    return {
      name: target.name,
      permits,
      acquire,
      tryAcquire: async (acquireOpts) => this.refusedIfPooled(this.semaphores.acquire(request(acquireOpts, 'tryAcquire', true), true)),
      withPermit: async (fn, acquireOpts) => {
        callback(fn, 'fn');
        return this.runHolding(await acquire(acquireOpts), fn);
      },
    };
  }

  leader(name: LockName, opts?: Omit<LeaseOptions, 'timeoutMs' | 'allowNested'>): LeaderElection {
    const o = optionsObject<LeaseOptions>(opts, 'leader options', LEADER_OPTION_KEYS);
    if (o.timeoutMs !== undefined) throw new InvalidArgumentError('timeoutMs', 'a candidate campaigns until it resigns; use whenElected({ signal })');
    const template = this.leaseRequest(name, { ...o, timeoutMs: Infinity, allowNested: true }, 'leader');
    if (this.source.refusal) throw this.source.refusal; // its guard is a session lock
    if (this.closing) throw new LockerClosedError();
    const campaign = new LeaderCampaign(template.target, {
      // A campaign may start inside a lock callback: its own locks are not nested in it.
      lease: (signal) => this.lease(name, { ...o, timeoutMs: Infinity, allowNested: true, signal: anySignal(signal, template.signal) }),
      guard: (key, guardName) => {
        // Named, and reported as kind 'leader': status and metrics show the term, not an anonymous key.
        this.names.note(key, guardName, this.opts.namespace ?? null);
        const request: AcquireRequest = {
          target: { key, name: guardName },
          mode: 'exclusive',
          timeoutMs: this.opts.deadlineMs,
          signal: undefined,
          ttlMs: undefined,
          fencing: false,
          kind: 'leader',
        };
        if (this.source.refusal) return Promise.reject(this.source.refusal);
        return this.refusedIfPooled(this.locks.acquire(request, false) as Promise<LockHandle>);
      },
      logger: this.opts.logger,
    });
    this.campaigns.add(campaign);
    template.signal?.addEventListener('abort', () => void campaign.resign(), { once: true });
    return campaign;
  }

  async inspect(): Promise<LockReport> {
    await this.names.flush();
    const own: OwnLocks = new Map();
    this.locks.ownLocks(own);
    this.semaphores.ownLocks(own);
    return inspectDatabase(this.source.pool, own);
  }

  stats(): LockerStats {
    return {
      ...this.observer.counters(),
      held: this.locks.held + this.leases.held + this.semaphores.held,
      waiting: this.locks.waiting + this.leases.waiting + this.semaphores.waiting,
      sessions: this.sessions.live().length,
    };
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.all([...this.campaigns].map((c) => c.closeWithLocker()));
      await Promise.all([this.locks.close(), this.leases.close(), this.semaphores.close(), this.names.flush()]);
      this.sessions.close();
      this.listener.close();
      await this.source.end();
    })();
    return this.closing;
  }

  /** @internal pgfence/pg-boss returned a job to pg-boss because its key was busy. */
  [reportBounce](name: string, queue: string, jobId: string, waitMs: number | null): void {
    const target = resolveLock(name, this.opts.namespace);
    this.observer.bounced({ kind: 'lock', name: target.name, key: target.key, mode: 'exclusive' }, queue, jobId, waitMs);
  }

  private runHolding<H extends LockHandle, T>(handle: H, fn: (handle: H) => Promise<T>): Promise<T> {
    return runHolding(this, handle, async () => {
      try {
        return await fn(handle);
      } finally {
        await handle.release();
      }
    });
  }

  private leaseRequest(name: LockName | undefined, opts: LeaseOptions | undefined, method: string): LeaseRequest {
    const o = optionsObject<LeaseOptions>(opts, `${method} options`, LEASE_OPTION_KEYS);
    const target = resolveLock(name, this.opts.namespace);
    const owner = o.owner === undefined ? this.defaultOwner : o.owner;
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
      timeoutMs:
        o.timeoutMs === undefined ? this.opts.defaultTimeoutMs : durationMs(o.timeoutMs, 'timeoutMs', { allowInfinity: true }),
      signal: abortSignal(o.signal),
      owner,
      data: jsonData(o.data),
      minHoldMs: o.minHoldMs === undefined ? 0 : durationMs(o.minHoldMs, 'minHoldMs', { integer: true }),
    };
    this.checkNesting(target, o.allowNested, 'lease');
    this.names.note(target.key, target.name, this.opts.namespace ?? null);
    return request;
  }

  private checkNesting(target: LockTarget, allowNested: unknown, kind: 'lock' | 'lease' | 'semaphore'): void {
    if (booleanOption(allowNested, 'allowNested', false)) return;
    const outer = heldInCallback(this);
    if (outer) throw new NestedLockError(target.name, target.key, outer.handle.name, outer.handle.key, { kind, context: outer.context });
  }

  /** Validates a request (before any I/O) and checks for nesting. */
  /**
   * Until the first pinned session has shown it is not behind a transaction pooler, a failure is
   * checked for that cause (the session only reports it as a lost connection). Free afterwards.
   */
  private refusedIfPooled<T>(pending: Promise<T>): Promise<T> {
    if (this.source.pinningVerified) return pending;
    return pending.catch((err: unknown) => {
      throw this.source.refusal ?? err;
    });
  }

  private request(name: LockName | undefined, opts: AcquireOptions | undefined, method: string): AcquireRequest {
    // The hot path (no options) allocates nothing beyond the request itself.
    const o: Partial<AcquireOptions> = opts === undefined ? NO_OPTIONS : optionsObject<AcquireOptions>(opts, `${method} options`, ACQUIRE_OPTION_KEYS);
    const target = resolveLock(name, this.opts.namespace);
    const mode = o.mode === undefined ? 'exclusive' : oneOf(o.mode, 'mode', MODES, 'exclusive');
    const fencing = booleanOption(o.fencing, 'fencing', false);
    if (fencing && mode === 'shared') {
      throw new InvalidArgumentError('fencing', "fencing tokens are issued to exclusive holders only; use mode 'exclusive'");
    }
    const request: AcquireRequest = {
      target,
      mode,
      timeoutMs: o.timeoutMs === undefined ? this.opts.defaultTimeoutMs : durationMs(o.timeoutMs, 'timeoutMs', WAIT_BOUND),
      signal: abortSignal(o.signal),
      ttlMs: o.ttlMs === undefined ? undefined : durationMs(o.ttlMs, 'ttlMs', { min: 1 }),
      fencing,
    };
    this.checkNesting(target, o.allowNested, 'lock');
    if (this.source.refusal) throw this.source.refusal;
    this.budget.check(target);
    this.names.note(target.key, target.name, this.opts.namespace ?? null);
    return request;
  }
}

const NO_OPTIONS: Partial<AcquireOptions> = Object.freeze({});
const MODES = ['exclusive', 'shared'] as const;
const WAIT_BOUND = { allowInfinity: true } as const;

function anySignal(...signals: (AbortSignal | undefined)[]): AbortSignal {
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  return present.length === 1 ? present[0]! : AbortSignal.any(present);
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

function checkLogger(logger: unknown): Logger {
  if (logger === undefined) return silentLogger;
  const l = logger as Partial<Logger>;
  for (const level of ['debug', 'info', 'warn', 'error'] as const) {
    if (typeof l?.[level] !== 'function') {
      throw new InvalidArgumentError('logger', `expected a pino/console-shaped logger with a ${level}() method`);
    }
  }
  return jsonSafeLogger(l as Logger);
}
