import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocker, fencedUpdate, migrate, PgfenceError, PooledConnectionError, xactLock, tryXactLock } from '../src/index.js';
import { detectPinning } from '../src/session/pooler-detection.js';
import { capabilityMissing } from './support/capability.js';
import { appName, eventually, sleep, track, useTestDatabase } from './support/db.js';
import { proxyTo } from './support/tcp-proxy.js';
import { type Bouncer, pgbouncerUnavailable, startPgBouncer } from './support/pgbouncer.js';

/**
 * A real PgBouncer (1.18 on Debian 12: no protocol-level prepared statements) in front of the test
 * server. Transaction mode shares server connections between clients: session locks must be refused
 * there, and everything transaction-scoped must work through it.
 */
const skipped = capabilityMissing('POOLER TESTS', pgbouncerUnavailable());

const WORKERS = 25;

describe.skipIf(skipped)('behind PgBouncer', () => {
  let db: Awaited<ReturnType<typeof useTestDatabase>>;
  let tx: Bouncer;
  let session: Bouncer;
  const pools: pg.Pool[] = [];

  beforeAll(async () => {
    db = await useTestDatabase('pooler');
    [tx, session] = await Promise.all([startPgBouncer(db.url, 'transaction'), startPgBouncer(db.url, 'session')]);
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    await c.query('CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL, fencing_token bigint NOT NULL DEFAULT 0)');
    await c.query(`INSERT INTO counter VALUES (1, 0), (2, 0), (3, 0)`);
    await c.end();
  }, 60_000);

  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await Promise.all([tx?.stop(), session?.stop()]);
  }, 30_000);

  const pooled = (url: string, max = 10) => {
    const p = new pg.Pool({ connectionString: url, max });
    p.on('error', () => {});
    pools.push(p);
    return p;
  };
  const counter = async (id: number) => (await pooled(db.url, 1).query('SELECT n FROM counter WHERE id = $1', [id])).rows[0].n as number;

  it('migrate() works through transaction pooling', async () => {
    const first = await migrate({ connectionString: tx.url(db.url) });
    expect(first.applied.length).toBeGreaterThan(0);
    expect((await migrate({ connectionString: tx.url(db.url) })).applied).toEqual([]);
  });

  it('session locks are refused with PGFENCE_POOLED_CONNECTION, naming the kinds that work through the pooler', async () => {
    const locker = track(createLocker({ connectionString: tx.url(db.url) }));
    const first = await locker.acquire('pool:session').catch((e: unknown) => e);
    expect(first).toBeInstanceOf(PooledConnectionError);
    expect((first as PooledConnectionError).code).toBe('PGFENCE_POOLED_CONNECTION');
    for (const named of [/directConnectionString/, /xactLock/, /leases/, /semaphores/, /leader election/]) expect((first as Error).message).toMatch(named);
    await expect(locker.tryAcquire('pool:session')).rejects.toBeInstanceOf(PooledConnectionError);
    await expect(locker.acquireAll(['pool:a', 'pool:b'])).rejects.toBeInstanceOf(PooledConnectionError);
    // Nothing was left on the pooled server connections.
    const { rows } = await pooled(db.url, 1).query(`SELECT count(*)::int AS n FROM pg_locks
        WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
    expect(rows[0].n).toBe(0);
  });

  it('lockers that start together behind it all refuse session locks (their detections do not fool each other)', async () => {
    // Several lockers' first statements at once: each detection's second connection may be handed the server
    // another detection just let go, so its own server looks held for it alone (a session pool) unless the
    // detections cannot interleave.
    for (let round = 0; round < 4; round++) {
      const lockers = Array.from({ length: 4 }, () => track(createLocker({ connectionString: tx.url(db.url) })));
      const answers = await Promise.all(lockers.map((l, i) => l.tryAcquire(`pool:together:${round}:${i}`).catch((e: unknown) => e)));
      for (const answer of answers) expect(answer).toBeInstanceOf(PooledConnectionError);
      await Promise.all(lockers.map((l) => l.close()));
    }
  });

  it("a detection sees another process's detection on its server, though its own second connection never gets that server", async () => {
    // One server behind this pooler, so every pooled statement runs on it. This detection's second connection goes
    // around the pooler: only the other detection's marks on the shared server can show that it is shared.
    const single = await startPgBouncer(db.url, 'transaction', { defaultPoolSize: 1 });
    const connect = async (url: string) => {
      const c = new pg.Client({ connectionString: url });
      c.on('error', () => {});
      await c.connect();
      return c;
    };
    const first = await connect(single.url(db.url));
    try {
      vi.resetModules(); // a second copy of the module: its detections do not take turns with this one's (another process)
      const elsewhere = await import('../src/session/pooler-detection.js');
      const pinning = await detectPinning(first, async () => {
        const theirs = await connect(single.url(db.url));
        try {
          expect(await elsewhere.detectPinning(theirs, () => connect(single.url(db.url)))).toBe('transaction-pooled');
        } finally {
          await theirs.end();
        }
        return connect(db.url);
      });
      expect(pinning).toBe('transaction-pooled');
    } finally {
      await first.end();
      await single.stop();
    }
  });

  it("a detection whose second connection stops answering ends within the locker's deadline, and a later pin detects again", async () => {
    // A proxy in front of the session-mode pooler: the detection's second connection (the second connection made)
    // is answered at startup, then goes silent. A detection waiting on it for ever would hold up every later pin.
    const { proxy, url } = await proxyTo(session.url(db.url));
    try {
      proxy.silenceAfterStartup(1);
      const locker = track(createLocker({ connectionString: url, keepaliveMs: 1000 }));
      expect(await locker.acquire('pool:detect-silent', { timeoutMs: 1000 }).catch((e: unknown) => e)).toBeInstanceOf(PgfenceError);
      await eventually(async () => {
        const handle = await locker.acquire('pool:detect-silent', { timeoutMs: 1000 }).catch(() => null);
        return (await handle?.release()) === true;
      }, 20_000, 'a session lock once the silent detection has ended');
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it('semaphores work through the pooler (lease-backed permits, the default there): never more holders than permits', async () => {
    const lockers = [0, 1].map(() => track(createLocker({ connectionString: tx.url(db.url) })));
    let inside = 0;
    let maxInside = 0;
    let allInside!: () => void;
    const twoInside = new Promise<void>((resolve) => (allInside = resolve));
    await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        const sem = lockers[w % 2]!.semaphore('pool:sem', { permits: 2 });
        await sem.withPermit(
          async (permit) => {
            expect(permit.token).toBeTypeOf('bigint');
            inside++;
            maxInside = Math.max(maxInside, inside);
            if (inside === 2) allInside();
            await Promise.race([twoInside, sleep(10_000)]);
            inside--;
          },
          { timeoutMs: 60_000 },
        );
      }),
    );
    expect(maxInside).toBe(2);
    // No advisory lock is left (or was ever kept) on the shared server connections.
    const { rows } = await pooled(db.url, 1).query(`SELECT count(*)::int AS n FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
    expect(rows[0].n).toBe(0);
  }, 90_000);

  it('leader election works through the pooler (lease-only): one leader, the next elected once it resigns', async () => {
    const [a, b] = [0, 1].map(() => track(createLocker({ connectionString: tx.url(db.url) })));
    const ea = a!.leader('pool:leader', { ttlMs: 2000 });
    const epochA = await ea.whenElected({ signal: AbortSignal.timeout(20_000) });
    const eb = b!.leader('pool:leader', { ttlMs: 2000 });
    // b campaigns for longer than a's lease TTL: a renews, and b is never elected meanwhile.
    await expect(eb.whenElected({ signal: AbortSignal.timeout(3000) })).rejects.toThrow();
    expect(ea.isLeader).toBe(true);
    expect(eb.isLeader).toBe(false);
    await ea.resign();
    const epochB = await eb.whenElected({ signal: AbortSignal.timeout(20_000) });
    expect(epochB > epochA).toBe(true);
    await eb.resign();
  }, 60_000);

  it('a session-mode pooler keeps one backend per client: session locks work through it', async () => {
    const a = track(createLocker({ connectionString: session.url(db.url) }));
    const b = track(createLocker({ connectionString: session.url(db.url) }));
    const h = await a.acquire('pool:session-mode');
    expect(await b.tryAcquire('pool:session-mode')).toBeNull();
    await h.release();
    const h2 = await b.acquire('pool:session-mode');
    await h2.release();
  });

  it(`xactLock: 2 lockers x ${WORKERS} workers over an unsynchronised counter end exact`, async () => {
    const rounds = 4;
    const worker = async (pool: pg.Pool, w: number) => {
      for (let r = 0; r < rounds; r++) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          const lock = (w + r) % 2 === 0 ? await xactLock(client, 'pool:xact', { timeoutMs: 30_000 }) : await tryXactLockLoop(client);
          expect(lock.key).toBeTypeOf('bigint');
          const n = (await client.query('SELECT n FROM counter WHERE id = 1')).rows[0].n as number;
          await client.query('UPDATE counter SET n = $1 WHERE id = 1', [n + 1]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        } finally {
          client.release();
        }
      }
    };
    const lockers = [pooled(tx.url(db.url)), pooled(tx.url(db.url))];
    await Promise.all(lockers.flatMap((p) => Array.from({ length: WORKERS }, (_, w) => worker(p, w))));
    expect(await counter(1)).toBe(2 * WORKERS * rounds);
  }, 60_000);

  it(`leases: 2 lockers x ${WORKERS} workers end exact, and their fenced writes apply (waits poll: no LISTEN through the pooler)`, async () => {
    const lockers = [0, 1].map(() => track(createLocker({ connectionString: tx.url(db.url) })));
    const writes = pooled(tx.url(db.url));
    const worker = (locker: (typeof lockers)[number]) =>
      locker.withLease(
        'pool:lease',
        async (lease) => {
          const n = (await writes.query('SELECT n FROM counter WHERE id = 2')).rows[0].n as number;
          const res = await fencedUpdate(writes, { table: 'counter', set: { n: n + 1 }, where: { id: 2 }, token: lease.token! });
          expect(res.applied).toBe(true);
        },
        { timeoutMs: 60_000, ttlMs: 10_000 },
      );
    await Promise.all(lockers.flatMap((l) => Array.from({ length: WORKERS }, () => worker(l))));
    expect(await counter(2)).toBe(2 * WORKERS);
  }, 90_000);

  it('with directConnectionString, a lease pins nothing: it goes through the pooler, not on a direct session', async () => {
    const app = appName('direct-lease');
    const locker = track(createLocker({ connectionString: tx.url(db.url), directConnectionString: db.urlWith({ application_name: app }) }));
    const lease = await locker.lease('pool:direct-lease', { ttlMs: 30_000 });
    const { rows } = await pooled(db.url, 1).query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [app]);
    expect(rows[0].n).toBe(0);
    expect(await lease.release()).toBe(true);
  });

  it('with directConnectionString, session locks work (pinned sessions direct, the rest through the pooler)', async () => {
    const app = appName('direct');
    const lockers = [0, 1].map(() =>
      track(createLocker({ connectionString: tx.url(db.url), directConnectionString: db.urlWith({ application_name: app }) })),
    );
    const c = pooled(tx.url(db.url));
    const worker = (locker: (typeof lockers)[number]) =>
      locker.withLock(
        'pool:direct',
        async () => {
          const n = (await c.query('SELECT n FROM counter WHERE id = 3')).rows[0].n as number;
          await c.query('UPDATE counter SET n = $1 WHERE id = 3', [n + 1]);
        },
        { timeoutMs: 60_000 },
      );
    await Promise.all(lockers.flatMap((l) => Array.from({ length: WORKERS }, () => worker(l))));
    expect(await counter(3)).toBe(2 * WORKERS);
    // The pinned sessions are the direct ones.
    const { rows } = await pooled(db.url, 1).query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [app]);
    expect(rows[0].n).toBeGreaterThan(0);
  }, 60_000);
});

describe.skipIf(skipped)('pgfence status behind PgBouncer', () => {
  it('says when the connection it reads through is a transaction pooler', async () => {
    const db = await useTestDatabase('pooler_status');
    const tx = await startPgBouncer(db.url, 'transaction');
    try {
      const main = new URL('../dist/cli/main.js', import.meta.url).pathname;
      const status = async (url: string, ...flags: string[]) =>
        (await promisify(execFile)(process.execPath, [main, 'status', '--database-url', url, ...flags])).stdout;
      expect(JSON.parse(await status(tx.url(db.url), '--json')).connection).toBe('transaction-pooled');
      expect(await status(tx.url(db.url))).toMatch(/connection: through a transaction pooler/);
      expect(JSON.parse(await status(db.url, '--json')).connection).toBe('direct');
      expect(await status(db.url)).not.toMatch(/pooler/);
    } finally {
      await tx.stop();
    }
  });
});

/** tryXactLock until it grants (exercises the try path through the pooler too). */
async function tryXactLockLoop(client: pg.PoolClient) {
  for (;;) {
    const got = await tryXactLock(client, 'pool:xact');
    if (got) return got;
    await new Promise((r) => setTimeout(r, 5));
  }
}
