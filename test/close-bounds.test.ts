import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type Locker, lockKey } from '../src/index.js';
import { internalKey } from '../src/keys.js';
import { eventually, track, useMigratedDatabase } from './support/db.js';
import { advisoryLocksOf } from './support/server-locks.js';
import { proxyTo } from './support/tcp-proxy.js';

/**
 * Issue 30: a leader's close() ran past its bound under faults (the explorer: "close by leader#13.3p
 * (leader) settled after 13109.9 ms, past its bound of 7750.0 ms"). A candidate whose name a lock holds
 * waits for it in PostgreSQL's queue on its waiter session, without a timeout; close() (or resign())
 * cancels that wait, but when the network has gone dark the cancel never arrives, and close() waited for
 * the wait's end — until the lock's holder let go, however long that took. A withdrawn statement now has
 * the statement deadline from its cancel to be answered, or its session is lost. And resign() and close()
 * no longer wait for the guard lock a newly elected leader is taking.
 */
let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let admin: pg.Client;

beforeAll(async () => {
  db = await useMigratedDatabase('close_bounds');
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
});
afterAll(async () => {
  await admin.end();
});

/** keepaliveMs 500: statements have D = max(2 x 500, 2000) = 2000 ms, and loss is noticed within C = 2750 ms. */
const KEEPALIVE_MS = 500;
/** The explorer's bound for a close: C plus its slack of 5 s. Before the fix close() did not settle at all while the lock was held. */
const CLOSE_BOUND_MS = 2750 + 5000;

const waitsInQueue = async (key: bigint) => (await advisoryLocksOf(admin, key, false)) > 0;

/** How long `call` took to settle, or null if it had not within `boundMs` (it is left running). */
async function settledWithin(call: Promise<unknown>, boundMs: number): Promise<number | null> {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), boundMs)));
  const took = await Promise.race([call.then(() => performance.now() - started, () => performance.now() - started), late]);
  clearTimeout(timer);
  return took;
}

describe('close() and resign() under a dark network (issue 30)', () => {
  let holder: Locker;
  beforeAll(() => {
    holder = track(createLocker({ connectionString: db.url }));
  });

  it('a leader candidate waiting in PostgreSQL’s queue behind a lock: close() settles within its bound when its network goes dark', async () => {
    const name = 'close-bounds:leader';
    const lock = await holder.acquire(name); // held throughout: the candidate waits in the server's queue
    const { proxy, url } = await proxyTo(db.url);
    try {
      const candidate = createLocker({ connectionString: url, keepaliveMs: KEEPALIVE_MS });
      candidate.leader(name, { ttlMs: 2000 });
      await eventually(() => waitsInQueue(lockKey(name)), 15_000, 'the candidate to wait in the server’s queue');
      proxy.blackhole();
      const closing = candidate.close();
      const took = await settledWithin(closing, CLOSE_BOUND_MS);
      expect(took, 'close() settled within its bound').not.toBeNull();
    } finally {
      await lock.release();
      proxy.heal();
      await proxy.close();
    }
  });

  it('resign() does not wait for the guard lock a newly elected leader is still taking', async () => {
    // keepaliveMs 5000: the guard's wait may take D = 10 s; resign() must not.
    const name = 'close-bounds:guard';
    const { rows } = await admin.query<{ next: string }>(`SELECT (CASE WHEN is_called THEN last_value + 1 ELSE last_value END)::text AS next FROM pgfence.token_sequence`);
    const next = BigInt(rows[0]!.next);
    // The guard locks of the next terms are busy: a new leader's guard waits for one.
    const guards = Array.from({ length: 20 }, (_, i) => internalKey('leader', String(lockKey(name)), String(next + BigInt(i))));
    const guardHolder = new pg.Client({ connectionString: db.url });
    await guardHolder.connect();
    try {
      for (const key of guards) await guardHolder.query('SELECT pg_advisory_lock($1)', [key]);
      const candidate = track(createLocker({ connectionString: db.url, keepaliveMs: 5000 }));
      const election = candidate.leader(name, { ttlMs: 30_000 });
      await eventually(async () => (await Promise.all(guards.map(waitsInQueue))).some(Boolean), 15_000, 'the guard to wait');
      const took = await settledWithin(election.resign(), 5000);
      expect(took, 'resign() settled before the guard’s wait ended').not.toBeNull();
      expect(election.isLeader).toBe(false);
      // Its lease is given back: another candidate takes the name at once.
      expect(await holder.tryLease(name)).not.toBeNull();
    } finally {
      await guardHolder.end();
    }
  });
});
