import { EventEmitter } from 'node:events';
import { acquireAll, type AcquireOptions, acquireRequest, type AcquireRequest, AdvisoryLockManager, type CompositeLockHandle, type FencedAcquireOptions, leaderGuardRequest, LockBudget, openSemaphore, type Semaphore, SemaphoreManager, type SemaphoreOptions, sessionLockStatements, tryAcquireRequest, warmGuardSql } from './advisory/index.js';
import type { FencedLockHandle, LockHandle } from './core/index.js';
import { LockerParts } from './locker-parts.js';
import { resolveLock, type LockName } from './keys.js';
import { LeaderCampaign, type LeaderElection, type LeaseHandle, LeaseManager, type LeaseOptions, leaseRequest, startCampaign, tryLeaseRequest } from './lease/index.js';
import { resolveLockerOptions, type LockerOptions } from './locker-options.js';
import { PgLockerContext } from './locker-context.js';
import { inspectDatabase, type LockerEvents, type LockerStats, type LockReport, NameRegistry, Observer, type OwnLocks, reportBounce } from './observe/index.js';
import { callback } from './options.js';
import { ConnectionSource, deadClientBounds, PinnedSessionSettings, ReleaseListener, SessionPool } from './session/index.js';

export type { AcquireOptions, FencedAcquireOptions, LeaseOptions, LockerOptions };

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
  tryWithLease<T, D = unknown>(
    name: LockName,
    fn: (handle: LeaseHandle<D>) => Promise<T>,
    opts?: Omit<LeaseOptions<D>, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }>;
  semaphore(name: LockName, opts: SemaphoreOptions): Semaphore;
  leader(name: LockName, opts?: Omit<LeaseOptions, 'timeoutMs' | 'allowNested' | 'minHoldMs'>): LeaderElection;
  /** Held and waiting locks across the whole database, with names, and the leases held now. */
  inspect(): Promise<LockReport>;
  stats(): LockerStats;
  close(): Promise<void>;
}

export function createLocker(options?: LockerOptions): Locker {
  return new PgLocker(options);
}

/**
 * A locker wires its parts (session locks, leases, semaphores) to the sessions and the release
 * listener they share; each part's own module checks its calls' options and builds its requests.
 */
class PgLocker extends EventEmitter<LockerEvents> implements Locker {
  private readonly ctx: PgLockerContext;
  private readonly source: ConnectionSource;
  private readonly sessions: SessionPool;
  private readonly listener: ReleaseListener;
  private readonly parts = new LockerParts();
  private readonly locks: AdvisoryLockManager;
  private readonly leases: LeaseManager;
  private readonly semaphores: SemaphoreManager;
  private readonly campaigns = new Set<LeaderCampaign>();
  private readonly names: NameRegistry;
  private readonly observer: Observer;
  private closing: Promise<void> | null = null;

  constructor(options: LockerOptions | undefined) {
    super();
    const opts = resolveLockerOptions(options);
    const { keepaliveMs, deadlineMs, logger } = opts;
    const budget = new LockBudget(
      opts.maxHeldLocks,
      () => this.locks.held + this.locks.waiting + this.semaphores.held + this.semaphores.waiting,
      logger,
    );
    const pinnedSettings = new PinnedSessionSettings(deadClientBounds(keepaliveMs, deadlineMs), logger);
    pinnedSettings.onLockTable = (size) => budget.learnLockTable(size);
    this.source = new ConnectionSource(
      {
        connectionString: opts.connectionString,
        pool: opts.pool,
        directConnectionString: opts.directConnectionString,
        // The sessions, the waiter session, the release listener, and two for short statements (leases, inspect).
        poolSize: opts.maxSessions + 4,
        connectTimeoutMs: deadlineMs,
        pinnedSettings,
      },
      logger,
    );
    // Names go out on the waiter session while it is idle (no connection of their own), else through the pool.
    this.names = new NameRegistry(
      (text, values) => this.sessions.idleWaiter()?.statement(text, values) ?? this.source.pool.query(text, values),
      logger,
    );
    this.ctx = new PgLockerContext(this, opts, this.source, budget, this.names, () => this.closing !== null);
    this.observer = new Observer(this, logger, opts.meter, () => this.stats().held);
    this.listener = new ReleaseListener(this.source, { keepaliveMs, deadlineMs, logger }, (key) => this.parts.onRelease(key));
    this.sessions = new SessionPool(
      this.source,
      { size: opts.maxSessions, keepaliveMs, deadlineMs, logger, statements: sessionLockStatements, warmWaiter: warmGuardSql },
      (session, err) => this.parts.onSessionLost(session, err),
    );
    this.locks = this.parts.add(new AdvisoryLockManager(this.sessions, this.listener, this.observer, deadlineMs));
    this.sessions.waiterInUse = () => this.locks.usesWaiterSession();
    this.leases = this.parts.add(new LeaseManager(this.source, this.sessions, this.listener, this.observer));
    this.semaphores = this.parts.add(new SemaphoreManager(this.sessions, this.listener, this.observer));
  }

  acquire(name: LockName, opts: FencedAcquireOptions): Promise<FencedLockHandle>;
  acquire(name: LockName, opts?: AcquireOptions): Promise<LockHandle>;
  acquire(name: LockName, opts?: AcquireOptions): Promise<LockHandle> {
    // Not async: one promise less on the hot path. Validation errors still arrive as rejections.
    let request: AcquireRequest;
    try {
      request = acquireRequest(this.ctx, name, opts, 'acquire');
    } catch (err) {
      return Promise.reject(err);
    }
    return this.ctx.refusedIfPooled(this.locks.acquire(request, false) as Promise<LockHandle>);
  }

  tryAcquire(name: LockName, opts: Omit<FencedAcquireOptions, 'timeoutMs'>): Promise<FencedLockHandle | null>;
  tryAcquire(name: LockName, opts?: Omit<AcquireOptions, 'timeoutMs'>): Promise<LockHandle | null>;
  async tryAcquire(name: LockName, opts?: Omit<AcquireOptions, 'timeoutMs'>): Promise<LockHandle | null> {
    return this.ctx.refusedIfPooled(this.locks.acquire(tryAcquireRequest(this.ctx, name, opts), true));
  }

  withLock<T>(name: LockName, fn: (handle: FencedLockHandle) => Promise<T>, opts: FencedAcquireOptions): Promise<T>;
  withLock<T>(name: LockName, fn: (handle: LockHandle) => Promise<T>, opts?: AcquireOptions): Promise<T>;
  // fn takes a FencedLockHandle only under the fencing overload, where the token is there.
  async withLock<T>(name: LockName, fn: (handle: FencedLockHandle) => Promise<T>, opts?: AcquireOptions): Promise<T> {
    callback(fn, 'fn');
    const handle = await this.acquire(name, opts);
    return this.ctx.runHolding(handle as FencedLockHandle, fn);
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
    return { acquired: true, value: await this.ctx.runHolding(handle as FencedLockHandle, fn) };
  }

  acquireAll(names: LockName[], opts?: AcquireOptions): Promise<CompositeLockHandle> {
    return acquireAll(this.ctx, this.locks, names, opts);
  }

  // The handle's data is the caller's own value (what it stored as JSON), hence the casts to LeaseHandle<D>.
  async lease<D = unknown>(name: LockName, opts?: LeaseOptions<D>): Promise<LeaseHandle<D>> {
    return (await this.leases.acquire(leaseRequest(this.ctx, name, opts, 'lease'), false)) as LeaseHandle<D>;
  }

  async tryLease<D = unknown>(name: LockName, opts?: Omit<LeaseOptions<D>, 'timeoutMs'>): Promise<LeaseHandle<D> | null> {
    return (await this.leases.acquire(tryLeaseRequest(this.ctx, name, opts), true)) as LeaseHandle<D> | null;
  }

  async withLease<T, D = unknown>(name: LockName, fn: (handle: LeaseHandle<D>) => Promise<T>, opts?: LeaseOptions<D>): Promise<T> {
    callback(fn, 'fn');
    const handle = await this.lease(name, opts);
    return this.ctx.runHolding(handle, fn);
  }

  async tryWithLease<T, D = unknown>(
    name: LockName,
    fn: (handle: LeaseHandle<D>) => Promise<T>,
    opts?: Omit<LeaseOptions<D>, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }> {
    callback(fn, 'fn');
    const handle = await this.tryLease(name, opts);
    if (!handle) return { acquired: false };
    return { acquired: true, value: await this.ctx.runHolding(handle, fn) };
  }

  semaphore(name: LockName, opts: SemaphoreOptions): Semaphore {
    return openSemaphore(this.ctx, this.semaphores, name, opts);
  }

  leader(name: LockName, opts?: Omit<LeaseOptions, 'timeoutMs' | 'allowNested'>): LeaderElection {
    const campaign = startCampaign(this.ctx, name, opts, {
      lease: (leaseOpts) => this.lease(name, leaseOpts),
      guard: async (key, guardName) =>
        (await this.ctx.refusedIfPooled(this.locks.acquire(leaderGuardRequest(this.ctx, key, guardName), false)))!,
    });
    this.campaigns.add(campaign);
    return campaign;
  }

  async inspect(): Promise<LockReport> {
    await this.names.flush();
    const own: OwnLocks = new Map();
    this.parts.ownLocks(own);
    return inspectDatabase(this.source.pool, own);
  }

  stats(): LockerStats {
    return {
      ...this.observer.counters(),
      held: this.parts.held,
      waiting: this.parts.waiting,
      sessions: this.sessions.live().length,
    };
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.all([...this.campaigns].map((c) => c.closeWithLocker()));
      await Promise.all([this.parts.close(), this.names.flush()]);
      this.sessions.close();
      this.listener.close();
      await this.source.end();
    })();
    return this.closing;
  }

  /** @internal pgfence/pg-boss returned a job to pg-boss because its key was busy. */
  [reportBounce](name: string, queue: string, jobId: string, waitMs: number | null): void {
    const target = resolveLock(name, this.ctx.namespace);
    this.observer.bounced({ kind: 'lock', name: target.name, key: target.key, mode: 'exclusive' }, queue, jobId, waitMs);
  }
}
