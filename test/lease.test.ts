import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocker, InvalidArgumentError, LockLostError, LockTimeoutError, lockKey, type Locker } from '../src/index.js';
import { releaseLeaseSql, renewLeaseSql } from '../src/lease/lease-sql.js';
import { NOTIFY_CHANNEL } from '../src/session/session-sql.js';
import { eventually, sleep, track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
const open = () => track(createLocker({ connectionString: db.url }));
const row = async (name: string) =>
  (await pool.query(`SELECT owner, token::text, data, released_at, expires_at > clock_timestamp() AS live FROM pgfence.leases WHERE key = $1`, [lockKey(name)])).rows[0];

beforeAll(async () => {
  db = await useMigratedDatabase('lease');
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
});
afterAll(async () => {
  await pool.end();
});

describe('leases', () => {
  it('keep owner and JSON data, expire on the database clock, and keep the row after release', async () => {
    const l = await open().lease('lease:data', { owner: 'worker-7', data: { job: 42, tags: ['a'] }, ttlMs: 5000 });
    expect(l.owner).toBe('worker-7');
    expect(l.data).toEqual({ job: 42, tags: ['a'] });
    expect(typeof l.token).toBe('bigint');
    const { rows } = await pool.query(`SELECT $1::timestamptz > clock_timestamp() AS future`, [l.expiresAt]);
    expect(rows[0].future).toBe(true);
    expect(await row('lease:data')).toMatchObject({ owner: 'worker-7', token: String(l.token), data: { job: 42, tags: ['a'] }, live: true });
    expect(await l.release()).toBe(true);
    expect(await l.release()).toBe(false);
    const after = await row('lease:data');
    expect(after.released_at).not.toBeNull();
    expect(after.token).toBe(String(l.token)); // kept: tokens never restart
  });

  it('are renewed automatically past their TTL, and keep others out meanwhile', async () => {
    const holder = open();
    const other = open();
    // TTL 1 s, renewed every ~333 ms: a loaded machine may delay a renewal by a few hundred ms without losing it.
    const l = await holder.lease('lease:renew', { ttlMs: 1000 });
    const firstExpiry = l.expiresAt.getTime();
    await sleep(1600);
    expect(l.signal.aborted).toBe(false);
    expect(l.expiresAt.getTime()).toBeGreaterThan(firstExpiry);
    expect(await other.tryLease('lease:renew')).toBeNull();
    expect(await l.renew()).toBe(true);
    await l.release();
  });

  it("a TTL past Node's timer limit (100 days) is renewed a third of the way, not in a storm (issue 30)", async () => {
    // Node runs a timer longer than 2^31 - 1 ms after 1 ms, warning TimeoutOverflowWarning as it is set.
    const overflows: Error[] = [];
    const onWarning = (w: Error) => {
      if (w.name === 'TimeoutOverflowWarning') overflows.push(w);
    };
    process.on('warning', onWarning);
    try {
      const l = await open().lease('lease:100-days', { ttlMs: 100 * 24 * 3600 * 1000 });
      await new Promise((r) => setImmediate(r)); // the warning is emitted on the next tick
      await sleep(50); // a storm renews every millisecond: dozens of renewals by now
      const { rows } = await pool.query(`SELECT renewed_at = acquired_at AS never_renewed FROM pgfence.leases WHERE key = $1`, [lockKey('lease:100-days')]);
      expect(rows[0].never_renewed).toBe(true);
      expect(overflows).toEqual([]);
      await l.release();
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a holder that lost its lease can neither renew nor release it', async () => {
    const key = lockKey('lease:stolen');
    const old = await open().lease('lease:stolen', { ttlMs: 200, renew: false, owner: 'old' });
    await eventually(async () => !(await row('lease:stolen')).live, 15_000, 'the expiry on the database clock');
    const fresh = await open().lease('lease:stolen', { ttlMs: 10_000, owner: 'new', timeoutMs: 5000 });
    const everything = async () =>
      (await pool.query(`SELECT owner, token::text, acquired_at, renewed_at, expires_at, released_at FROM pgfence.leases WHERE key = $1`, [key])).rows[0];
    const before = await everything();

    // The stale holder's statements themselves, as a paused holder would send them: the database refuses.
    const renewed = (await pool.query(renewLeaseSql, [key, old.token, 60_000])).rows[0];
    expect(renewed).toEqual({ expires_at: null, taken_over: true });
    expect((await pool.query(releaseLeaseSql, [key, old.token, 0])).rows[0].released).toBe(false);
    expect(await everything()).toEqual(before);

    // And through the handle.
    expect(await old.renew()).toBe(false);
    expect(old.signal.aborted).toBe(true);
    expect(old.signal.reason).toBeInstanceOf(LockLostError);
    expect(await old.release()).toBe(false);
    expect(await everything()).toEqual(before);
    expect(await row('lease:stolen')).toMatchObject({ owner: 'new', token: String(fresh.token), released_at: null, live: true });
    await fresh.release();
  });

  it('the holder learns of expiry before anyone else can take the lease', async () => {
    const holder = await open().lease('lease:deadline', { ttlMs: 1500, renew: false });
    const contender = open();
    for (;;) {
      const l = await contender.tryLease('lease:deadline');
      if (l) {
        expect(holder.signal.aborted).toBe(true);
        expect((holder.signal.reason as LockLostError).reason).toBe('lease-expired');
        await l.release();
        break;
      }
      await sleep(10);
    }
  });

  it('a waiter is woken by the release, long before the lease would expire (by the NOTIFY, not a poll)', async () => {
    const key = lockKey('lease:wake');
    // The waiter's locker runs on a pool of ours: we see its lease attempts (on its pinned home session) and
    // the notifications it receives.
    const waiterPool = new pg.Pool({ connectionString: db.url, max: 8 });
    const seen = { notifications: [] as string[], inNotification: false, attempts: 0, answered: 0, grantedInNotification: false };
    waiterPool.on('connect', (client) => {
      // Registered before pgfence's own listener: it runs first within the same dispatch.
      client.on('notification', (msg) => {
        if (msg.channel !== NOTIFY_CHANNEL) return;
        seen.notifications.push(msg.payload!);
        seen.inNotification = true;
        queueMicrotask(() => (seen.inNotification = false));
      });
      const query = client.query.bind(client) as (...a: unknown[]) => Promise<unknown>;
      (client as unknown as { query: (...a: unknown[]) => Promise<unknown> }).query = (...a: unknown[]) => {
        const text = typeof a[0] === 'string' ? a[0] : (a[0] as { text: string }).text;
        if (!text.includes('pgfence.lease_acquire')) return query(...a);
        seen.attempts++;
        // An attempt that starts inside the notification's dispatch was started by the NOTIFY (a poll starts from a timer).
        seen.grantedInNotification = seen.inNotification;
        return query(...a).finally(() => seen.answered++);
      };
    });
    const holder = await open().lease('lease:wake', { ttlMs: 60_000 });
    const waiterLocker = createLocker({ pool: waiterPool });
    try {
      const waiter = waiterLocker.lease('lease:wake', { timeoutMs: 30_000 });
      // Polls back off (50, 100, 200, 400, 800 ms ...): after six answered attempts the next poll is 800 ms off.
      await eventually(() => seen.answered >= 6 && seen.answered === seen.attempts, 15_000, 'the waiter to settle into slow polls');
      const attemptsBefore = seen.attempts;
      await holder.release();
      const l = await waiter;
      expect(seen.notifications).toContain(String(key));
      expect(seen.attempts).toBe(attemptsBefore + 1); // one look, at the wake-up
      expect(seen.grantedInNotification).toBe(true);
      expect(l.token).toBeGreaterThan(holder.token);
      await l.release();
    } finally {
      await waiterLocker.close();
      await waiterPool.end();
    }
  });

  it('reports contention once per waiting request, also for one that waited behind another local waiter', async () => {
    const [holder, other] = [open(), open()];
    const held = await holder.lease('lease:contention', { ttlMs: 30_000 });
    const first = other.lease('lease:contention', { timeoutMs: 300 }).catch((err: unknown) => err);
    await eventually(async () => other.stats().waiting === 1, 15_000, 'the first wait to start');
    // Queued behind the first (contention), then the head once the first has timed out: it finds the lease busy again.
    const second = other.lease('lease:contention', { timeoutMs: 1500 }).catch((err: unknown) => err);
    expect(await first).toBeInstanceOf(LockTimeoutError);
    expect(await second).toBeInstanceOf(LockTimeoutError);
    expect(other.stats()).toMatchObject({ contention: 2, timeouts: 2 });
    await held.release();
  });

  it('close() waits for a release in flight: once it resolves the lease is free and the release says so (found by the exploration, seed 1002)', async () => {
    for (const [i, concurrent] of [1, 4, 16].entries()) {
      const locker = open();
      const names = Array.from({ length: concurrent }, (_, j) => `lease:close-during-release:${i}:${j}`);
      const leases = await Promise.all(names.map((name) => locker.lease(name, { ttlMs: 60_000 })));
      const releasing = leases.map((l) => l.release());
      await locker.close();
      for (const name of names) expect((await row(name)).released_at, `${name} after close()`).not.toBeNull();
      expect(await Promise.all(releasing)).toEqual(leases.map(() => true));
    }
  });

  it('withLease releases after the callback', async () => {
    const locker = open();
    expect(await locker.withLease('lease:with', async (h) => h.token > 0n)).toBe(true);
    const again = await locker.tryLease('lease:with');
    expect(again).not.toBeNull();
    await again!.release();
  });

  it('tryWithLease runs the callback when the lease is free and releases after it; reports a held lease without running it', async () => {
    const locker = open();
    const other = open();
    expect(await locker.tryWithLease('lease:trywith', async (h) => typeof h.token)).toEqual({ acquired: true, value: 'bigint' });
    const held = await other.lease('lease:trywith');
    let ran = false;
    expect(await locker.tryWithLease('lease:trywith', async () => (ran = true))).toEqual({ acquired: false });
    expect(ran).toBe(false);
    await held.release();
    expect(await locker.tryWithLease('lease:trywith', async (h) => (await h.release()) === true)).toEqual({ acquired: true, value: true });
    await expect(locker.tryWithLease('lease:trywith', async () => 1, { timeoutMs: 10 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('leases and the client wall clock', () => {
  const HOUR_MS = 3_600_000;
  /** This process's wall clock (Date) runs `skewMs` off and keeps ticking; timers and performance.now() are untouched. */
  const skewWallClock = (skewMs: number) => vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + skewMs, shouldAdvanceTime: true });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a wall clock an hour ahead loses no lease early: it is renewed and keeps others out', async () => {
    skewWallClock(HOUR_MS);
    const [holder, other] = [open(), open()];
    const l = await holder.lease('lease:clock-ahead', { ttlMs: 1500 });
    const firstExpiry = l.expiresAt.getTime();
    expect(Date.now() - firstExpiry).toBeGreaterThan(HOUR_MS / 2); // by this process's clock the lease expired long ago
    await eventually(() => l.expiresAt.getTime() > firstExpiry || l.signal.aborted, 15_000, 'a renewal (or a loss)');
    expect(l.signal.aborted).toBe(false);
    expect(await other.tryLease('lease:clock-ahead')).toBeNull();
    expect(await l.release()).toBe(true);
  });

  it('a wall clock an hour behind still learns of expiry before anyone else can take the lease', async () => {
    skewWallClock(-HOUR_MS);
    const holder = await open().lease('lease:clock-behind', { ttlMs: 1500, renew: false });
    expect(holder.expiresAt.getTime() - Date.now()).toBeGreaterThan(HOUR_MS / 2); // by this process's clock it has an hour left
    const contender = open();
    let taken: Awaited<ReturnType<Locker['tryLease']>> = null;
    await eventually(async () => (taken = await contender.tryLease('lease:clock-behind')) !== null, 15_000, 'the lease to expire on the database clock');
    expect(holder.signal.aborted).toBe(true);
    expect((holder.signal.reason as LockLostError).reason).toBe('lease-expired');
    await taken!.release();
  });
});

describe('lease arguments', () => {
  let locker: Locker;
  beforeAll(() => {
    locker = open();
  });

  it.each<[string, object]>([
    ['ttlMs 0', { ttlMs: 0 }],
    ['ttlMs negative', { ttlMs: -100 }],
    ['ttlMs NaN', { ttlMs: NaN }],
    ['ttlMs Infinity', { ttlMs: Infinity }],
    ['ttlMs below 100', { ttlMs: 99 }],
    ['ttlMs huge', { ttlMs: 1e15 }],
    ['ttlMs fractional', { ttlMs: 150.5 }],
    ['renew not boolean', { renew: 'yes' }],
    ['empty owner', { owner: '' }],
    ['owner too long', { owner: 'o'.repeat(201) }],
    ['owner not a string', { owner: 7 }],
    ['data with a bigint', { data: { n: 1n } }],
    ['data that is a function', { data: () => 1 }],
    ['timeoutMs negative', { timeoutMs: -1 }],
    ['signal not a signal', { signal: {} }],
  ])('refuse %s before any I/O', async (_label, opts) => {
    await expect(locker.lease('lease:bad', opts as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('tryLease refuses a timeout', async () => {
    await expect(locker.tryLease('lease:bad', { timeoutMs: 10 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('wrote nothing for any of them', async () => {
    expect(await row('lease:bad')).toBeUndefined();
  });
});

describe('what a lease cycle costs', () => {
  it('acquire+release: at most two commits and no Parse per cycle (statements prepared once per connection)', async () => {
    const quiet = await useMigratedDatabase('lease_cost');
    // Another database's connection reads the counters: its own statements do not count.
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      const c = new pg.Client({ connectionString: quiet.url });
      await c.connect();
      // Nothing but the locker commits in that database.
      await c.query(`ALTER TABLE pgfence.leases SET (autovacuum_enabled = false); ALTER TABLE pgfence.fencing_tokens SET (autovacuum_enabled = false)`);
      await c.end();
      const backends = async () =>
        (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1`, [quiet.name])).rows[0]!.n;
      // A backend flushes its statistics as it exits, before it leaves pg_stat_activity.
      const commits = async () => {
        await eventually(async () => (await backends()) === 0, 15_000, 'the database to have no connections');
        return Number((await admin.query(`SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, [quiet.name])).rows[0].xact_commit);
      };
      const cycles = async (locker: Locker, n: number) => {
        for (let i = 0; i < n; i++) {
          const l = await locker.lease('lease:cost', { ttlMs: 30_000, renew: false });
          expect(await l.release()).toBe(true);
        }
      };
      const N = 40;
      const parse = pg.Connection.prototype.parse;
      let parsed = 0;
      const counts: number[] = [];
      for (const n of [0, N]) {
        const start = await commits();
        const locker = createLocker({ connectionString: quiet.url });
        await cycles(locker, 3); // connections, prepared statements, the name registry
        pg.Connection.prototype.parse = function counted(this: pg.Connection, ...args: unknown[]) {
          parsed++;
          return (parse as (...a: unknown[]) => unknown).apply(this, args);
        } as typeof parse;
        try {
          await cycles(locker, n);
        } finally {
          pg.Connection.prototype.parse = parse;
        }
        await locker.close();
        counts.push((await commits()) - start);
      }
      expect(parsed).toBe(0);
      // The same locker's lifetime with and without N more cycles.
      expect(counts[1]! - counts[0]!).toBeLessThanOrEqual(2 * N);
    } finally {
      await admin.end();
    }
  });
});
