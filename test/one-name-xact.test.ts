// A name is one lock whatever its kind, transaction locks included: with pgfence's schema present, a
// transaction lock (Node xactLock / tryXactLock on node-postgres and Kysely; SQL try_xact_lock_fenced /
// xact_lock_fenced) is not granted while a lease of its name is live, and a lease is busy while one is held.
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, LockTimeoutError, lockKey, tryXactLock, xactLock, type Locker } from '../src/index.js';
import * as k from '../src/adapters/kysely/index.js';
import { migrate } from '../src/migrate/index.js';
import { statementsSent } from './support/statements-sent.js';
import { eventually, track, useMigratedDatabase, useTestDatabase } from './support/db.js';
import { leaseLive } from './support/server-locks.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
let kdb: Kysely<Record<string, never>>;
let leaser: Locker;

beforeAll(async () => {
  db = await useMigratedDatabase('one_name_xact');
  pool = new pg.Pool({ connectionString: db.url, max: 6 });
  kdb = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 3 }) }) });
  leaser = track(createLocker({ connectionString: db.url }));
  await pool.query(`CREATE TABLE xact_items (id int PRIMARY KEY)`);
});
afterAll(async () => {
  await pool.end();
  await kdb.destroy();
});

/** Runs fn in a transaction on a client of the pool, rolled back after. */
async function inTransaction<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    return await fn(c);
  } finally {
    await c.query('ROLLBACK').catch(() => {});
    c.release();
  }
}

describe('xactLock (node-postgres) and a lease of one name', () => {
  it('a live lease keeps tries out, exclusive, shared and fenced; the same client gets in after its release', async () => {
    const name = 'ox:try';
    const lease = await leaser.lease(name, { ttlMs: 30_000 });
    await inTransaction(async (c) => {
      expect(await tryXactLock(c, name)).toBeNull();
      expect(await tryXactLock(c, name, { mode: 'shared' })).toBeNull();
      expect(await tryXactLock(c, name, { fencing: true })).toBeNull();
      // Nothing was kept: the lease's name is not held by this transaction.
      const { rows } = await c.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`);
      expect(rows[0].n).toBe(0);
    });
    expect(await lease.release()).toBe(true);
    await inTransaction(async (c) => {
      const got = await tryXactLock(c, name, { fencing: true });
      expect(got?.token).toBeGreaterThan(lease.token);
      // ... and now the lease is busy: both ways.
      expect(await leaser.tryLease(name)).toBeNull();
    });
  });

  it('a wait times out while the lease lives, leaving the transaction usable and lock_timeout as it was', async () => {
    const name = 'ox:timeout';
    const lease = await leaser.lease(name, { ttlMs: 30_000 });
    await inTransaction(async (c) => {
      await c.query(`SET LOCAL lock_timeout = '7s'`);
      await c.query(`INSERT INTO xact_items VALUES (1)`);
      await expect(xactLock(c, name, { timeoutMs: 300 })).rejects.toBeInstanceOf(LockTimeoutError);
      const abort = new AbortController();
      const aborted = xactLock(c, name, { timeoutMs: 30_000, signal: abort.signal });
      abort.abort(new Error('stop'));
      await expect(aborted).rejects.toThrow('stop');
      expect((await c.query('SHOW lock_timeout')).rows[0].lock_timeout).toBe('7s');
      await c.query(`INSERT INTO xact_items VALUES (2)`);
      expect((await c.query(`SELECT count(*)::int AS n FROM xact_items`)).rows[0].n).toBe(2);
    });
    await lease.release();
  });

  it('a waiting xactLock gets in once the lease is released, and not before', async () => {
    const name = 'ox:wait';
    const lease = await leaser.lease(name, { ttlMs: 30_000 });
    await inTransaction(async (c) => {
      let granted = false;
      const waiting = xactLock(c, name, { timeoutMs: 30_000, fencing: true }).then((r) => ((granted = true), r));
      // It waits inside its statement (the function polls the lease): seen in pg_stat_activity.
      await eventually(
        async () => (await pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%admit_xact_lock%' AND pid <> pg_backend_pid()`)).rows[0].n > 0,
        15_000,
        'the wait to be under way',
      );
      expect(granted).toBe(false);
      expect(await lease.release()).toBe(true);
      const { token } = await waiting;
      expect(token).toBeGreaterThan(lease.token);
      expect(await leaseLive(db.url, lockKey(name))).toBe(false);
    });
  });
});

describe('xactLock (Kysely) and a lease of one name', () => {
  it('a live lease keeps a try out and a wait waits for its release', async () => {
    const name = 'ox:kysely';
    const lease = await leaser.lease(name, { ttlMs: 30_000 });
    await kdb.transaction().execute(async (trx) => {
      expect(await k.tryXactLock(trx, name)).toBeNull();
      await expect(k.xactLock(trx, name, { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
    });
    await kdb.transaction().execute(async (trx) => {
      const waiting = k.xactLock(trx, name, { timeoutMs: 30_000, fencing: true });
      await eventually(
        async () => (await pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%admit_xact_lock%' AND pid <> pg_backend_pid()`)).rows[0].n > 0,
        15_000,
        'the wait to be under way',
      );
      await lease.release();
      expect((await waiting).token).toBeGreaterThan(lease.token);
    });
  });
});

describe('the SQL interface: transaction locks and a lease of one name', () => {
  it('try_xact_lock_fenced is NULL and xact_lock_fenced waits until lock_timeout while a lease lives; both get in after its release', async () => {
    const name = 'ox:sql';
    const key = lockKey(name);
    const lease = await leaser.lease(name, { ttlMs: 30_000 });
    await inTransaction(async (c) => {
      expect((await c.query(`SELECT pgfence.try_xact_lock_fenced($1) AS t`, [key])).rows[0].t).toBeNull();
      await c.query(`SET LOCAL lock_timeout = '300ms'`);
      await c.query('SAVEPOINT s');
      await expect(c.query(`SELECT pgfence.xact_lock_fenced($1)`, [key])).rejects.toMatchObject({ code: '55P03' });
      await c.query('ROLLBACK TO SAVEPOINT s');
    });
    const waiter = await pool.connect();
    try {
      await waiter.query('BEGIN');
      await waiter.query(`SET LOCAL lock_timeout = '30s'`);
      const waiting = waiter.query<{ t: string }>(`SELECT pgfence.xact_lock_fenced($1)::text AS t`, [key]);
      await eventually(
        async () => (await pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%xact_lock_fenced%' AND pid <> pg_backend_pid()`)).rows[0].n > 0,
        15_000,
        'the SQL wait to be under way',
      );
      await lease.release();
      expect(BigInt((await waiting).rows[0]!.t)).toBeGreaterThan(lease.token);
      expect((await waiter.query('SHOW lock_timeout')).rows[0].lock_timeout).toBe('30s');
      expect(await leaser.tryLease(name)).toBeNull();
    } finally {
      await waiter.query('ROLLBACK');
      waiter.release();
    }
    await inTransaction(async (c) => {
      expect((await c.query(`SELECT pgfence.try_xact_lock_fenced($1) AS t`, [key])).rows[0].t).not.toBeNull();
    });
  });

  it('under REPEATABLE READ, a lease changed after the snapshot is a serialization failure (retry), never a grant', async () => {
    const name = 'ox:rr';
    const key = lockKey(name);
    (await leaser.lease(name, { ttlMs: 30_000 })).release();
    await inTransaction(async (c) => {
      await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      await c.query('SELECT 1'); // the snapshot: no live lease of the name in it
      const lease = await leaser.lease(name, { ttlMs: 30_000 });
      try {
        await expect(tryXactLock(c, name)).rejects.toMatchObject({ code: '40001' });
      } finally {
        await lease.release();
      }
    });
    await inTransaction(async (c) => {
      await c.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      expect(await tryXactLock(c, name)).not.toBeNull();
      expect(await leaseLive(db.url, key)).toBe(false);
    });
  });
});

describe("without pgfence's schema, then migrated", () => {
  it('xactLock costs one plain statement and works; once migrate() ran, the same client gives way to leases', async () => {
    const bare = await useTestDatabase('one_name_xact_bare');
    const client = new pg.Client({ connectionString: bare.url });
    await client.connect();
    try {
      for (let i = 0; i < 2; i++) {
        await client.query('BEGIN');
        const sent = await statementsSent(async () => {
          expect(await tryXactLock(client, 'ox:bare')).not.toBeNull();
          await xactLock(client, 'ox:bare:2', { timeoutMs: 1000 });
        });
        expect(sent).toHaveLength(2);
        await client.query('COMMIT');
      }
      await migrate({ connectionString: bare.url });
      const late = track(createLocker({ connectionString: bare.url }));
      const lease = await late.lease('ox:bare', { ttlMs: 30_000 });
      await client.query('BEGIN');
      expect(await tryXactLock(client, 'ox:bare')).toBeNull();
      await expect(xactLock(client, 'ox:bare', { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
      await client.query('ROLLBACK');
      await lease.release();
    } finally {
      await client.end();
    }
  });
});
