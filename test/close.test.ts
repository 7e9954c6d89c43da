import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, LockerClosedError, lockKey, type Locker } from '../src/index.js';
import { semaphoreKeys } from '../src/advisory/semaphore.js';
import { eventually, track, useMigratedDatabase } from './support/db.js';
import { advisoryLocksOf, markersOf } from './support/server-locks.js';
import { proxyTo, type TcpProxy } from './support/tcp-proxy.js';

/**
 * What a closed locker leaves on the server: nothing held, nothing waiting in a queue, no wait
 * announcement (marker), by the time close() resolves. Its connections go through a proxy that keeps
 * their server sessions open after the locker ends them, so that the server's slow noticing of a closed
 * connection cannot tidy up on the locker's behalf: what close() did not withdraw stays visible.
 */
let url: string;
let proxy: TcpProxy;
let closing: Locker;
let holder: Locker;
let other: Locker;

beforeAll(async () => {
  url = (await useMigratedDatabase('close')).url;
  let via: string;
  ({ proxy, url: via } = await proxyTo(url));
  closing = track(createLocker({ connectionString: via }));
  [holder, other] = [track(createLocker({ connectionString: url })), track(createLocker({ connectionString: url }))];
});
afterAll(async () => {
  await proxy?.close();
});

describe('close() with requests waiting', () => {
  it('withdraws every wait announcement and leaves a free semaphore permit free for others, by the time it resolves', async () => {
    const name = 'close:waiting';
    const { baseKey } = semaphoreKeys({ key: lockKey(name), name }, 1);
    // What the holder holds, the closing locker waits for: a permit, a lease, and two session locks (the
    // first waits in PostgreSQL's queue on the waiter session; the second announces itself with a marker).
    const permit = await holder.semaphore(name, { permits: 1 }).acquire();
    const lease = await holder.lease(`${name}:lease`, { ttlMs: 60_000 });
    const locks = await Promise.all([holder.acquire(`${name}:lock:1`), holder.acquire(`${name}:lock:2`)]);
    const waits = [
      closing.semaphore(name, { permits: 1 }).acquire({ timeoutMs: 60_000 }),
      closing.lease(`${name}:lease`, { timeoutMs: 60_000 }),
      closing.acquire(`${name}:lock:1`, { timeoutMs: 60_000 }),
      closing.acquire(`${name}:lock:2`, { timeoutMs: 60_000 }),
    ].map((p) => p.then(() => 'granted', (err: unknown) => err));
    const onServer = async () => ({
      semaphoreMarkers: await markersOf(url, baseKey),
      leaseMarkers: await markersOf(url, lockKey(`${name}:lease`)),
      queuedForLock1: await advisoryLocksOf(url, lockKey(`${name}:lock:1`), false),
      lock2Markers: await markersOf(url, lockKey(`${name}:lock:2`)),
    });
    await eventually(async () => Object.values(await onServer()).every((n) => n === 1), 15_000, 'every wait to be queued or announced on the server');

    proxy.keepServerSessions();
    await closing.close();
    expect(await onServer()).toEqual({ semaphoreMarkers: 0, leaseMarkers: 0, queuedForLock1: 0, lock2Markers: 0 });
    for (const outcome of await Promise.all(waits)) expect(outcome).toBeInstanceOf(LockerClosedError);

    // The permit the holder gives back is free for a fresh locker's first (polite) try at once.
    await permit.release();
    const again = await other.semaphore(name, { permits: 1 }).tryAcquire();
    expect(again).not.toBeNull();
    await again!.release();
    await lease.release();
    for (const h of locks) await h.release();
  });
});
