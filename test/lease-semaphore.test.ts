import { beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createLocker, InvalidArgumentError, type LockHandle, LockTimeoutError } from '../src/index.js';
import { internalKey } from '../src/keys.js';
import { queryOnce, sleep, track, useMigratedDatabase } from './support/db.js';

/**
 * Lease-backed semaphore permits (semaphore(name, { permits, ttlMs })): each permit is a lease of one
 * slot key (sql/permits.sql), with a TTL on the database clock, renewal and its own fencing token.
 */
let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
const open = () => track(createLocker({ connectionString: db.url }));

beforeAll(async () => {
  db = await useMigratedDatabase('lease_semaphore');
});

/** The slot keys of a lease-backed semaphore named `name` (no namespace). */
const slotsOf = async (name: string, permits: number) => {
  const [{ key }] = (await queryOnce<{ key: string }>(db.url, 'SELECT pgfence.lock_key($1, NULL)::text AS key', [name])) as [{ key: string }];
  return Array.from({ length: permits }, (_, i) => internalKey('permit', key, String(i)));
};

describe('lease-backed semaphores', () => {
  it('never admit more than `permits` holders (40 workers over two lockers), each permit with its own fencing token', async () => {
    const [l1, l2] = [open(), open()];
    let inside = 0;
    let maxInside = 0;
    const tokens = new Map<bigint, bigint[]>();
    let allThreeInside!: () => void;
    const threeInside = new Promise<void>((resolve) => (allThreeInside = resolve));
    let entries = 0;
    await Promise.all(
      Array.from({ length: 40 }, async (_, w) => {
        const sem = (w % 2 ? l1 : l2).semaphore('lsem:bound', { permits: 3, ttlMs: 5000 });
        for (let i = 0; i < 2; i++) {
          await sem.withPermit(
            async (permit) => {
              inside++;
              entries++;
              maxInside = Math.max(maxInside, inside);
              if (inside === 3) allThreeInside();
              expect(permit.token).toBeTypeOf('bigint');
              tokens.set(permit.key, [...(tokens.get(permit.key) ?? []), permit.token!]);
              // The first three stay until all three are inside: all permits were usable at once.
              if (entries <= 3) await Promise.race([threeInside, sleep(10_000)]);
              // Every permit is held across real awaits (issue 30): a surplus holder would be inside with the others,
              // where a section that awaits nothing lets each holder leave before the next one enters.
              await sleep(3 + (w % 3));
              maxInside = Math.max(maxInside, inside);
              inside--;
            },
            { timeoutMs: 60_000 },
          );
        }
      }),
    );
    expect(maxInside).toBe(3);
    expect([...tokens.keys()].sort()).toEqual((await slotsOf('lsem:bound', 3)).sort());
    // Each slot's tokens strictly increase, holder after holder.
    for (const list of tokens.values()) for (let i = 1; i < list.length; i++) expect(list[i]! > list[i - 1]!).toBe(true);
  }, 60_000);

  it('a permit whose holder died (it never renews) is free at its TTL, with a greater token', async () => {
    const slots = await slotsOf('lsem:dead', 1);
    // The dead holder: a permit taken through the SQL function, never renewed nor released.
    const [dead] = await queryOnce<{ granted: boolean; token: string }>(
      db.url,
      'SELECT granted, token::text AS token FROM pgfence.permit_acquire($1::int8[], $2, $3, $4, 0)',
      [slots, 'lsem:dead', 'dead-holder', 1000],
    );
    expect(dead!.granted).toBe(true);
    const locker = open();
    const sem = locker.semaphore('lsem:dead', { permits: 1, ttlMs: 1000 });
    expect(await sem.tryAcquire()).toBeNull();
    const permit = await sem.acquire({ timeoutMs: 10_000 });
    expect(permit.token! > BigInt(dead!.token)).toBe(true);
    // The live holder's permit is renewed past its TTL: nobody else gets it meanwhile.
    const other = open().semaphore('lsem:dead', { permits: 1, ttlMs: 1000 });
    await expect(other.acquire({ timeoutMs: 2500 })).rejects.toBeInstanceOf(LockTimeoutError);
    expect(permit.signal.aborted).toBe(false);
    expect(await permit.release()).toBe(true);
    await (await other.acquire({ timeoutMs: 5000 })).release();
  }, 30_000);

  it('a permit released is granted to a waiter of another locker', async () => {
    const [a, b] = [open(), open()];
    const held = await a.semaphore('lsem:handoff', { permits: 1, ttlMs: 10_000 }).acquire();
    const waiting = b.semaphore('lsem:handoff', { permits: 1, ttlMs: 10_000 }).acquire({ timeoutMs: 10_000 });
    expect(await held.release()).toBe(true);
    const next: LockHandle = await waiting;
    expect(next.token).not.toBeNull();
    await next.release();
  });

  it('checks ttlMs and permits before any I/O', () => {
    const locker = createLocker({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
    for (const ttlMs of [0, 99, -1, 1.5, Number.NaN, Infinity, '1000', null]) {
      expect(() => locker.semaphore('lsem:bad', { permits: 2, ttlMs: ttlMs as number })).toThrow(InvalidArgumentError);
    }
    for (const permits of [0, -1, 1.5, 10_001, '2', undefined]) {
      expect(() => locker.semaphore('lsem:bad', { permits: permits as number, ttlMs: 1000 })).toThrow(InvalidArgumentError);
    }
    expect(() => locker.semaphore('lsem:bad', { permits: 1, ttl: 1000 } as never)).toThrow(/ttlMs/);
    void locker.close();
  });

  it('pgfence.permit_acquire refuses NULL (22004) and bad arguments (22023), naming the argument', async () => {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      const call = (args: unknown[]) =>
        c.query('SELECT * FROM pgfence.permit_acquire($1::int8[], $2, $3, $4, $5)', args).then(
          () => null,
          (e: { code: string; message: string }) => e,
        );
      expect(await call([null, 'n', 'o', 1000, 0])).toMatchObject({ code: '22004', message: expect.stringMatching(/p_slots/) });
      expect(await call([[1], 'n', 'o', null, 0])).toMatchObject({ code: '22004', message: expect.stringMatching(/p_ttl_ms/) });
      expect(await call([[], 'n', 'o', 1000, 0])).toMatchObject({ code: '22023', message: expect.stringMatching(/p_slots/) });
      expect(await call([[1, null], 'n', 'o', 1000, 0])).toMatchObject({ code: '22023' });
      expect(await call([[1], 'n', 'o', 50, 0])).toMatchObject({ code: '22023', message: expect.stringMatching(/p_ttl_ms/) });
      expect(await call([[1], 'n', 'o', 1000, 1])).toMatchObject({ code: '22023', message: expect.stringMatching(/p_first/) });
    } finally {
      await c.end();
    }
  });
});
