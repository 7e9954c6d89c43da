import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLocker,
  LockLostError,
  LockTimeoutError,
  NestedLockError,
  type AcquiredEvent,
  type ReleasedEvent,
  type TimeoutEvent,
} from '../src/index.js';
import { appName, eventually, killBackends, track, useTestDatabase } from './support/db.js';
import { capturingLogger } from './support/log.js';

let db: Awaited<ReturnType<typeof useTestDatabase>>;
let admin: pg.Client;
const open = (opts: Partial<Parameters<typeof createLocker>[0]> = {}) => track(createLocker({ connectionString: db.url, ...opts }));

beforeAll(async () => {
  db = await useTestDatabase('locker');
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
});
afterAll(async () => {
  await admin.end();
});

async function advisoryWaitsOf(applicationName: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
      WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1`,
    [applicationName],
  );
  return rows[0]!.n;
}

async function advisoryLocksOf(applicationName: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
      WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND a.application_name = $1`,
    [applicationName],
  );
  return rows[0]!.n;
}

describe('handles', () => {
  it('release is idempotent and reports whether it released', async () => {
    const locker = open();
    const h = await locker.acquire('h:idempotent');
    expect(h.name).toBe('h:idempotent');
    expect(h.mode).toBe('exclusive');
    expect(h.token).toBeNull();
    expect(h.acquiredAt).toBeInstanceOf(Date);
    expect(await h.release()).toBe(true);
    expect(await h.release()).toBe(false);
    expect(h.signal.aborted).toBe(false);
  });

  it('await using releases at the end of the scope', async () => {
    const locker = open();
    const other = open();
    {
      await using h = await locker.acquire('h:using');
      expect(h.key).toBeTypeOf('bigint');
      expect(await other.tryAcquire('h:using')).toBeNull();
    }
    const again = await other.tryAcquire('h:using');
    expect(again).not.toBeNull();
    await again!.release();
  });

  it('explicit keys work as bigint and safe integer', async () => {
    const locker = open();
    const h = await locker.acquire(123456789012345678n);
    expect(h.key).toBe(123456789012345678n);
    expect(h.name).toBeNull();
    expect(await locker.tryAcquire(123456789012345678n)).toBeNull();
    await h.release();
    const n = await locker.acquire(-42);
    expect(n.key).toBe(-42n);
    await n.release();
  });

  it('ttlMs bounds the hold: the lock goes back and the signal aborts', async () => {
    const locker = open();
    const other = open();
    const h = await locker.acquire('h:ttl', { ttlMs: 150 });
    expect(await other.tryAcquire('h:ttl')).toBeNull();
    const next = await other.acquire('h:ttl', { timeoutMs: 10_000 });
    expect(h.signal.aborted).toBe(true);
    expect((h.signal.reason as LockLostError).reason).toBe('ttl-expired');
    expect(await h.release()).toBe(false);
    await next.release();
  });
});

describe('one locker', () => {
  it('never hands one key to two handles (advisory re-entrancy does not leak)', async () => {
    const locker = open();
    const h = await locker.acquire('one:reentrant');
    expect(await locker.tryAcquire('one:reentrant')).toBeNull();
    const second = locker.acquire('one:reentrant', { timeoutMs: 10_000 });
    await eventually(() => locker.stats().waiting === 1, 15_000, 'the second request to wait');
    await h.release();
    const h2 = await second;
    // One server-side hold, whoever held it locally.
    expect(await h2.release()).toBe(true);
    const other = open();
    const free = await other.tryAcquire('one:reentrant');
    expect(free).not.toBeNull();
    await free!.release();
  });

  it('shares one server hold among local shared holders', async () => {
    const locker = open();
    const other = open();
    const r1 = await locker.acquire('one:shared', { mode: 'shared' });
    const r2 = await locker.acquire('one:shared', { mode: 'shared' });
    expect(await other.tryAcquire('one:shared')).toBeNull();
    await r1.release();
    expect(await other.tryAcquire('one:shared')).toBeNull(); // r2 still holds it
    await r2.release();
    const w = await other.tryAcquire('one:shared');
    expect(w).not.toBeNull();
    await w!.release();
  });

  it('multiplexes 500 held locks over at most maxSessions sessions', async () => {
    const app = appName('mux');
    const locker = open({ connectionString: db.urlWith({ application_name: app }), maxSessions: 2 });
    const handles = await Promise.all(Array.from({ length: 500 }, (_, i) => locker.acquire(`mux:${i}`)));
    expect(await advisoryLocksOf(app)).toBe(500);
    // The backends that hold them (the pool's short-statement connection, say for the name registry, holds none).
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(DISTINCT l.pid)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
        WHERE l.locktype = 'advisory' AND a.application_name = $1`,
      [app],
    );
    expect(rows[0]!.n).toBeLessThanOrEqual(2);
    expect(locker.stats().held).toBe(500);
    await Promise.all(handles.map((h) => h.release()));
    expect(await advisoryLocksOf(app)).toBe(0);
  });

  it('a grant that lands as the wait times out is given back, never leaked', async () => {
    const app = appName('race');
    const locker = open({ connectionString: db.urlWith({ application_name: app }) });
    // Connect both sessions first: a timeout while still connecting is LockUnavailableError, not the race under test.
    await Promise.all(Array.from({ length: 7 }, async (_, i) => (await locker.acquire(`race:${i}`)).release()));
    const results = await Promise.allSettled(
      Array.from({ length: 300 }, (_, i) => locker.acquire(`race:${i % 7}`, { timeoutMs: 1 + (i % 3) })),
    );
    await Promise.all(results.map((r) => (r.status === 'fulfilled' ? r.value.release() : undefined)));
    expect(results.some((r) => r.status === 'rejected' && r.reason instanceof LockTimeoutError)).toBe(true);
    expect(results.every((r) => r.status === 'fulfilled' || r.reason instanceof LockTimeoutError)).toBe(true);
    await eventually(async () => (await advisoryLocksOf(app)) === 0, 10_000, 'every lock to be given back');
    expect(locker.stats().held).toBe(0);
    expect(locker.stats().waiting).toBe(0);
  });

  it('close() releases everything at once for others', async () => {
    const locker = createLocker({ connectionString: db.url });
    const other = open();
    const h = await locker.acquire('close:held');
    const waiting = other.acquire('close:held', { timeoutMs: 10_000 });
    await locker.close();
    const taken = await waiting;
    expect(await h.release()).toBe(false);
    await taken.release();
    await expect(locker.acquire('close:after')).rejects.toThrow(/closed/);
  });
});

describe('a busy lock is not an unreachable database', () => {
  it('a short timeout on a busy key is LockTimeoutError (tryAcquire: null), even before the locker has connected', async () => {
    const holder = open();
    const h = await holder.acquire('busy:short');
    try {
      for (const timeoutMs of [1, 1, 1, 5, 20]) {
        const fresh = createLocker({ connectionString: db.url });
        try {
          const err = await fresh.acquire('busy:short', { timeoutMs }).catch((e: unknown) => e);
          expect(err, `timeoutMs ${timeoutMs}: ${String(err)}`).toBeInstanceOf(LockTimeoutError);
        } finally {
          await fresh.close();
        }
      }
      // A locker whose sessions are up, but whose waiter session is not connected yet.
      const warm = open();
      await (await warm.acquire('busy:warm-up')).release();
      for (let i = 0; i < 3; i++) {
        const err = await warm.acquire('busy:short', { timeoutMs: 1 }).catch((e: unknown) => e);
        expect(err, String(err)).toBeInstanceOf(LockTimeoutError);
      }
      const fresh = createLocker({ connectionString: db.url });
      try {
        expect(await fresh.tryAcquire('busy:short')).toBeNull();
      } finally {
        await fresh.close();
      }
    } finally {
      await h.release();
    }
  });

  it('a short timeout on a free key before the locker has connected is not reported as unreachable', async () => {
    const fresh = createLocker({ connectionString: db.url });
    try {
      const outcome = await fresh.acquire('free:short', { timeoutMs: 1 }).catch((e: unknown) => e);
      expect(outcome instanceof LockTimeoutError || (outcome as { key?: unknown }).key !== undefined, String(outcome)).toBe(true);
      if (!(outcome instanceof Error)) await (outcome as { release(): Promise<boolean> }).release();
    } finally {
      await fresh.close();
    }
  });
});

describe('logging of close', () => {
  it('a normal close() is not a loss: logged at debug, no warning', async () => {
    const { entries, logger } = capturingLogger();
    const locker = createLocker({ connectionString: db.url, logger });
    const other = open();
    // Open every kind of connection: the sessions, the waiter session, the release listener.
    const held = await Promise.all([locker.acquire('log:close:1'), locker.acquire('log:close:2')]);
    const busy = await other.acquire('log:close:3');
    const waiting = locker.acquire('log:close:3', { timeoutMs: 30_000 }).catch((err: unknown) => err);
    await eventually(() => locker.stats().waiting === 1, 15_000, 'the wait to start');
    await busy.release();
    const h3 = await waiting;
    await locker.close();
    expect(held.every((h) => h.signal.aborted === false)).toBe(true);
    expect((h3 as { signal: AbortSignal }).signal.aborted).toBe(false);
    expect(entries.filter((e) => e.level === 'warn' || e.level === 'error')).toEqual([]);
    expect(entries.some((e) => e.level === 'debug' && /session closed/.test(e.msg))).toBe(true);
  });

  it('a real loss is still a warning', async () => {
    const { entries, logger } = capturingLogger();
    const app = appName('logloss');
    const locker = open({ connectionString: db.urlWith({ application_name: app }), logger });
    const h = await locker.acquire('log:loss');
    await killBackends(db.url, app);
    await eventually(() => h.signal.aborted, 15_000, 'the loss');
    expect(entries.some((e) => e.level === 'warn' && /session lost/.test(e.msg))).toBe(true);
  });
});

describe('callbacks', () => {
  it('withLock releases when the callback throws', async () => {
    const locker = open();
    await expect(
      locker.withLock('cb:throws', async () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    const h = await locker.tryAcquire('cb:throws');
    expect(h).not.toBeNull();
    await h!.release();
  });

  it('nested acquisition inside a callback is refused unless allowNested', async () => {
    const locker = open();
    await locker.withLock('cb:outer', async () => {
      await expect(locker.acquire('cb:inner')).rejects.toBeInstanceOf(NestedLockError);
      await expect(locker.withLock('cb:inner', async () => 1)).rejects.toBeInstanceOf(NestedLockError);
      const inner = await locker.acquire('cb:inner', { allowNested: true });
      await inner.release();
    });
    // Outside the callback, all is normal again.
    const h = await locker.acquire('cb:inner');
    await h.release();
  });

  it('tryWithLock reports a busy lock without running the callback', async () => {
    const locker = open();
    const other = open();
    const h = await locker.acquire('cb:try');
    let ran = false;
    expect(await other.tryWithLock('cb:try', async () => (ran = true))).toEqual({ acquired: false });
    expect(ran).toBe(false);
    await h.release();
    expect(await other.tryWithLock('cb:try', async () => 'v')).toEqual({ acquired: true, value: 'v' });
  });
});

describe('acquireAll', () => {
  it('takes all keys, or none', async () => {
    const locker = open();
    const other = open();
    const blocker = await other.acquire('all:c');
    await expect(locker.acquireAll(['all:a', 'all:b', 'all:c'], { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    // Nothing was kept from the failed attempt.
    for (const n of ['all:a', 'all:b']) {
      const h = await other.tryAcquire(n);
      expect(h, n).not.toBeNull();
      await h!.release();
    }
    await blocker.release();
    const all = await locker.acquireAll(['all:c', 'all:a', 'all:b', 'all:a']);
    expect(all.handles).toHaveLength(3);
    const keys = all.handles.map((h) => h.key);
    expect([...keys].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0))).toEqual(keys); // canonical order
    expect(await other.tryAcquire('all:b')).toBeNull();
    expect(await all.release()).toBe(true);
    const b = await other.tryAcquire('all:b');
    expect(b).not.toBeNull();
    await b!.release();
  });

  it('two callers with opposite orders never deadlock', async () => {
    const l1 = open();
    const l2 = open();
    let done = 0;
    await Promise.all([
      (async () => {
        for (let i = 0; i < 20; i++) await (await l1.acquireAll(['dl:x', 'dl:y'], { timeoutMs: 20_000 })).release().then(() => done++);
      })(),
      (async () => {
        for (let i = 0; i < 20; i++) await (await l2.acquireAll(['dl:y', 'dl:x'], { timeoutMs: 20_000 })).release().then(() => done++);
      })(),
    ]);
    expect(done).toBe(40);
  });
});

describe('events', () => {
  it('reports acquired, contention, timeout and released with durations', async () => {
    const locker = open();
    const other = open();
    const events: string[] = [];
    const acquired: AcquiredEvent[] = [];
    const released: ReleasedEvent[] = [];
    const timeouts: TimeoutEvent[] = [];
    other.on('acquired', (e: AcquiredEvent) => (events.push('acquired'), acquired.push(e)));
    other.on('released', (e: ReleasedEvent) => (events.push('released'), released.push(e)));
    other.on('timeout', (e: TimeoutEvent) => (events.push('timeout'), timeouts.push(e)));
    other.on('contention', () => events.push('contention'));
    const h = await locker.acquire('ev:busy');
    // Long enough for a fresh locker's first answer (busy) to come back under load: it reports contention, then times out.
    await expect(other.acquire('ev:busy', { timeoutMs: 2000 })).rejects.toBeInstanceOf(LockTimeoutError);
    await h.release();
    const mine = await other.acquire('ev:busy');
    await mine.release();
    expect(events).toEqual(['contention', 'timeout', 'acquired', 'released']);
    expect(timeouts[0]!.name).toBe('ev:busy');
    expect(timeouts[0]!.waitMs).toBeGreaterThan(0);
    expect(acquired[0]!.key).toBe(mine.key);
    expect(released[0]!.holdMs).toBeGreaterThanOrEqual(0);
    expect(other.stats()).toMatchObject({ acquired: 1, released: 1, timeouts: 1, contention: 1, held: 0, waiting: 0 });
  });
});

describe('waiting', () => {
  it('a wait on one key never holds up a wait on another (one waiter session, the rest announced)', async () => {
    const holder = open();
    const waiter = open();
    const [k1, k2, k3] = await Promise.all([holder.acquire('wait:1'), holder.acquire('wait:2'), holder.acquire('wait:3')]);
    const got: string[] = [];
    const waits = ['wait:1', 'wait:2', 'wait:3'].map((n) =>
      waiter.acquire(n, { timeoutMs: 30_000 }).then(async (h) => {
        got.push(n);
        await h.release();
      }),
    );
    await eventually(() => waiter.stats().waiting === 3, 15_000, 'all three to wait');
    await k3.release();
    await eventually(() => got.includes('wait:3'), 15_000, 'the third key');
    await k2.release();
    await eventually(() => got.includes('wait:2'), 15_000, 'the second key');
    expect(got).toEqual(['wait:3', 'wait:2']); // the first key is still held elsewhere
    await k1.release();
    await Promise.all(waits);
    expect(got).toEqual(['wait:3', 'wait:2', 'wait:1']);
  });
});

describe('an unbounded wait', () => {
  it('timeoutMs: Infinity waits on the waiter session without a timer storm, and gets the lock once it is free', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const holder = open();
      const waiter = open();
      const h = await holder.acquire('wait:infinite');
      const waiting = waiter.acquire('wait:infinite', { timeoutMs: Infinity });
      await eventually(() => waiter.stats().waiting === 1, 15_000, 'the wait to start');
      await new Promise((r) => setTimeout(r, 200)); // time for a storm of 1 ms timers to show
      await h.release();
      await (await waiting).release();
      expect(warnings.filter((w) => w === 'TimeoutOverflowWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a bounded wait longer than lock_timeout can say (2^31-1 ms, ~24.8 days) blocks, and gets the lock once it is free', async () => {
    const app = appName('long-wait');
    const holder = open();
    const waiter = open({ connectionString: db.urlWith({ application_name: app }) });
    const h = await holder.acquire('wait:thirty-days');
    const waiting = waiter.acquire('wait:thirty-days', { timeoutMs: 30 * 24 * 3600 * 1000 });
    const outcome = waiting.then(
      () => 'granted',
      (err: Error) => `failed: ${err.message}`,
    );
    const settled = async () => (await Promise.race([outcome, 'pending'])) !== 'pending';
    await eventually(async () => (await advisoryWaitsOf(app)) === 1 || (await settled()), 15_000, 'the wait to block in PostgreSQL');
    await h.release();
    expect(await outcome).toBe('granted');
    await (await waiting).release();
  });
});

describe('a pool of the caller', () => {
  it("works on a pool in pg's pipeline mode: grants, busy tries, batches and blocking waits", async () => {
    // pg >= 8.23 refuses any submittable but its own Query on a pipelined client: the locker must not depend on one.
    const pool = new pg.Pool({ connectionString: db.url, max: 10, pipeline: true } as pg.PoolConfig);
    pool.on('error', () => {});
    const other = track(createLocker({ connectionString: db.url }));
    const locker = createLocker({ pool, maxSessions: 2 });
    try {
      const held = await locker.acquire('pipe:a', { timeoutMs: 5_000 });
      expect(await other.tryAcquire('pipe:a')).toBeNull();
      const many = await Promise.all(Array.from({ length: 20 }, (_, i) => locker.acquire(`pipe:${i}`, { timeoutMs: 5_000 })));
      await Promise.all(many.map((h) => h.release()));
      const busy = await other.acquire('pipe:b');
      const waiting = locker.acquire('pipe:b', { timeoutMs: 10_000 });
      await eventually(() => locker.stats().waiting === 1, 5_000, 'the wait');
      await busy.release();
      await (await waiting).release();
      expect(await held.release()).toBe(true);
    } finally {
      await locker.close();
      await pool.end();
    }
  });

  it('leaves no timer behind per statement on a pool with query_timeout', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 10, query_timeout: 60_000 });
    pool.on('error', () => {});
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    try {
      const locker = createLocker({ pool, maxSessions: 1 });
      await (await locker.acquire('qt:warm')).release();
      const before = timers();
      for (let i = 0; i < 200; i++) await (await locker.acquire('qt:cycle')).release();
      // 400 statements: each would leave its 60 s read-timeout timer pending if it was never told the query ended.
      expect(timers() - before).toBeLessThan(20);
      await locker.close();
    } finally {
      await pool.end();
    }
  });

  it('pins its sessions from it for the locker’s lifetime, and leaves the pool open', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 10 });
    // As any pool's owner must: an idle client whose backend ends (the file's database is dropped) emits here.
    pool.on('error', () => {});
    try {
      const locker = createLocker({ pool, maxSessions: 2 });
      const handles = await Promise.all(Array.from({ length: 20 }, (_, i) => locker.acquire(`pool:${i}`)));
      expect(pool.totalCount).toBeGreaterThanOrEqual(1);
      // Checked out: the sessions (maxSessions) and the waiter session, opened together with the first session.
      expect(pool.totalCount - pool.idleCount).toBeLessThanOrEqual(2 + 1);
      await Promise.all(handles.map((h) => h.release()));
      await locker.close();
      expect((await pool.query('SELECT 1 AS ok')).rows[0].ok).toBe(1); // still usable by its owner
      expect(pool.totalCount - pool.idleCount).toBe(0); // every pinned client went back (destroyed)
    } finally {
      await pool.end();
    }
  });
});
