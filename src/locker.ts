import { EventEmitter } from 'node:events';
import { acquireAll, type AcquireOptions, acquireRequest, type AcquireRequest, AdvisoryLockManager, type CompositeLockHandle, type FencedAcquireOptions, leaderGuardRequest, LockBudget, type Semaphore, serverLockSampler, SemaphoreManager, type SemaphoreOptions, sessionLockStatements, tryAcquireRequest, warmGuardSql } from './advisory/index.js';
import type { FencedLockHandle, LockHandle } from './core/index.js';
import { LockerParts } from './locker-parts.js';
import { resolveLock, type LockName } from './keys.js';
import { LeaderCampaign, type LeaderElection, type LeaseHandle, LeaseManager, type LeaseOptions, leaseRequest, openSemaphoreOf, startCampaign, tryLeaseRequest } from './lease/index.js';
import { resolveLockerOptions, type LockerOptions } from './locker-options.js';
import { PgLockerContext } from './locker-context.js';
import { inspectDatabase, type LockerEvents, type LockerStats, type LockReport, NameRegistry, Observer, type OwnLocks, reportBounce } from './observe/index.js';
import { callback } from './options.js';
import { ConnectionSource, deadClientBounds, PinnedSessionSettings, ReleaseListener, SessionPool, ShortStatements } from './session/index.js';

export type { AcquireOptions, FencedAcquireOptions, LeaseOptions, LockerOptions };

/** A locker: its events ('acquired', 'released', 'timeout', 'lost', 'contention', 'bounce') are typed by LockerEvents. */
export interface Locker extends EventEmitter<LockerEvents> {
  /**
   * A session lock: waits up to `timeoutMs` (default the locker's `defaultTimeoutMs`, 10 s), then
   * rejects with LockTimeoutError. With `fencing: true` the handle carries a fencing token.
   *
   * @example
   * ```ts fragment
   * const lock = await locker.acquire('order:123', { timeoutMs: 5000, fencing: true });
   * console.log(lock.token); // a bigint, greater than every earlier holder's
   * await lock.release();
   * ```
   */
  acquire(name: LockName, opts: FencedAcquireOptions): Promise<FencedLockHandle>;
  acquire(name: LockName, opts?: AcquireOptions): Promise<LockHandle>;
  /**
   * One attempt at a session lock: null when it is held elsewhere (a try never waits, so it may be
   * taken inside any callback).
   *
   * @example
   * ```ts fragment
   * const lock = await locker.tryAcquire('cron:cleanup');
   * if (lock) await lock.release();
   * ```
   */
  tryAcquire(name: LockName, opts: Omit<FencedAcquireOptions, 'timeoutMs'>): Promise<FencedLockHandle | null>;
  tryAcquire(name: LockName, opts?: Omit<AcquireOptions, 'timeoutMs'>): Promise<LockHandle | null>;
  /**
   * Runs `fn` holding a session lock, and releases it when `fn` settles (also when it throws). When
   * the lock was lost before `fn` settled (or its release finds it gone), rejects with LockLostError,
   * `fn`'s value as its `value`, even if `fn` resolved: the work did not hold the lock to its end.
   *
   * @example
   * ```ts fragment
   * const charged = await locker.withLock('order:123', async (lock) => {
   *   lock.signal.throwIfAborted(); // aborts the moment the lock is lost
   *   return 'charged';
   * }, { timeoutMs: 5000 });
   * ```
   */
  withLock<T>(name: LockName, fn: (handle: FencedLockHandle) => Promise<T>, opts: FencedAcquireOptions): Promise<T>;
  withLock<T>(name: LockName, fn: (handle: LockHandle) => Promise<T>, opts?: AcquireOptions): Promise<T>;
  /**
   * Runs `fn` holding a session lock if it is free now; `{ acquired: false }` without running it when
   * the lock is held elsewhere. Like withLock, rejects with LockLostError (`fn`'s value as its `value`)
   * when the lock was lost before `fn` settled.
   *
   * @example
   * ```ts fragment
   * const r = await locker.tryWithLock('cron:nightly-report', async () => 'built');
   * if (!r.acquired) console.log('another instance is on it');
   * ```
   */
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
  /**
   * Several session locks, all or nothing, taken in one canonical order (callers never deadlock on
   * each other); one handle releases them all.
   *
   * @example
   * ```ts fragment
   * const all = await locker.acquireAll(['account:1', 'account:2'], { timeoutMs: 5000 });
   * await all.release(); // all.handles: one per name
   * ```
   */
  acquireAll(names: LockName[], opts?: AcquireOptions): Promise<LockHandle & { readonly handles: readonly LockHandle[] }>;
  /**
   * A table-backed lease with a TTL on the database clock, renewed automatically (every `ttlMs / 3`);
   * waits up to `timeoutMs`. Its token fences writes.
   *
   * @example
   * ```ts fragment
   * const lease = await locker.lease('nightly-report', { ttlMs: 30_000, data: { host: 'worker-1' } });
   * await fencedUpdate(pool, { table: 'orders', set: { status: 'paid' }, where: { id: 1 }, token: lease.token });
   * await lease.release();
   * ```
   */
  lease<D = unknown>(name: LockName, opts?: LeaseOptions<D>): Promise<LeaseHandle<D>>;
  /**
   * One attempt at a lease: null when it is held (by this or another process).
   *
   * @example
   * ```ts fragment
   * const lease = await locker.tryLease('report', { minHoldMs: 30_000 }); // a cron singleton
   * if (lease) try { await buildReport(lease.token); } finally { await lease.release(); }
   * ```
   */
  tryLease<D = unknown>(name: LockName, opts?: Omit<LeaseOptions<D>, 'timeoutMs'>): Promise<LeaseHandle<D> | null>;
  /**
   * Runs `fn` holding a lease, and releases it when `fn` settles. When the lease was lost before `fn`
   * settled (its signal aborted, or its release finds it no longer this holder's), rejects with
   * LockLostError, `fn`'s value as its `value`, even if `fn` resolved.
   *
   * @example
   * ```ts fragment
   * await locker.withLease('sync', async (lease) => {
   *   // ... long work; lease.signal aborts at the holder's own deadline, before anyone else can take it
   *   lease.signal.throwIfAborted();
   * }, { ttlMs: 60_000 });
   * ```
   */
  withLease<T, D = unknown>(name: LockName, fn: (handle: LeaseHandle<D>) => Promise<T>, opts?: LeaseOptions<D>): Promise<T>;
  /**
   * Runs `fn` holding a lease if it is free now; `{ acquired: false }` without running it when the
   * lease is held. Like withLease, rejects with LockLostError (`fn`'s value as its `value`) when the
   * lease was lost before `fn` settled.
   *
   * @example
   * ```ts fragment
   * const r = await locker.tryWithLease('nightly-report', async (lease) => lease.token);
   * if (r.acquired) console.log(`ran with token ${r.value}`);
   * ```
   */
  tryWithLease<T, D = unknown>(
    name: LockName,
    fn: (handle: LeaseHandle<D>) => Promise<T>,
    opts?: Omit<LeaseOptions<D>, 'timeoutMs'>,
  ): Promise<{ acquired: true; value: T } | { acquired: false }>;
  /**
   * A semaphore of `permits` slots shared by every process that opens it with the same name (and
   * the same `permits`). Opening one does no I/O.
   *
   * @example
   * ```ts fragment
   * const vendor = locker.semaphore('vendor-api', { permits: 5 });
   * await vendor.withPermit(() => callVendor(), { timeoutMs: 30_000 });
   * ```
   */
  semaphore(name: LockName, opts: SemaphoreOptions): Semaphore;
  /**
   * Campaigns for leadership of `name` until resigned or closed: 'elected' and 'demoted' events, the
   * term's epoch (its lease's fencing token).
   *
   * @example
   * ```ts fragment
   * const election = locker.leader('scheduler', { ttlMs: 10_000 });
   * election.on('elected', ({ epoch }) => console.log(`leading, epoch ${epoch}`));
   * await election.whenElected();
   * ```
   */
  leader(name: LockName, opts?: Omit<LeaseOptions, 'timeoutMs' | 'allowNested' | 'minHoldMs'>): LeaderElection;
  /**
   * Held and waiting locks across the whole database, with names, and the leases held now.
   *
   * @example
   * ```ts fragment
   * const report = await locker.inspect();
   * for (const l of report.locks) console.log(l.name ?? `key ${l.key}`, l.state, l.pid);
   * console.log(report.replication.synchronous);
   * ```
   */
  inspect(): Promise<LockReport>;
  /**
   * This locker's counters, and what it holds and waits for now. No I/O.
   *
   * @example
   * ```ts fragment
   * const { acquired, held, waiting, sessions } = locker.stats();
   * ```
   */
  stats(): LockerStats;
  /**
   * Releases everything this locker holds, fails its waiters with LockerClosedError, and ends its
   * connections; resolves once every grant in flight has been given back.
   *
   * @example
   * ```ts fragment
   * process.once('SIGTERM', () => void locker.close());
   * ```
   */
  close(): Promise<void>;
}

/**
 * A locker: the entry point for session locks, leases, semaphores and leader election. Opens no
 * connection until first used. With neither `connectionString` nor `pool`, the PG* environment
 * (PGHOST, PGUSER, PGDATABASE, ...) says where the database is, as for node-postgres and psql.
 *
 * @example
 * ```ts fragment
 * const locker = createLocker({ connectionString: process.env.DATABASE_URL, namespace: 'billing' });
 * await locker.withLock('invoice:42', async () => {
 *   // ...
 * });
 * await locker.close();
 * ```
 */
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
  private readonly statements: ShortStatements;
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
      serverLockSampler(() => this.sessions),
      keepaliveMs,
    );
    const pinnedSettings = new PinnedSessionSettings(deadClientBounds(keepaliveMs, deadlineMs), logger);
    pinnedSettings.onLockTable = (size, advisory) => budget.learnLockTable(size, advisory);
    this.source = new ConnectionSource(
      {
        connectionString: opts.connectionString,
        pool: opts.pool,
        directConnectionString: opts.directConnectionString,
        // The sessions, the waiter session, and two for what goes through the pool (behind a transaction pooler; a cancel).
        poolSize: opts.maxSessions + 3,
        connectTimeoutMs: deadlineMs,
        pinnedSettings,
      },
      logger,
    );
    this.sessions = new SessionPool(this.source, {
      size: opts.maxSessions, keepaliveMs, deadlineMs, idleTimeoutMs: opts.idleTimeoutMs, logger, statements: sessionLockStatements, warmWaiter: warmGuardSql,
      onLost: (session, err) => this.parts.onSessionLost(session, err),
      onNotification: (msg) => this.listener.notified(msg),
      waiterBlocked: () => this.locks.waiterBlocked(),
      needed: () => this.parts.held > 0 || this.parts.waiting > 0,
      waiting: () => this.parts.waiting > 0,
    });
    // Lease statements, names and inspect go on the home session (no connection of their own).
    this.statements = new ShortStatements(this.source, this.sessions);
    this.names = new NameRegistry((statement, values) => this.statements.run(statement, values), logger);
    this.ctx = new PgLockerContext(this, opts, this.source, budget, this.names, () => this.closing !== null);
    this.observer = new Observer(this, logger, opts.meter, () => this.stats().held);
    this.listener = new ReleaseListener(this.sessions, logger, (key) => this.parts.onRelease(key));
    this.locks = this.parts.add(new AdvisoryLockManager(this.sessions, this.listener, this.observer, deadlineMs));
    this.leases = this.parts.add(new LeaseManager(this.statements, this.sessions, this.listener, this.observer, (key) => this.locks.pinsKey(key), this.locks.waiterQueue));
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
    return openSemaphoreOf(this.ctx, { advisory: this.semaphores, leases: this.leases }, name, opts);
  }

  leader(name: LockName, opts?: Omit<LeaseOptions, 'timeoutMs' | 'allowNested'>): LeaderElection {
    const campaign = startCampaign(this.ctx, name, opts, {
      lease: (leaseOpts) => this.lease(name, leaseOpts),
      guard: async (key, guardName, signal) =>
        (await this.ctx.refusedIfPooled(this.locks.acquire(leaderGuardRequest(this.ctx, key, guardName, signal), false)))!,
    });
    this.campaigns.add(campaign);
    return campaign;
  }

  async inspect(): Promise<LockReport> {
    await this.names.flush();
    const own: OwnLocks = new Map();
    this.parts.ownLocks(own);
    return inspectDatabase(this.statements, own);
  }

  stats(): LockerStats {
    return {
      ...this.observer.counters(),
      held: this.parts.held,
      waiting: this.parts.waiting,
      sessions: this.sessions.sessions().length,
    };
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.all([...this.campaigns].map((c) => c.closeWithLocker()));
      await Promise.all([this.parts.close(), this.names.close()]);
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
