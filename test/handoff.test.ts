import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker } from '../src/index.js';
import { lockKey } from '../src/keys.js';
import { eventually, useTestDatabase } from './support/db.js';

/** A session waits for the key in PostgreSQL's queue (an int8 advisory key is classid:objid, objsubid 1). */
const QUEUED = `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
  AND ((classid::int8 << 32) | objid::int8) = $1::int8`;

let db: Awaited<ReturnType<typeof useTestDatabase>>;
beforeAll(async () => {
  db = await useTestDatabase('handoff');
});

interface Sent {
  name: string | undefined;
  text: string;
}

/** A pool whose clients record every statement they send (pgfence pins its sessions from it). */
function recordingPool(sent: Sent[]): pg.Pool {
  const pool = new pg.Pool({ connectionString: db.url, max: 10 });
  pool.on('error', () => {});
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const q = args[0];
      if (typeof q === 'string') sent.push({ name: undefined, text: q });
      else if (q && typeof q === 'object' && 'text' in q) sent.push({ name: (q as Sent).name, text: (q as Sent).text });
      return query(...args);
    };
  });
  return pool;
}

describe('contended hand-off between lockers', () => {
  it('costs each grant two prepared statements, as blocking connections do: the release, and a wait in the queue', async () => {
    const sent: Sent[][] = [[], []];
    const pools = sent.map(recordingPool);
    const admin = new pg.Pool({ connectionString: db.url, max: 1 });
    const lockers = pools.map((pool) => createLocker({ pool, maxSessions: 1, keepaliveMs: 60_000 }));
    try {
      const name = 'handoff:turns';
      // Each locker waits once in PostgreSQL's queue: its waiter session is open, and it has seen the key contended.
      for (const [holder, waiter] of [lockers, [...lockers].reverse()] as const) {
        const held = await holder!.acquire(name);
        const waiting = waiter!.acquire(name);
        await eventually(async () => (await admin.query(QUEUED, [lockKey(name).toString()])).rowCount === 1, 15_000, 'a queued waiter');
        await held.release();
        await (await waiting).release();
      }
      // Both lockers take turns: every grant but the first of a turn is contended (the other one waits meanwhile).
      const turns = async (n: number) => {
        for (let i = 0; i < n; i++) await Promise.all(lockers.map(async (l) => (await l.acquire(name)).release()));
      };
      await turns(3);
      const before = sent.map((s) => s.length);
      const cycles = 20;
      await turns(cycles);
      const during = sent.flatMap((s, i) => s.slice(before[i]));
      const grants = cycles * lockers.length;
      // Blocking connections: pg_advisory_unlock, then pg_advisory_lock (which waits in PostgreSQL's queue).
      expect(during.length).toBeLessThanOrEqual(2 * grants + 2); // + a try that lost the race, once per locker
      // Every one a named statement: parsed once per connection, not once per grant.
      expect(during.filter((q) => q.name === undefined).map((q) => q.text)).toEqual([]);
    } finally {
      await Promise.all(lockers.map((l) => l.close()));
      await Promise.all(pools.map((p) => p.end()));
      // Every connection of the lockers is gone before the file's database is dropped (a connection still
      // closing when DROP DATABASE ... FORCE terminates it would report an error after the test).
      const others = `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`;
      await eventually(async () => (await admin.query<{ n: number }>(others)).rows[0]!.n === 0, 15_000, 'the lockers\' connections to close');
      await admin.end();
    }
  });
});
