import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError, LockBudgetError, LockTableFullError, lockKey, type LockHandle } from '../src/index.js';
import { capabilityMissing } from './support/capability.js';
import { appName, eventually, queryOnce, track, useTestDatabase } from './support/db.js';
import { type PrivateCluster, privateClusterUnavailable, startPrivateCluster } from './support/cluster.js';

let db: Awaited<ReturnType<typeof useTestDatabase>>;

beforeAll(async () => {
  db = await useTestDatabase('lock_budget');
});

async function advisoryLocksOf(url: string, app: string): Promise<number> {
  const rows = await queryOnce<{ n: number }>(
    url,
    `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND a.application_name = $1`,
    [app],
  );
  return rows[0]!.n;
}

async function connectsAndAnswers(url: string): Promise<boolean> {
  return (await queryOnce<{ one: number }>(url, 'SELECT 1 AS one'))[0]!.one === 1;
}

describe('maxHeldLocks', () => {
  it('refuses acquisitions past the budget before touching the server, and admits again after a release', async () => {
    const app = appName('budget');
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), maxHeldLocks: 3 }));
    const a = await locker.acquire('budget:a');
    const b = await locker.acquire('budget:b', { mode: 'shared' });
    const c = await locker.acquire('budget:c');
    expect(await advisoryLocksOf(db.url, app)).toBe(3);

    const refused = await locker.acquire('budget:d').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockBudgetError);
    expect(refused).toMatchObject({ code: 'PGFENCE_LOCK_BUDGET', maxHeldLocks: 3, lockName: 'budget:d' });
    await expect(locker.tryAcquire('budget:d')).rejects.toMatchObject({ code: 'PGFENCE_LOCK_BUDGET' });
    await expect(locker.semaphore('budget:sem', { permits: 2 }).tryAcquire()).rejects.toMatchObject({ code: 'PGFENCE_LOCK_BUDGET' });
    expect(await advisoryLocksOf(db.url, app)).toBe(3); // nothing reached the server
    expect(await connectsAndAnswers(db.url)).toBe(true);

    await a.release();
    // acquireAll asks for all its keys at once: two do not fit in the one free slot, and none is taken.
    await expect(locker.acquireAll(['budget:x', 'budget:y'])).rejects.toMatchObject({ code: 'PGFENCE_LOCK_BUDGET' });
    expect(await advisoryLocksOf(db.url, app)).toBe(2);
    const d = await locker.acquire('budget:d');
    for (const h of [b, c, d]) await h.release();
    expect(locker.stats().held).toBe(0);
  });

  it("counts an acquireAll's whole set while it is in flight: other acquires cannot take the keys it still needs (issue 30)", async () => {
    const app = appName('budget-all');
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), maxHeldLocks: 6 }));
    const names = Array.from({ length: 6 }, (_, i) => `budget-all:${i}`);
    // The set's lowest key is held elsewhere: acquireAll gives back what it took past it and waits for it,
    // holding nothing — yet it will take all six once that key is free.
    const lowest = [...names].sort((a, b) => (lockKey(a) < lockKey(b) ? -1 : 1))[0]!;
    const blocker = track(createLocker({ connectionString: db.url }));
    const held = await blocker.acquire(lowest);
    const all = locker.acquireAll(names, { timeoutMs: 20_000 });
    all.catch(() => {}); // awaited below; a failed assertion before that must not leave it unhandled
    const grantedTo = async () =>
      (await queryOnce<{ n: number }>(db.url, `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, [app]))[0]!.n;
    await eventually(async () => locker.stats().waiting === 1 && (await grantedTo()) === 0);
    const other = await locker.acquire('budget-all:other').catch((e: unknown) => e);
    expect(other, 'refused: the set in flight takes the whole budget').toBeInstanceOf(LockBudgetError);
    await held.release();
    const set = await all;
    expect(await advisoryLocksOf(db.url, app)).toBe(6);
    await set.release();
  });

  it('rejects a bad maxHeldLocks before any I/O', () => {
    for (const bad of [0, -1, 1.5, Number.NaN, Infinity, '10', null]) {
      expect(() => createLocker({ connectionString: db.url, maxHeldLocks: bad as number })).toThrow(InvalidArgumentError);
    }
  });
});

/** A server with a tiny lock table (it must never be the shared test server: a full table fails everyone's connections). */
const skipped = capabilityMissing('LOCK-TABLE TESTS', privateClusterUnavailable(), 'they start a PostgreSQL of their own');

describe.skipIf(skipped)("the server's lock table", () => {
  let cluster: PrivateCluster;
  // 10 x (20 + 0) = 200 lock slots by the formula (the server allocates a little more: some slack).
  beforeAll(async () => {
    cluster = await startPrivateCluster({ settings: { max_locks_per_transaction: 10, max_connections: 20 } });
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
  }, 60_000);

  it("the default budget is a quarter of the server's lock table", async () => {
    const locker = track(createLocker({ connectionString: cluster.url }));
    const handles = await Promise.all(Array.from({ length: 50 }, (_, i) => locker.acquire(`table:default:${i}`)));
    await expect(locker.tryAcquire('table:default:50')).rejects.toMatchObject({ code: 'PGFENCE_LOCK_BUDGET', maxHeldLocks: 50 });
    expect(await connectsAndAnswers(cluster.url)).toBe(true);
    await Promise.all(handles.map((h) => h.release()));
    await locker.close();
  });

  it('a full table is PGFENCE_LOCK_TABLE_FULL (never UNAVAILABLE), and the failed batch leaves nothing taken', async () => {
    const app = appName('table_full');
    const url = `${cluster.url}?application_name=${app}`;
    const locker = track(createLocker({ connectionString: url, maxHeldLocks: 1_000_000, maxSessions: 1 }));
    const results = await Promise.allSettled(Array.from({ length: 3000 }, (_, i) => locker.tryAcquire(`table:full:${i}`)));
    const granted = results.flatMap((r) => (r.status === 'fulfilled' && r.value ? [r.value as LockHandle] : []));
    const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as Error] : []));
    expect(errors.length).toBeGreaterThan(0);
    for (const err of errors) expect(err).toBeInstanceOf(LockTableFullError);
    expect(errors[0]!.message).toMatch(/max_locks_per_transaction/);
    // What the failed statement half-took was given back: the server holds exactly the granted handles.
    expect(await advisoryLocksOf(cluster.url, app)).toBe(granted.length);
    expect(locker.stats().held).toBe(granted.length);
    await Promise.all(granted.map((h) => h.release()));
    expect(await advisoryLocksOf(cluster.url, app)).toBe(0);
    // The session survived and the server serves everyone again.
    const again = await locker.acquire('table:full:again');
    await again.release();
    expect(await connectsAndAnswers(cluster.url)).toBe(true);
    await locker.close();
  });
});

describe.skipIf(skipped)('the server-wide lock-table guard', () => {
  let cluster: PrivateCluster;
  // 10 x (40 + 0) = 400 by the formula: pgfence's lockers together keep under three quarters of it (300).
  beforeAll(async () => {
    cluster = await startPrivateCluster({ settings: { max_locks_per_transaction: 10, max_connections: 40 } });
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
  }, 60_000);

  it('an acquireAll it refuses rejects with LockTableFullError, and nothing is left unhandled', async () => {
    const filler = new pg.Client({ connectionString: cluster.url });
    await filler.connect();
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      // The guard's whole share (300 of 400) is taken by another application's session locks.
      await filler.query('SELECT count(pg_advisory_lock(-k)) FROM generate_series(1, 300) AS k');
      const locker = track(createLocker({ connectionString: cluster.url, maxHeldLocks: 1000 }));
      // Connected first: the guard learns the lock table (and samples it) with the first session.
      await (await locker.acquire('full:warm')).release();
      const err = await locker.acquireAll(['full:a', 'full:b', 'full:c']).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LockTableFullError);
      // A rejection nobody handled is reported as the microtask queue drains: two turns of the event loop see it.
      for (let turn = 0; turn < 2; turn++) await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
      await locker.close();
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await filler.end();
    }
  });

  it("12 lockers taking all they can never fill the server's lock table: another application's 250 locks never fail", async () => {
    const app = appName('guard');
    const url = `${cluster.url}?application_name=${app}`;
    const lockers = Array.from({ length: 12 }, () => track(createLocker({ connectionString: url, maxSessions: 1, maxHeldLocks: 1000 })));
    // Another application: transactions that each need 250 slots of the shared lock table.
    const other = new pg.Client({ connectionString: cluster.url });
    await other.connect();
    const otherErrors: unknown[] = [];
    let otherRuns = 0;
    let lockersDone = false;
    const otherApp = (async () => {
      while (!lockersDone || otherRuns < 3) {
        try {
          await other.query('BEGIN');
          await other.query('SELECT count(pg_advisory_xact_lock(-k)) FROM generate_series(1, 250) AS k');
          await other.query('COMMIT');
          otherRuns++;
        } catch (err) {
          otherErrors.push(err);
          await other.query('ROLLBACK').catch(() => {}); // the error is what the test reports
        }
      }
    })();
    const refusals: unknown[] = [];
    const held: LockHandle[] = [];
    await Promise.all(
      lockers.flatMap((locker, l) =>
        Array.from({ length: 4 }, async (_, w) => {
          for (let i = 0; i < 300; i++) {
            try {
              const h = await locker.tryAcquire(`guard:${l}:${w}:${i}`);
              if (h) held.push(h);
            } catch (err) {
              // Refused: try again (a lock the other application lets go of would otherwise be taken).
              refusals.push(err);
            }
          }
        }),
      ),
    );
    lockersDone = true;
    await otherApp;
    await other.end();
    expect(otherErrors).toEqual([]);
    // Every refusal is typed: the guard's (or a locker's own budget).
    for (const err of refusals) expect(['PGFENCE_LOCK_TABLE_FULL', 'PGFENCE_LOCK_BUDGET']).toContain((err as { code?: string }).code);
    expect(refusals.some((e) => (e as LockTableFullError).guard)).toBe(true);
    expect(await advisoryLocksOf(cluster.url, app)).toBe(held.length);
    // Under three quarters of the table (300), give or take what lockers growing at the same moment take
    // between two samples (docs/sizing.md states 15%).
    expect(held.length).toBeLessThanOrEqual(345);
    expect(held.length).toBeGreaterThan(150); // the guard refuses near its share, not long before
    await Promise.all(held.map((h) => h.release()));
  }, 120_000);
});
