/**
 * How many backends one locker keeps, state by state (DESIGN "Connections", issue 21 item 1): counted
 * in pg_stat_activity by the locker's own application_name.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type LockHandle, type Locker } from '../src/index.js';
import { appName, eventually, sleep, track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let admin: pg.Client;

beforeAll(async () => {
  db = await useMigratedDatabase('footprint');
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
});
afterAll(async () => {
  await admin.end();
});

async function backendsOf(app: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [app]);
  return rows[0]!.n;
}

/** The count once it reaches `target`, or whatever it is when `boundMs` has passed (a generous bound: the table shows it). */
async function settled(app: string, target: number, boundMs = 10_000): Promise<number> {
  let n = -1;
  await eventually(async () => (n = await backendsOf(app)) === target, boundMs, `${target} backends`).catch(() => {});
  return n;
}

/** Resolves once `app` has a backend blocked on an advisory lock (a wait inside PostgreSQL's queue). */
async function blockedIn(app: string): Promise<void> {
  await eventually(async () => {
    const { rows } = await admin.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`, [app]);
    return rows.length > 0;
  }, 15_000, 'a wait blocked in PostgreSQL');
}

describe('connections per locker', () => {
  it('0 at creation, 1 while holding any mix, at most 2 while waiting, back to 1 after the last wait', async () => {
    const keepaliveMs = 100;
    const app = appName('footprint');
    const other = track(createLocker({ connectionString: db.url }));
    const locker: Locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), keepaliveMs }));
    const table: [string, number][] = [];
    const row = (moment: string, n: number) => table.push([moment, n]);

    row('after createLocker', await backendsOf(app));

    await (await locker.acquire('fp:one')).release();
    row('after one uncontended acquire+release', await backendsOf(app));

    const busy = await other.acquire('fp:busy');
    const waiting = locker.acquire('fp:busy', { timeoutMs: 60_000 });
    await blockedIn(app);
    row('waiting for a busy lock', await backendsOf(app));
    await busy.release();
    await (await waiting).release();
    row('within two keepalive periods after the wait', await settled(app, 1, 20 * keepaliveMs));

    const lease = await locker.lease('fp:lease', { ttlMs: 30_000 });
    row('holding one lease', await settled(app, 1));

    const lock = await locker.acquire('fp:lock');
    const permit = await locker.semaphore('fp:sem', { permits: 2 }).acquire();
    const election = locker.leader('fp:leader', { ttlMs: 30_000 });
    await election.whenElected();
    row('holding a lock, a lease, a permit and leadership', await settled(app, 1));

    const leading = other.leader('fp:other-leader', { ttlMs: 30_000 });
    await leading.whenElected();
    const candidate = locker.leader('fp:other-leader', { ttlMs: 30_000 });
    await eventually(() => locker.stats().waiting >= 1, 15_000, 'the candidate to wait');
    row('a leader candidate waiting behind another leader', await settled(app, 1));

    const otherLease = await other.lease('fp:busy-lease', { ttlMs: 30_000 });
    const leaseWait = locker.lease('fp:busy-lease', { ttlMs: 30_000, timeoutMs: 60_000 });
    await eventually(() => locker.stats().waiting >= 2, 15_000, 'the lease to wait');
    row('waiting for a busy lease', await settled(app, 1));
    await otherLease.release();
    const gotLease = await leaseWait;

    await candidate.resign();
    await leading.resign();
    for (const h of [gotLease, lease, lock, permit] as LockHandle[]) await h.release();
    await election.resign();
    row('after everything was released', await settled(app, 1, 20 * keepaliveMs));

    console.log(`connections of one locker (keepaliveMs ${keepaliveMs}):\n${table.map(([m, n]) => `| ${m} | ${n} |`).join('\n')}`);
    expect(table).toEqual([
      ['after createLocker', 0],
      ['after one uncontended acquire+release', 1],
      ['waiting for a busy lock', 2],
      ['within two keepalive periods after the wait', 1],
      ['holding one lease', 1],
      ['holding a lock, a lease, a permit and leadership', 1],
      ['a leader candidate waiting behind another leader', 1],
      ['waiting for a busy lease', 1],
      ['after everything was released', 1],
    ]);
  });
});

describe('closing what is no longer needed', () => {
  it('a lock granted on the waiter session: home moves there, and the locker is back to one connection while it holds it', async () => {
    const keepaliveMs = 100;
    const app = appName('fp-promote');
    const other = track(createLocker({ connectionString: db.url }));
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), keepaliveMs }));
    const busy = await other.acquire('fp:promote');
    const waiting = locker.acquire('fp:promote', { timeoutMs: 60_000 });
    await blockedIn(app);
    expect(await backendsOf(app)).toBe(2);
    await busy.release();
    const held = await waiting;
    // Granted on the waiter session; the session that tried first holds nothing and closes.
    expect(await settled(app, 1, 20 * keepaliveMs)).toBe(1);
    expect(held.signal.aborted).toBe(false);
    expect(await other.tryAcquire('fp:promote')).toBeNull(); // still held, on the one backend left
    // That backend is home now: a lease and a second contended wait work as before.
    const lease = await locker.lease('fp:promote-lease', { ttlMs: 30_000 });
    const busy2 = await other.acquire('fp:promote-2');
    const waiting2 = locker.acquire('fp:promote-2', { timeoutMs: 60_000 });
    await eventually(() => locker.stats().waiting === 1, 15_000, 'the second wait');
    await busy2.release();
    const held2 = await waiting2;
    expect(await held.release()).toBe(true);
    expect(await held2.release()).toBe(true);
    expect(await lease.release()).toBe(true);
    expect(await other.tryAcquire('fp:promote')).not.toBeNull();
    expect(await settled(app, 1, 20 * keepaliveMs)).toBe(1);
  });

  it('idleTimeoutMs: with nothing held or waited for, the last connection closes; the next call opens one', async () => {
    const keepaliveMs = 100;
    const idleTimeoutMs = 300;
    const app = appName('fp-idle');
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), keepaliveMs, idleTimeoutMs }));
    await (await locker.acquire('fp:idle')).release();
    expect(await settled(app, 0)).toBe(0);
    expect(locker.stats().sessions).toBe(0);

    const lock = await locker.acquire('fp:idle');
    const lease = await locker.lease('fp:idle-lease', { ttlMs: 60_000, renew: false });
    expect(await backendsOf(app)).toBe(1);
    // Held well past idleTimeoutMs (only time can show that nothing happens): the connection stays.
    await sleep(idleTimeoutMs + 5 * keepaliveMs);
    expect(await backendsOf(app)).toBe(1);
    expect(lock.signal.aborted).toBe(false);
    await lock.release();
    await sleep(idleTimeoutMs + 5 * keepaliveMs);
    expect(await backendsOf(app)).toBe(1); // the lease still needs it
    expect(await lease.release()).toBe(true);
    expect(await settled(app, 0)).toBe(0);
  });
});
