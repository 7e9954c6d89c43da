import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker, LockTimeoutError, LockUnavailableError } from '../src/index.js';
import { packageFolders } from '../src/migrate/package-folders.js';
import { runMigrations } from '../src/migrate/runner.js';
import { eventually, track, useMigratedDatabase } from './support/db.js';

/**
 * Issue 30: a `pool` of the caller's is checked out with pgfence's own connect bound, whatever the pool
 * does. A pool-like object whose connect() never settles (and which ignores node-postgres's callback
 * form), or a pg.Pool without connectionTimeoutMillis whose connections are all in use, left calls
 * unanswered for good (tryAcquire, tryLease, close(), statements through the pool); now they fail with
 * LockUnavailableError within the bound, and a connection that arrives late goes back to the pool.
 */
let db: Awaited<ReturnType<typeof useMigratedDatabase>>;

beforeAll(async () => {
  db = await useMigratedDatabase('pool_bounds');
});

/** keepaliveMs 1000: the connect bound (the probe deadline, max(2 x keepaliveMs, 2000 ms)) is 2 s. */
const KEEPALIVE_MS = 1000;
/** Far past the bound, far short of "for good": what the calls below must settle within. */
const SETTLED_WITHIN_MS = 15_000;

function realPool(config: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({ connectionString: db.url, ...config });
  pool.on('error', () => {});
  track({ close: () => pool.end() }); // ended with the lockers that pin its connections
  return pool;
}

/** A pool-like object whose connect() returns a promise that never settles and never calls its callback. */
function silentPool(): pg.Pool {
  const never = () => new Promise<never>(() => {});
  return { options: {}, connect: never, query: never, on: () => undefined, end: async () => {} } as unknown as pg.Pool;
}

/** How `call` settled, or 'pending' if it had not within SETTLED_WITHIN_MS. */
async function settled(call: Promise<unknown>): Promise<{ value: unknown } | { error: unknown } | 'pending'> {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), SETTLED_WITHIN_MS)));
  try {
    return await Promise.race([call.then((value) => ({ value }), (error: unknown) => ({ error })), pending]);
  } finally {
    clearTimeout(timer);
  }
}

const lockerOn = (pool: pg.Pool, extra: Parameters<typeof createLocker>[0] = {}) => track(createLocker({ pool, keepaliveMs: KEEPALIVE_MS, ...extra }));

describe("a caller's pool that never answers (issue 30)", () => {
  it('every call settles: tryAcquire, acquire, tryLease and lease fail typed, close() resolves', async () => {
    const outcomes = await Promise.all([
      settled(lockerOn(silentPool()).tryAcquire('silent:a')),
      settled(lockerOn(silentPool()).acquire('silent:a', { timeoutMs: 300 })),
      settled(lockerOn(silentPool()).tryLease('silent:a')),
      settled(lockerOn(silentPool()).lease('silent:a', { timeoutMs: 300 })),
      settled(
        (async () => {
          const locker = lockerOn(silentPool());
          const waiting = locker.tryAcquire('silent:a').catch(() => {});
          await locker.close();
          await waiting;
        })(),
      ),
    ]);
    expect(outcomes).not.toContain('pending');
    const [tryAcquire, acquire, tryLease, lease, close] = outcomes as ({ value: unknown } | { error: unknown })[];
    for (const o of [tryAcquire, acquire, tryLease]) expect((o as { error: unknown }).error).toBeInstanceOf(LockUnavailableError);
    expect((tryAcquire as { error: Error }).error.message).toMatch(/pool gave no connection within 2000 ms/);
    // A lease that waits is answered at its timeout (the lease line does not wait for a first try stuck on its connection).
    expect((lease as { error: unknown }).error).toBeInstanceOf(LockTimeoutError);
    expect(close).toEqual({ value: undefined });
  });

  it('statements through the pool (behind a pooler, or with directConnectionString) are bounded too', async () => {
    // Lease statements go through `pool` when the pinned sessions have a direct connection string of their own.
    const locker = lockerOn(silentPool(), { directConnectionString: db.url });
    const outcome = await settled(locker.tryLease('silent:pooled'));
    expect((outcome as { error: unknown }).error).toBeInstanceOf(LockUnavailableError);
  });

  it('a pool-like object that answers with a promise only (ignoring the callback) is heeded', async () => {
    const pool = realPool({ max: 4 });
    const promiseOnly = { options: pool.options, connect: () => pool.connect(), query: pool.query.bind(pool), on: () => undefined, end: async () => {} };
    const locker = lockerOn(promiseOnly as unknown as pg.Pool);
    const lock = await locker.acquire('promise-only:a', { timeoutMs: 5000 });
    expect(await lock.release()).toBe(true);
    await locker.close();
  });

  it('migrate() with a pool that never answers fails within its bound', async () => {
    const outcome = await settled(runMigrations({ pool: silentPool(), ...packageFolders(), lockTimeoutMs: 500 }));
    expect((outcome as { error: unknown }).error).toBeInstanceOf(LockUnavailableError);
  });
});

describe('a pg.Pool without connectionTimeoutMillis, every connection in use (issue 30)', () => {
  it('fails the call within the connect bound, and gives the connection that arrives late back to the pool', async () => {
    const pool = realPool({ max: 1 }); // no connectionTimeoutMillis: pg waits for a free connection without end
    const mine = await pool.connect(); // the application holds the pool's only connection
    const locker = lockerOn(pool);
    const outcome = await settled(locker.tryAcquire('exhausted:a'));
    expect((outcome as { error: unknown }).error).toBeInstanceOf(LockUnavailableError);
    expect(pool.waitingCount).toBe(1); // the check-out pgfence gave up on is still queued in the pool

    mine.release(); // the pool hands its connection to pgfence's abandoned check-out, which gives it straight back
    await eventually(() => pool.waitingCount === 0 && pool.idleCount === 1 && pool.totalCount === 1, 5000, 'the late connection to be back in the pool');
    const again = await pool.connect(); // the application gets it
    again.release();

    const lock = await locker.acquire('exhausted:a', { timeoutMs: 5000 }); // and the locker works once the pool has room
    expect(await lock.release()).toBe(true);
  });
});
