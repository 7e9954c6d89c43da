/**
 * DESIGN.md promises that no other file pins down, each checked through the database's own state.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker, LockTimeoutError, lockKey, migrate, type LockHandle } from '../src/index.js';
import { releaseLeaseSql, renewLeaseSql } from '../src/lease/lease-sql.js';
import { appName, eventually, track, useMigratedDatabase } from './support/db.js';
import { startEmbedded, withTimeout } from './support/server.js';
import { processGone } from './support/process.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let admin: pg.Pool;

beforeAll(async () => {
  db = await useMigratedDatabase('design_promises');
  admin = new pg.Pool({ connectionString: db.url, max: 2 });
  track({ close: () => admin.end() });
});

/** Backends of an application_name in this file's database. */
async function backendsOf(app: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`,
    [app],
  );
  return rows[0]!.n;
}

describe('sessions', () => {
  it('a holder that also queries through the same pool cannot deadlock it', async () => {
    // Six connections: the locker pins its two sessions, its waiter session and its listener; the
    // holders' own queries share what is left. Thirty holders on ten keys, each querying while it holds.
    const pool = new pg.Pool({ connectionString: db.url, max: 6 });
    const locker = createLocker({ pool, maxSessions: 2 });
    try {
      const results = await withTimeout(
        Promise.all(
          Array.from({ length: 30 }, (_, i) =>
            locker.withLock(`pool-query:${i % 10}`, async () => (await pool.query('SELECT $1::int AS i', [i])).rows[0].i as number, { timeoutMs: 30_000 }),
          ),
        ),
        20_000,
        'thirty holders that query through the pool their locker pins from',
      );
      expect(results.sort((a, b) => a - b)).toEqual(Array.from({ length: 30 }, (_, i) => i));
    } finally {
      // Bounded: after a deadlock neither would end.
      await withTimeout(locker.close(), 5_000, 'close').catch(() => {});
      await withTimeout(pool.end(), 5_000, 'pool.end').catch(() => {});
    }
  });

  it('waiters for distinct keys do not each pin a connection', async () => {
    const names = Array.from({ length: 12 }, (_, i) => `distinct-wait:${i}`);
    const holder = track(createLocker({ connectionString: db.url }));
    const held = await Promise.all(names.map((n) => holder.acquire(n)));
    const app = appName('waiters');
    // A roomy pool of the caller's, so that the count below is the locker's doing, not the pool's cap.
    const pool = new pg.Pool({ connectionString: db.urlWith({ application_name: app }), max: 30 });
    const waiter = createLocker({ pool, maxSessions: 2 });
    const waits = names.map((n) => waiter.acquire(n, { timeoutMs: 60_000 }));
    // Every wait is in the database: blocked in PostgreSQL's queue, or announced by a marker.
    await eventually(async () => {
      const report = await holder.inspect();
      const waiting = new Set(report.locks.filter((l) => l.applicationName === app && l.state === 'waiting').map((l) => l.key));
      return waiting.size === names.length;
    }, 15_000, 'twelve waits visible in pg_locks');
    expect(waiter.stats().waiting).toBe(names.length);
    // maxSessions, one waiter session, the listener, and up to two for short statements.
    expect(await backendsOf(app)).toBeLessThanOrEqual(2 + 1 + 1 + 2);
    await Promise.all(held.map((h) => h.release()));
    const got = await Promise.all(waits);
    await Promise.all(got.map((h) => h.release()));
    await waiter.close();
    await pool.end();
  });

  it('a waiting acquire never delays a release on the same session', async () => {
    // One session: the held lock and the wait would share it, if the wait did not have a session of its own.
    const other = track(createLocker({ connectionString: db.url }));
    const busy = await other.acquire('release-while-waiting:busy');
    const app = appName('release');
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), maxSessions: 1 }));
    const mine = await locker.acquire('release-while-waiting:mine');
    const waiting = locker.acquire('release-while-waiting:busy', { timeoutMs: 60_000 });
    await eventually(async () => {
      const { rows } = await admin.query(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`,
        [app],
      );
      return rows.length === 1;
    }, 15_000, 'the wait blocked in PostgreSQL');
    expect(await withTimeout(mine.release(), 5_000, 'a release while another acquire of the locker waits')).toBe(true);
    const taken = await other.tryAcquire('release-while-waiting:mine');
    expect(taken).not.toBeNull(); // free for others on the server, not just released locally
    expect(locker.stats().waiting).toBe(1); // and the wait goes on
    await taken!.release();
    await busy.release();
    await (await waiting).release();
  });
});

describe('acquire timeouts', () => {
  it('default to 10 s; Infinity waits past that when asked', async () => {
    const holder = track(createLocker({ connectionString: db.url }));
    const heldA = await holder.acquire('timeout:default');
    const heldB = await holder.acquire('timeout:infinite');
    const locker = track(createLocker({ connectionString: db.url }));
    // The unbounded wait starts first: were it bounded by the default, it would end first.
    const infinite = locker.acquire('timeout:infinite', { timeoutMs: Infinity });
    let infiniteSettled = false;
    void infinite.finally(() => (infiniteSettled = true)).catch(() => {});
    await eventually(() => locker.stats().waiting === 1, 15_000, 'the unbounded wait');
    const err = await locker.acquire('timeout:default').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockTimeoutError);
    expect((err as LockTimeoutError).timeoutMs).toBe(10_000);
    expect(infiniteSettled).toBe(false);
    expect(locker.stats().waiting).toBe(1);
    await heldB.release();
    await (await infinite).release();
    await heldA.release();
  });
});

describe('fencing tokens', () => {
  it('are durable before they are returned: a server crash right after the grant keeps them', async () => {
    const server = await startEmbedded();
    try {
      await migrate({ connectionString: server.url });
      // A server that would not wait for the disk on commit, and a WAL writer that would not flush soon:
      // only pgfence's own synchronous commit can make the token durable before the crash below.
      const c = new pg.Client({ connectionString: server.url });
      await c.connect();
      await c.query(`ALTER SYSTEM SET synchronous_commit = off`);
      await c.query(`ALTER SYSTEM SET wal_writer_delay = '10s'`);
      await c.query(`SELECT pg_reload_conf()`);
      await c.end();
      const locker = createLocker({ connectionString: server.url });
      locker.on('lost', () => {}); // the crash takes the lock
      const sessionToken = (await locker.acquire('durable:key', { fencing: true })).token!;
      const leaseToken = (await locker.lease('durable:lease', { ttlMs: 60_000, renew: false })).token;

      // Crash: immediate shutdown (SIGQUIT), no flush of anything not yet on disk; then recovery.
      const pid = Number((await readFile(join(server.dir, 'data', 'postmaster.pid'), 'utf8')).split('\n')[0]);
      process.kill(pid, 'SIGQUIT');
      await eventually(() => processGone(pid), 15_000, 'the crashed server to exit');
      await locker.close();
      await server.restart();

      const after = new pg.Client({ connectionString: server.url });
      await after.connect();
      try {
        const { rows } = await after.query<{ key: string; token: string }>(
          `SELECT key::text, token::text FROM pgfence.fencing_tokens WHERE key = ANY($1::int8[])`,
          [[lockKey('durable:key'), lockKey('durable:lease')]],
        );
        const kept = new Map(rows.map((r) => [r.key, BigInt(r.token)]));
        expect(kept.get(String(lockKey('durable:key')))).toBe(sessionToken);
        expect(kept.get(String(lockKey('durable:lease')))).toBe(leaseToken);
      } finally {
        await after.end();
      }
      const again = createLocker({ connectionString: server.url });
      try {
        const next = await again.acquire('durable:key', { fencing: true });
        expect(next.token!).toBeGreaterThan(sessionToken);
      } finally {
        await again.close();
      }
    } finally {
      await server.stop();
    }
  });

  it('increase across a client crash (a fenced holder SIGKILLed)', async () => {
    const child = spawn(process.execPath, [new URL('./fixtures/holder.mjs', import.meta.url).pathname, db.url, 'client-crash:key', 'fenced'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let crashedToken: bigint;
    try {
      const [line] = (await once(child.stdout!, 'data')) as [Buffer];
      crashedToken = BigInt(/^held (\d+)/.exec(line.toString())![1]!);
      const locker = track(createLocker({ connectionString: db.url }));
      const waiting = locker.acquire('client-crash:key', { fencing: true, timeoutMs: 30_000 });
      await eventually(() => locker.stats().waiting === 1, 15_000, 'a wait behind the child');
      child.kill('SIGKILL');
      const next = await waiting;
      expect(next.token!).toBeGreaterThan(crashedToken);
      await next.release();
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('leases', () => {
  it('renew and release by a non-owner change nothing, in the database itself', async () => {
    const locker = track(createLocker({ connectionString: db.url }));
    const key = lockKey('non-owner:lease');
    const first = await locker.lease('non-owner:lease', { ttlMs: 30_000, renew: false });
    await first.release();
    const owner = await locker.lease('non-owner:lease', { ttlMs: 30_000, renew: false, owner: 'owner' });
    const rowNow = async () =>
      (await admin.query(`SELECT owner, token::text, acquired_at, renewed_at, expires_at, released_at FROM pgfence.leases WHERE key = $1`, [key])).rows[0];
    const before = await rowNow();
    // An earlier holder's token, and one nobody was given: neither can extend or end the lease.
    for (const token of [first.token, owner.token + 1000n]) {
      expect((await admin.query(renewLeaseSql, [key, token, 600_000])).rows[0]).toEqual({ expires_at: null, taken_over: true });
      expect((await admin.query(releaseLeaseSql, [key, token, 0])).rows[0].released).toBe(false);
    }
    expect(await rowNow()).toEqual(before);
    expect((await admin.query(renewLeaseSql, [key, owner.token, 600_000])).rows[0].expires_at).not.toBeNull(); // the owner can
    await owner.release();
  });
});

describe('the name registry', () => {
  it('writes each name once per process, names noted together in one statement', async () => {
    // Count what reaches the table for this test's names: statements, and rows per key (ON CONFLICT DO NOTHING
    // still counts an attempt). Other tests' lockers may still be writing their own names: those are not counted.
    const names = ['registry:a', 'registry:b', 'registry:c'];
    await admin.query(`
      CREATE TABLE name_writes (statements int NOT NULL DEFAULT 0);
      INSERT INTO name_writes VALUES (0);
      CREATE TABLE name_rows (key int8 NOT NULL);
      CREATE FUNCTION count_name_statement() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF EXISTS (SELECT FROM written WHERE key IN (${names.map((n) => lockKey(n)).join(', ')})) THEN
            UPDATE name_writes SET statements = statements + 1;
          END IF;
          RETURN NULL;
        END $$;
      CREATE FUNCTION count_name_row() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO name_rows VALUES (NEW.key); RETURN NEW; END $$;
      CREATE TRIGGER count_statements AFTER INSERT ON pgfence.lock_names REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION count_name_statement();
      CREATE TRIGGER count_rows BEFORE INSERT ON pgfence.lock_names FOR EACH ROW EXECUTE FUNCTION count_name_row();`);
    try {
      const locker = track(createLocker({ connectionString: db.url }));
      const present = async () =>
        (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgfence.lock_names WHERE key = ANY($1::int8[])`, [names.map((n) => lockKey(n))])).rows[0]!.n;
      // Three names at once, then each again, sequentially and concurrently, with leases too.
      const first: LockHandle[] = await Promise.all(names.map((n) => locker.acquire(n)));
      await Promise.all(first.map((h) => h.release()));
      await eventually(async () => (await present()) === 3, 15_000, 'the three names');
      for (let i = 0; i < 3; i++) await Promise.all(names.map(async (n) => (await locker.acquire(n)).release()));
      await (await locker.lease('registry:a', { ttlMs: 1000 })).release();
      await locker.inspect(); // flushes whatever is pending
      const { rows } = await admin.query<{ key: string; n: number }>(
        `SELECT key::text, count(*)::int AS n FROM name_rows WHERE key = ANY($1::int8[]) GROUP BY key`,
        [names.map((n) => lockKey(n))],
      );
      expect(Object.fromEntries(rows.map((r) => [r.key, r.n]))).toEqual(Object.fromEntries(names.map((n) => [String(lockKey(n)), 1])));
      expect((await admin.query(`SELECT statements FROM name_writes`)).rows[0].statements).toBe(1);
    } finally {
      await admin.query(`DROP TRIGGER count_statements ON pgfence.lock_names; DROP TRIGGER count_rows ON pgfence.lock_names`);
    }
  });
});
