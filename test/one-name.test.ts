// A name is one lock whatever its kind: with pgfence's schema present, a session advisory lock (either
// mode) and a lease of the same name exclude each other, in the library and through `pgfence run`.
import { statementsSent } from './support/statements-sent.js';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, LockTimeoutError, lockKey, type LockHandle, type Locker } from '../src/index.js';
import { releaseLeaseSql } from '../src/lease/lease-sql.js';
import { eventually, queryOnce, sleep, track, useMigratedDatabase, useTestDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
const open = (opts: { maxSessions?: number } = {}): Locker => track(createLocker({ connectionString: db.url, ...opts }));

/** A statement on this file's database, or on `url`'s. */
const query = async <R extends pg.QueryResultRow>(text: string, values: unknown[], url?: string): Promise<R[]> => {
  if (url === undefined || url === db.url) return (await pool.query<R>(text, values)).rows;
  return queryOnce<R>(url, text, values);
};

/** Is the lease of `name` live now (database clock)? */
const leaseLive = async (name: string, url?: string): Promise<boolean> =>
  (
    await query<{ live: boolean }>(
      `SELECT coalesce((SELECT released_at IS NULL AND expires_at > clock_timestamp() FROM pgfence.leases WHERE key = $1), false) AS live`,
      [lockKey(name)],
      url,
    )
  )[0]!.live;

/** Backends waiting in PostgreSQL's queue for the session lock of `name`. */
const queuedFor = async (name: string, url?: string): Promise<number> =>
  (
    await query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND NOT granted
          AND ((classid::int8 << 32) | objid::int8) = $1`,
      [lockKey(name)],
      url,
    )
  )[0]!.n;

/** Waiter markers (objsubid 2) announced for `name` by any session. */
const markersFor = async (name: string): Promise<number> => {
  const key = lockKey(name);
  const hi = Number(BigInt.asIntN(32, key >> 32n));
  const lo = Number(BigInt.asIntN(32, key));
  return (
    await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted
          AND classid = ($1::int4)::oid AND objid = ($2::int4)::oid`,
      [hi, lo],
    )
  ).rows[0]!.n;
};

/** How many statements every pg client of this process sends while `fn` runs. */
const countingStatements = async (fn: () => Promise<unknown>): Promise<number> => (await statementsSent(fn)).length;

beforeAll(async () => {
  db = await useMigratedDatabase('one_name');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
});
afterAll(async () => {
  await pool.end();
});

describe('a session lock and a lease of one name', () => {
  it('a held lease keeps session locks out, exclusive and shared; after its release a waiting acquire gets in', async () => {
    const leaser = open();
    const locker = open();
    const lease = await leaser.lease('one:lease-first', { ttlMs: 30_000 });
    for (const mode of ['exclusive', 'shared'] as const) {
      expect(await locker.tryAcquire('one:lease-first', { mode })).toBeNull();
      // The acquire waits without spinning (not on the waiter session, which PostgreSQL would grant at once).
      const sent = await countingStatements(() =>
        expect(locker.acquire('one:lease-first', { mode, timeoutMs: 500 })).rejects.toBeInstanceOf(LockTimeoutError),
      );
      expect(sent).toBeLessThan(30);
    }
    expect(locker.stats().held).toBe(0);
    const waiting = locker.acquire('one:lease-first', { timeoutMs: 30_000 });
    await eventually(() => locker.stats().waiting === 1, 15_000, 'the acquire to wait');
    expect(await lease.release()).toBe(true);
    const handle = await waiting;
    expect(await leaseLive('one:lease-first')).toBe(false);
    await handle.release();
  });

  it('tries sent together in one statement (a batch, fenced or not) each give way to their own lease', async () => {
    const leaser = open();
    const locker = open({ maxSessions: 1 });
    const lease = await leaser.lease('one:batch:leased', { ttlMs: 30_000 });
    for (const fencing of [false, true]) {
      const names = ['one:batch:a', 'one:batch:leased', 'one:batch:b', 'one:batch:c'];
      const handles = await Promise.all(names.map((n) => locker.tryAcquire(n, { fencing })));
      expect(handles.map((h) => h !== null)).toEqual([true, false, true, true]);
      if (fencing) for (const h of handles) if (h) expect(h.token).toBeGreaterThan(0n);
      await Promise.all(handles.map((h) => h?.release()));
    }
    await lease.release();
  });

  it('within one locker (its leases go on the backend that holds its session locks): a held session lock keeps its own leases out', async () => {
    const locker = open();
    for (const mode of ['exclusive', 'shared'] as const) {
      const name = `one:same-locker:${mode}`;
      const held = await locker.acquire(name, { mode });
      expect(await locker.tryLease(name)).toBeNull();
      expect(await leaseLive(name)).toBe(false);
      const waiting = locker.lease(name, { timeoutMs: 30_000 });
      await eventually(() => locker.stats().waiting === 1, 15_000, 'the lease to wait');
      expect(await held.release()).toBe(true);
      const lease = await waiting;
      expect(await locker.tryAcquire(name, { mode })).toBeNull();
      await lease.release();
    }
  });

  it('a held session lock keeps leases out, exclusive and shared; after its release a waiting lease gets in', async () => {
    const locker = open();
    const leaser = open();
    for (const mode of ['exclusive', 'shared'] as const) {
      const name = `one:lock-first:${mode}`;
      const held = await locker.acquire(name, { mode });
      expect(await leaser.tryLease(name)).toBeNull();
      // The lease waits without spinning: it looks again at a release's NOTIFY or its backing-off poll.
      const sent = await countingStatements(() =>
        expect(leaser.lease(name, { timeoutMs: 500 })).rejects.toBeInstanceOf(LockTimeoutError),
      );
      expect(sent).toBeLessThan(30);
      expect(await leaseLive(name)).toBe(false);
      const waiting = leaser.lease(name, { timeoutMs: 30_000 });
      await eventually(() => leaser.stats().waiting === 1, 15_000, 'the lease to wait');
      expect(await held.release()).toBe(true);
      const lease = await waiting;
      expect(await locker.tryAcquire(name, { mode })).toBeNull();
      await lease.release();
      const again = await locker.tryAcquire(name, { mode });
      expect(again).not.toBeNull();
      await again!.release();
    }
  });

  /**
   * A lease taken while a session lock waiter is queued in PostgreSQL: the lease's transaction holds the
   * key, the waiter queues behind it, the lease commits and PostgreSQL grants the waiter the key. The
   * waiter's statement began before the lease committed: its check must not use that statement's snapshot.
   */
  const grantedInBetween = async (url: string, name: string, mode: 'exclusive' | 'shared' = 'exclusive') => {
    const key = lockKey(name);
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    try {
      await raw.query('BEGIN');
      await raw.query('SELECT pg_advisory_xact_lock($1)', [key]);
      const locker = track(createLocker({ connectionString: url }));
      const waiting = locker.acquire(name, { mode, timeoutMs: 30_000 });
      await eventually(async () => (await queuedFor(name, url)) === 1, 15_000, 'the waiter to queue in PostgreSQL');
      await raw.query(`SELECT * FROM pgfence.lease_acquire($1, $2, 'raw', 1500, NULL)`, [key, name]);
      await raw.query('COMMIT');
      const handle = await waiting;
      // Granted only once the lease is no longer live (it expired: nobody renewed it).
      expect(await leaseLive(name, url)).toBe(false);
      await handle.release();
    } finally {
      await raw.end();
    }
  };

  it('a blocked waiter granted by PostgreSQL while a lease was taken in between stays out until the lease expires', async () => {
    await grantedInBetween(db.url, 'one:in-between-expiry');
    await grantedInBetween(db.url, 'one:in-between-expiry-shared', 'shared');
  });

  it('... also where the server runs REPEATABLE READ by default (the sessions use READ COMMITTED)', async () => {
    const rr = await useMigratedDatabase('one_name_rr');
    const admin = new pg.Client({ connectionString: rr.url });
    await admin.connect();
    await admin.query(`ALTER DATABASE ${rr.name} SET default_transaction_isolation = 'repeatable read'`);
    await admin.end();
    await grantedInBetween(rr.url, 'one:in-between-rr');
  });

  it('a blocked waiter granted by PostgreSQL while a lease was taken in between gets in at the lease\'s release (NOTIFY)', async () => {
    const name = 'one:in-between-release';
    const key = lockKey(name);
    const raw = new pg.Client({ connectionString: db.url });
    await raw.connect();
    try {
      await raw.query('BEGIN');
      await raw.query('SELECT pg_advisory_xact_lock($1)', [key]);
      const locker = open();
      const waiting = locker.acquire(name, { timeoutMs: 30_000 });
      let granted = false;
      void waiting.then(() => (granted = true), () => {});
      await eventually(async () => (await queuedFor(name)) === 1, 15_000, 'the waiter to queue in PostgreSQL');
      const { rows } = await raw.query<{ token: string }>(
        `SELECT token::text FROM pgfence.lease_acquire($1, $2, 'raw', 60000, NULL)`,
        [key, name],
      );
      await raw.query('COMMIT');
      // The waiter gave the key back and now waits announced (a marker), not in PostgreSQL's queue.
      await eventually(async () => (await markersFor(name)) === 1 && (await queuedFor(name)) === 0, 15_000, 'the waiter to announce itself');
      expect(granted).toBe(false);
      expect(locker.stats().waiting).toBe(1);
      const released = await pool.query<{ released: boolean }>(releaseLeaseSql, [key, rows[0]!.token, 0]);
      expect(released.rows[0]!.released).toBe(true);
      const handle = await waiting;
      expect(await leaseLive(name)).toBe(false);
      await handle.release();
    } finally {
      await raw.end();
    }
  });

  it('many session lockers (both modes) and lease takers on one name: no overlap, an unsynchronised counter ends exact', async () => {
    const name = 'one:race';
    await pool.query(`CREATE TABLE sections (id serial PRIMARY KEY, kind text NOT NULL, started timestamptz NOT NULL, ended timestamptz)`);
    const lockers = [open({ maxSessions: 2 }), open({ maxSessions: 1 }), open({ maxSessions: 2 })];
    const kinds = ['exclusive', 'shared', 'lease'] as const;
    let counter = 0;
    let writes = 0;
    let writersInside = 0;
    let sharedInside = 0;
    let violations = 0;
    const section = async (kind: (typeof kinds)[number], handle: LockHandle) => {
      try {
        if (kind === 'shared') sharedInside++;
        else writersInside++;
        if (writersInside > 1 || (writersInside > 0 && sharedInside > 0)) violations++;
        const { rows } = await pool.query<{ id: number }>(`INSERT INTO sections (kind, started) VALUES ($1, clock_timestamp()) RETURNING id`, [kind]);
        if (kind !== 'shared') {
          const seen = counter; // read, yield, write back: lost updates show any overlap
          await sleep(1);
          counter = seen + 1;
          writes++;
        }
        await pool.query(`UPDATE sections SET ended = clock_timestamp() WHERE id = $1`, [rows[0]!.id]);
      } finally {
        if (kind === 'shared') sharedInside--;
        else writersInside--;
        await handle.release();
      }
    };
    const worker = async (locker: Locker, w: number) => {
      for (let i = 0; i < 8; i++) {
        const kind = kinds[(w + i) % kinds.length]!;
        const handle =
          kind === 'lease'
            ? await locker.lease(name, { timeoutMs: 60_000, ttlMs: 10_000 })
            : await locker.acquire(name, { mode: kind, timeoutMs: 60_000 });
        await section(kind, handle);
      }
    };
    await Promise.all(lockers.flatMap((locker, l) => [0, 1, 2, 3].map((w) => worker(locker, l * 4 + w))));
    expect(violations).toBe(0);
    expect(counter).toBe(writes);
    const { rows } = await pool.query<{ n: number; total: number; kinds: number }>(
      `SELECT (SELECT count(*)::int FROM sections a JOIN sections b ON a.id < b.id
                WHERE (a.kind <> 'shared' OR b.kind <> 'shared') AND a.started < b.ended AND b.started < a.ended) AS n,
              (SELECT count(*)::int FROM sections WHERE ended IS NOT NULL) AS total,
              (SELECT count(DISTINCT kind)::int FROM sections) AS kinds`,
    );
    expect(rows[0]).toEqual({ n: 0, total: 96, kinds: 3 });
  });
});

describe("without pgfence's schema", () => {
  it('session locks behave as before: try, shared, and a blocked waiter gets the key at release', async () => {
    const bare = await useTestDatabase('one_name_bare');
    const a = track(createLocker({ connectionString: bare.url }));
    const b = track(createLocker({ connectionString: bare.url }));
    const held = await a.acquire('bare:x');
    expect(await b.tryAcquire('bare:x')).toBeNull();
    const waiting = b.acquire('bare:x', { timeoutMs: 30_000 });
    await eventually(() => b.stats().waiting === 1, 15_000, 'the acquire to wait');
    await held.release();
    await (await waiting).release();
    const s1 = await a.acquire('bare:y', { mode: 'shared' });
    const s2 = await b.acquire('bare:y', { mode: 'shared', timeoutMs: 0 });
    await s1.release();
    await s2.release();
    await expect(a.tryLease('bare:z')).rejects.toMatchObject({ code: 'PGFENCE_NOT_MIGRATED' });
  });
});

describe('a schema migrated while a locker runs', () => {
  it("is found by the locker's sessions within keepaliveMs, busy or idle: then leases keep its locks out", async () => {
    const late = await useTestDatabase('one_name_late');
    const locker = track(createLocker({ connectionString: late.url, keepaliveMs: 200, maxSessions: 1 }));
    // The session connects without the schema, and keeps busy (never idle long enough for a probe).
    const first = await locker.acquire('late:x');
    await first.release();
    let busy = true;
    const churn = (async () => {
      while (busy) await (await locker.acquire('late:churn')).release();
    })();
    try {
      const { migrate } = await import('../src/migrate/index.js');
      await migrate({ connectionString: late.url });
      const leaser = track(createLocker({ connectionString: late.url }));
      const lease = await leaser.lease('late:x');
      await eventually(
        async () => {
          const h = await locker.tryAcquire('late:x');
          await h?.release();
          return h === null;
        },
        15_000,
        'the locker to give way to the lease',
      );
      await lease.release();
    } finally {
      busy = false;
      await churn;
    }
  });
});

describe('pgfence run and pgfence run --lease', () => {
  const MAIN = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));
  const CHILD = fileURLToPath(new URL('./fixtures/cli/child.mjs', import.meta.url));
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'pgfence-one-name-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const pgfence = (args: string[]) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const proc = spawn(process.execPath, [MAIN, ...args], { env: { ...process.env, DATABASE_URL: db.url }, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      proc.on('close', (code) => resolve({ code, stderr }));
    });
  const file = (f: string) => join(dir, f);
  const read = (f: string) => (existsSync(file(f)) ? readFileSync(file(f), 'utf8') : '');
  const interval = (f: string) => ({ start: Number(/start (\d+)/.exec(read(f))![1]), end: Number(/end (\d+)/.exec(read(f))![1]) });

  for (const [first, second] of [
    [[], ['--lease']],
    [['--lease'], []],
  ] as const) {
    const label = `${first.length ? 'lease' : 'lock'}-then-${second.length ? 'lease' : 'lock'}`;
    it(`exclude each other: ${first.length ? '--lease' : 'a session lock'} first, then ${second.length ? '--lease' : 'a session lock'}`, async () => {
      const name = `one:cli:${label}`;
      const backends = async () =>
        (await query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [`pgfence run ${name}`]))[0]!.n;
      // The first holds until its child is killed (no race with a slow start of the second under load).
      const holder = pgfence(['run', name, ...first, '--', process.execPath, CHILD, 'hold', file(`${label}-ready`)]);
      await eventually(() => existsSync(file(`${label}-ready`)), 20_000, 'the first child to start');
      const busy = await pgfence(['run', name, ...second, '--wait', '0', '--', process.execPath, CHILD, 'interval', file(`${label}-busy`), '10']);
      expect(busy.code).toBe(75);
      expect(existsSync(file(`${label}-busy`))).toBe(false);
      const holderBackends = await backends();
      const waited = pgfence(['run', name, ...second, '--wait', '60s', '--', process.execPath, CHILD, 'interval', file(`${label}-b`), '10']);
      await eventually(async () => (await backends()) > holderBackends, 20_000, 'the second to be trying');
      const killedAt = Date.now();
      process.kill(Number(read(`${label}-ready`)), 'SIGKILL');
      expect((await holder).code).toBe(137);
      expect((await waited).code).toBe(0);
      expect(interval(`${label}-b`).start).toBeGreaterThanOrEqual(killedAt);
    });
  }
});
