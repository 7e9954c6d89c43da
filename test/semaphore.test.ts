import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError, LockLostError, LockTimeoutError, NestedLockError } from '../src/index.js';
import { appName, eventually, killBackends, sleep, track, useTestDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useTestDatabase>>;
const open = (params: Record<string, string> = {}) => track(createLocker({ connectionString: db.urlWith(params) }));

beforeAll(async () => {
  db = await useTestDatabase('semaphore');
});

describe('semaphores', () => {
  it('never admit more than `permits` holders: 30 concurrent holders across two lockers', async () => {
    const [l1, l2] = [open(), open()];
    let inside = 0;
    let maxInside = 0;
    let entries = 0;
    // The first four holders stay until all four are inside (a state, not a race with the others' sleeps):
    // so the permits were all usable at once. A semaphore that admits fewer leaves them waiting 10 s.
    let allFourInside!: () => void;
    const fourInside = new Promise<void>((resolve) => (allFourInside = resolve));
    await Promise.all(
      Array.from({ length: 30 }, async (_, w) => {
        const sem = (w % 2 ? l1 : l2).semaphore('sem:bound', { permits: 4 });
        for (let i = 0; i < 3; i++) {
          await sem.withPermit(
            async () => {
              inside++;
              entries++;
              maxInside = Math.max(maxInside, inside);
              if (inside === 4) allFourInside();
              if (entries <= 4) await Promise.race([fourInside, sleep(10_000)]);
              await sleep(2 + Math.random() * 5);
              inside--;
            },
            { timeoutMs: 60_000 },
          );
        }
      }),
    );
    expect(entries).toBe(90);
    expect(maxInside).toBeLessThanOrEqual(4);
    expect(maxInside).toBe(4); // and the permits were all used
    expect(l1.stats().held + l2.stats().held).toBe(0);
  });

  it('a full semaphore refuses a try, times out a wait, and honours a signal', async () => {
    const sem = open().semaphore('sem:full', { permits: 2 });
    const otherLocker = open();
    const other = otherLocker.semaphore('sem:full', { permits: 2 });
    const held = [await sem.acquire(), await sem.acquire()];
    expect(held[0]!.key).not.toBe(held[1]!.key);
    expect(await other.tryAcquire()).toBeNull();
    expect(await sem.tryAcquire()).toBeNull(); // the holder's own locker too
    await expect(other.acquire({ timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
    const reason = new Error('stop waiting');
    const c = new AbortController();
    const waiting = other.acquire({ timeoutMs: 30_000, signal: c.signal });
    await eventually(() => otherLocker.stats().waiting === 1, 15_000, 'the wait to start');
    c.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    // A release wakes a waiter elsewhere.
    const next = other.acquire({ timeoutMs: 30_000 });
    await eventually(() => otherLocker.stats().waiting === 1, 15_000, 'the wait to start');
    expect(await held[0]!.release()).toBe(true);
    const p = await next;
    expect(p.name).toBe('sem:full');
    await Promise.all([p.release(), held[1]!.release()]);
  });

  it('frees the permits of a killed backend', async () => {
    const app = appName('sem');
    const victim = open({ application_name: app });
    const sem = victim.semaphore('sem:kill', { permits: 1 });
    const permit = await sem.acquire();
    const other = open().semaphore('sem:kill', { permits: 1 });
    expect(await other.tryAcquire()).toBeNull();
    const waiting = other.acquire({ timeoutMs: 20_000 });
    await killBackends(db.url, app);
    await eventually(() => permit.signal.aborted, 15_000, 'the permit to be lost');
    expect(permit.signal.reason).toBeInstanceOf(LockLostError);
    const mine = await waiting;
    await mine.release();
  });

  it('refuses waiting for a lock inside a permit callback, and bad arguments', async () => {
    const locker = open();
    const sem = locker.semaphore('sem:nest', { permits: 3 });
    await sem.withPermit(async () => {
      await expect(locker.acquire('sem:inner')).rejects.toBeInstanceOf(NestedLockError);
    });
    for (const permits of [0, -1, 1.5, NaN, '3', 10_001, undefined]) {
      expect(() => locker.semaphore('sem:bad', { permits } as never)).toThrow(InvalidArgumentError);
    }
    expect(() => locker.semaphore('', { permits: 1 })).toThrow(InvalidArgumentError);
    await expect(sem.acquire({ timeoutMs: -5 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(sem.tryAcquire({ timeoutMs: 5 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('a permit granted during close, timeout or cancel is given back, never leaked', async () => {
    const delays = [0, 0, 1, 2, 3, 5, 10];
    const third = open().semaphore('sem:late', { permits: 1 });
    const expectFree = async (soonMs: number) => {
      const check = async () => {
        const p = await third.tryAcquire();
        if (p) await p.release();
        return p !== null;
      };
      if (soonMs === 0) expect(await check()).toBe(true);
      else await eventually(check, soonMs, 'the permit to be free');
    };
    const holder = open().semaphore('sem:late', { permits: 1 });
    for (let i = 0; i < 21; i++) {
      const held = await holder.acquire();
      const waiterLocker = createLocker({ connectionString: db.url });
      const controller = new AbortController();
      const way = (['close', 'timeout', 'cancel'] as const)[i % 3];
      const timeoutMs = way === 'timeout' ? 300 : 60_000;
      const started = performance.now();
      const waiting = waiterLocker
        .semaphore('sem:late', { permits: 1 })
        .acquire({ timeoutMs, signal: controller.signal })
        .then((p) => p.release(), (err: unknown) => err);
      try {
        await eventually(() => waiterLocker.stats().waiting === 1, 15_000, 'the wait to start');
        if (way === 'timeout') await sleep(Math.max(0, started + timeoutMs - performance.now() - 5 + delays[i % 7]!));
        await held.release();
        if (way !== 'timeout') await sleep(delays[i % 7]!);
        if (way === 'close') await waiterLocker.close();
        if (way === 'cancel') controller.abort(new Error('cancelled'));
        await waiting;
        // After close() the permit is free promptly: given back before close() resolves, or, rarely (a grant that
        // landed as the session was being ended), by the server as that backend exits a moment later.
        await expectFree(5000);
      } finally {
        await waiterLocker.close();
      }
    }
  });
});
