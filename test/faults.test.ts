import { spawn } from 'node:child_process';
import { once } from 'node:events';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker, LockLostError, lockKey, LockUnavailableError, type LostEvent, migrate, PgfenceError } from '../src/index.js';
import { appName, eventually, freePortUrl, killBackends, queryOnce, track, useMigratedDatabase, useTestDatabase } from './support/db.js';
import { capturingLogger } from './support/log.js';
import { pgDeprecationWarnings } from './support/no-pg-deprecations.js';
import { advisoryLocksOf, markersOf } from './support/server-locks.js';
import { proxyTo, TcpProxy } from './support/tcp-proxy.js';

let db: Awaited<ReturnType<typeof useTestDatabase>>;

beforeAll(async () => {
  db = await useTestDatabase('faults');
});

describe('a killed backend', () => {
  it('aborts the holders, emits lost, frees the lock for others, and the locker carries on', async () => {
    const app = appName('kill');
    const holder = track(createLocker({ connectionString: db.urlWith({ application_name: app }), maxSessions: 1 }));
    const other = track(createLocker({ connectionString: db.url }));
    const lost: LostEvent[] = [];
    holder.on('lost', (ev: LostEvent) => lost.push(ev));

    const h1 = await holder.acquire('fault:kill:1');
    const h2 = await holder.acquire('fault:kill:2', { mode: 'shared' });
    expect(await other.tryAcquire('fault:kill:1')).toBeNull();

    expect(await killBackends(db.url, app)).toBeGreaterThan(0);
    await eventually(() => h1.signal.aborted && h2.signal.aborted, 15_000, 'both signals to abort');
    expect(h1.signal.reason).toBeInstanceOf(LockLostError);
    expect((h1.signal.reason as LockLostError).reason).toBe('session-lost');
    expect(lost.map((e) => e.name).sort()).toEqual(['fault:kill:1', 'fault:kill:2']);
    expect(await h1.release()).toBe(false); // nothing to give back, and no throw

    const taken = await other.acquire('fault:kill:1', { timeoutMs: 10_000 });
    await taken.release();
    // The locker opens a new session for the next lock.
    const again = await holder.acquire('fault:kill:3', { timeoutMs: 10_000 });
    expect(await again.release()).toBe(true);
    expect(holder.stats().lost).toBe(2);
  });
});

describe('a holder process that is SIGKILLed', () => {
  it('leaves the lock re-acquirable', async () => {
    const child = spawn(process.execPath, [new URL('./fixtures/holder.mjs', import.meta.url).pathname, db.url, 'fault:sigkill'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
      expect(chunk.toString()).toContain('held');
      const locker = track(createLocker({ connectionString: db.url }));
      expect(await locker.tryAcquire('fault:sigkill')).toBeNull();
      const waiting = locker.acquire('fault:sigkill', { timeoutMs: 20_000 });
      child.kill('SIGKILL');
      const h = await waiting;
      expect(h.name).toBe('fault:sigkill');
      await h.release();
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('an unreachable database', () => {
  it('rejects acquire and tryAcquire with LockUnavailableError when nothing listens', async () => {
    const locker = track(createLocker({ connectionString: await freePortUrl(db.url) }));
    const err = await locker.acquire('fault:down', { timeoutMs: 5000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockUnavailableError);
    expect((err as Error).cause).toBeDefined();
    await expect(locker.tryAcquire('fault:down')).rejects.toBeInstanceOf(LockUnavailableError);
  });

  it('rejects within the timeout when the network swallows every packet', async () => {
    const target = new URL(db.url);
    const proxy = await new TcpProxy(target.hostname, Number(target.port || 5432)).start();
    proxy.blackhole();
    try {
      const url = new URL(db.url);
      url.port = String(proxy.port);
      const locker = track(createLocker({ connectionString: url.toString(), keepaliveMs: 200 }));
      const started = performance.now();
      const err = await locker.acquire('fault:blackhole:connect', { timeoutMs: 1000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LockUnavailableError);
      expect(performance.now() - started).toBeLessThan(10_000); // it did not hang
    } finally {
      await proxy.close();
    }
  });
});

describe('a connection that ends under the first lease statement', () => {
  // Found by the exploration (an uncaught 57P01 in the runs of seeds 2000 and 3000): the first lease
  // statement checks a pool connection out to see how it is connected, and the pool's own error
  // listener is off while it is out: an ending connection's 'error' went unheard, an uncaught exception.
  it('rejects typed, and no error event goes unhandled', async () => {
    const migrated = await useMigratedDatabase('faults_lease_end');
    const { proxy, url } = await proxyTo(migrated.url);
    try {
      const locker = track(createLocker({ connectionString: url }));
      await locker.inspect(); // a pool connection, idle now: the check below takes it without connecting
      proxy.stall();
      const taking = locker.tryLease('fault:lease-end').catch((e: unknown) => e);
      await eventually(() => proxy.stalled > 0, 15_000, 'the check to be sent');
      proxy.cutAll();
      expect(await taking).toBeInstanceOf(PgfenceError);
      proxy.heal();
    } finally {
      await proxy.close();
    }
  });
});

describe('a server that shuts down as a connection becomes ready', () => {
  // Found by the exploration (an uncaught 57P01 while the server restarted): the shutdown message was read in the
  // chunk that made a new pool connection ready, so it was emitted before the promise of pool.connect() let pgfence
  // listen, with the pool's own listener already off: an uncaught exception.
  it('a pinned session and migrate() reject typed, and nothing goes unheard', async () => {
    const migrated = await useMigratedDatabase('faults_shutdown_ready');
    const { proxy, url } = await proxyTo(migrated.url);
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      proxy.shutDownWhenReady();
      const locker = track(createLocker({ connectionString: url }));
      expect(await locker.acquire('fault:shutdown-ready', { timeoutMs: 1000 }).catch((e: unknown) => e)).toBeInstanceOf(PgfenceError);
      expect(await migrate({ connectionString: url }).catch((e: unknown) => e)).toBeInstanceOf(PgfenceError);
      // Two turns of the event loop: an unheard 'error' event surfaces as an uncaught exception by then.
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      expect(uncaught).toEqual([]);
      proxy.heal();
      // A connection attempt made before heal() may still fail the next acquire (typed): the locker recovers after it.
      await eventually(async () => {
        const handle = await locker.acquire('fault:shutdown-ready', { timeoutMs: 1000 }).catch(() => null);
        return (await handle?.release()) === true;
      }, 15_000, 'a lock once the server answers normally');
    } finally {
      process.off('uncaughtException', onUncaught);
      await proxy.close();
    }
  });
});

describe('the release listener behind a stalled network', () => {
  it('sends one keepalive probe at a time (a query queued behind a busy one is deprecated, gone in pg 9) and gives up at its deadline', async () => {
    const migrated = await useMigratedDatabase('faults_listener');
    const { proxy, url } = await proxyTo(migrated.url);
    try {
      const { entries, logger } = capturingLogger();
      // Probes every 200 ms, each given 2000 ms to answer: a stalled network would queue several.
      const waiter = track(createLocker({ connectionString: url, keepaliveMs: 200, logger }));
      const holder = track(createLocker({ connectionString: migrated.url }));
      const lease = await holder.lease('fault:listener', { ttlMs: 60_000 });
      const waiting = waiter.lease('fault:listener', { timeoutMs: 30_000 }).catch((err: unknown) => err);
      // A waiting lease listens first (on the home session), then announces itself with a marker: LISTEN is in effect.
      await eventually(async () => (await markersOf(migrated.url, lease.key)) > 0, 15_000, 'the wait to be announced');
      proxy.stall();
      // LISTEN lives on the home session: its probe gives up at its deadline, and the session with it.
      await eventually(() => entries.some((e) => e.level === 'warn' && /session lost/.test(e.msg)), 15_000, 'the listening session to be given up');
      expect(pgDeprecationWarnings.map((w) => w.message)).toEqual([]);
      proxy.heal();
      await lease.release();
      const outcome = await waiting;
      if (!(outcome instanceof Error)) await (outcome as { release(): Promise<boolean> }).release();
    } finally {
      proxy.heal();
      await proxy.close();
    }
  });
});

describe('a network blackhole under a held lock', () => {
  it('is reported as a loss within keepalive plus its deadline', async () => {
    const target = new URL(db.url);
    const proxy = await new TcpProxy(target.hostname, Number(target.port || 5432)).start();
    try {
      const url = new URL(db.url);
      url.port = String(proxy.port);
      const keepaliveMs = 200;
      const locker = track(createLocker({ connectionString: url.toString(), keepaliveMs }));
      const lost: LostEvent[] = [];
      locker.on('lost', (ev: LostEvent) => lost.push(ev));
      const h = await locker.acquire('fault:blackhole');
      proxy.blackhole();
      const cut = performance.now();
      await eventually(() => h.signal.aborted, 20_000, 'the loss to be signalled');
      const detectedMs = performance.now() - cut;
      expect(h.signal.reason).toBeInstanceOf(LockLostError);
      expect(lost).toHaveLength(1);
      // keepaliveMs + max(2 x keepaliveMs, 2000): with slack for a loaded machine.
      expect(detectedMs).toBeLessThan(keepaliveMs + 2000 + 3000);
      // Once the server notices (here: the proxy closes its side), the lock is free again.
      proxy.heal();
      proxy.cutAll();
      const other = track(createLocker({ connectionString: db.url }));
      const again = await other.acquire('fault:blackhole', { timeoutMs: 10_000 });
      await again.release();
    } finally {
      await proxy.close();
    }
  });
});

describe('loss detection', () => {
  it('sees a loss within keepaliveMs + the probe deadline of the last answer (the documented bound)', async () => {
    const target = new URL(db.url);
    const proxy = await new TcpProxy(target.hostname, Number(target.port || 5432)).start();
    try {
      const url = new URL(db.url);
      url.port = String(proxy.port);
      const keepaliveMs = 1000;
      const deadlineMs = Math.max(2 * keepaliveMs, 2000);
      const locker = track(createLocker({ connectionString: url.toString(), keepaliveMs, maxSessions: 1 }));
      const h = await locker.acquire(7_000_001n); // a key, not a name: no name-registry traffic on the side
      const session = proxy.toServer[proxy.toServer.length - 1]!.conn;
      const acquiredAt = performance.now();
      // Cut the network right after the answer to a keepalive probe: that answer is the last sign of life.
      await eventually(() => proxy.toClient.some((c) => c.conn === session && c.at > acquiredAt + keepaliveMs / 2), 20_000, 'a probe answered');
      proxy.blackhole();
      const lastAnswerAt = proxy.toClient.filter((c) => c.conn === session).at(-1)!.at;
      let lostAt = 0;
      h.signal.addEventListener('abort', () => (lostAt = performance.now()), { once: true });
      await eventually(() => lostAt > 0, 20_000, 'the loss');
      const detectedMs = lostAt - lastAnswerAt;
      // The bound itself (the loss cannot be seen earlier), with slack for late timers on a loaded machine; a
      // check on a keepaliveMs/4 tick overran it by ~250 ms here.
      expect(detectedMs).toBeGreaterThanOrEqual(keepaliveMs + deadlineMs - 5);
      expect(detectedMs, `seen after ${Math.round(detectedMs)} ms`).toBeLessThan(keepaliveMs + deadlineMs + 200);
    } finally {
      await proxy.close();
    }
  });
});

describe('a lock lost while the holder cannot hear of it', () => {
  it('release() reports false and the signal aborts when the backend died behind a blackhole', async () => {
    const target = new URL(db.url);
    const proxy = await new TcpProxy(target.hostname, Number(target.port || 5432)).start();
    try {
      const app = appName('silent');
      const url = new URL(db.url);
      url.port = String(proxy.port);
      url.searchParams.set('application_name', app);
      // The next keepalive is due after release() is called: the loss is first met by release() itself.
      const holder = track(createLocker({ connectionString: url.toString(), keepaliveMs: 2000 }));
      const other = track(createLocker({ connectionString: db.url }));
      const h = await holder.acquire('fault:silent');
      proxy.blackhole();
      expect(await killBackends(db.url, app)).toBeGreaterThan(0);
      const taken = await other.acquire('fault:silent', { timeoutMs: 15_000 }); // the lock is someone else's now
      expect(await h.release()).toBe(false);
      expect(h.signal.aborted).toBe(true);
      expect(h.signal.reason).toBeInstanceOf(LockLostError);
      await taken.release();
    } finally {
      await proxy.close();
    }
  });

  it('a permit: release() reports false and the signal aborts', async () => {
    const target = new URL(db.url);
    const proxy = await new TcpProxy(target.hostname, Number(target.port || 5432)).start();
    try {
      const app = appName('silentsem');
      const url = new URL(db.url);
      url.port = String(proxy.port);
      url.searchParams.set('application_name', app);
      const holder = track(createLocker({ connectionString: url.toString(), keepaliveMs: 2000 }));
      const other = track(createLocker({ connectionString: db.url }));
      const permit = await holder.semaphore('fault:silent:sem', { permits: 1 }).acquire();
      proxy.blackhole();
      expect(await killBackends(db.url, app)).toBeGreaterThan(0);
      const taken = await other.semaphore('fault:silent:sem', { permits: 1 }).acquire({ timeoutMs: 15_000 });
      expect(await permit.release()).toBe(false);
      expect(permit.signal.reason).toBeInstanceOf(LockLostError);
      await taken.release();
    } finally {
      await proxy.close();
    }
  });

  it('a lease: release() reports false and the signal aborts once another holder has it', async () => {
    const migrated = await useMigratedDatabase('faults_lease');
    const holder = track(createLocker({ connectionString: migrated.url }));
    const other = track(createLocker({ connectionString: migrated.url }));
    const lease = await holder.lease('fault:silent:lease', { ttlMs: 60_000, renew: false });
    // The row is taken over behind the holder's back (its local deadline is far away).
    const admin = new pg.Client({ connectionString: migrated.url });
    await admin.connect();
    try {
      await admin.query('UPDATE pgfence.leases SET expires_at = clock_timestamp() WHERE key = $1', [lease.key]);
    } finally {
      await admin.end();
    }
    const taken = await other.tryLease('fault:silent:lease');
    expect(taken).not.toBeNull();
    expect(lease.signal.aborted).toBe(false);
    expect(await lease.release()).toBe(false);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    await taken!.release();
  });
});

describe('a lease granted in the queue, its answer held up on the way', () => {
  it("is lost by the holder's clock no later than the server lets another take it", async () => {
    const migrated = await useMigratedDatabase('faults_queued_lease');
    const name = 'fault:queued:late-answer';
    const locker = track(createLocker({ connectionString: migrated.url }));
    const other = track(createLocker({ connectionString: migrated.url }));
    const { proxy, url: via } = await proxyTo(migrated.url);
    const waiter = track(createLocker({ connectionString: via }));
    const watcher = new pg.Client({ connectionString: migrated.url });
    await watcher.connect();
    try {
      // A session lock holds the name: the lease waits in PostgreSQL's queue for the key.
      const lock = await locker.acquire(name);
      const leasing = waiter.lease(name, { ttlMs: 1000, renew: false, timeoutMs: 30_000 });
      await eventually(async () => (await advisoryLocksOf(watcher, lockKey(name), false)) > 0, 15_000, 'the lease to wait in the queue');
      proxy.holdReplies();
      await lock.release();
      // Granted on the server; its answer is held until the server's lease has run out.
      const expired = async () =>
        (await watcher.query("SELECT expires_at <= clock_timestamp() AS over FROM pgfence.leases WHERE key = $1 AND released_at IS NULL", [lockKey(name)])).rows[0]?.over === true;
      await eventually(expired, 15_000, 'the granted lease to run out on the server');
      proxy.heal();
      const lease = await leasing;
      // Another holder can take it now: the first must not believe it still holds it.
      const taken = await other.tryLease(name);
      expect(taken).not.toBeNull();
      expect(lease.signal.aborted).toBe(true);
      expect(await lease.release()).toBe(false);
      await taken!.release();
    } finally {
      proxy.heal();
      await watcher.end();
      await waiter.close();
      await proxy.close();
    }
  });
});

describe('a session whose setup statement fails', () => {
  it('is never used: the caller gets LockUnavailableError with the cause, it is logged, and a lease of the name still excludes', async () => {
    const migrated = await useMigratedDatabase('faults_setup');
    // Found before pg_catalog's on this search_path: the setup statement's privilege check fails, nothing else does.
    await queryOnce(
      migrated.url,
      `CREATE SCHEMA shadow;
       CREATE FUNCTION shadow.has_table_privilege(oid, text) RETURNS boolean LANGUAGE plpgsql
         AS $$BEGIN RAISE EXCEPTION 'pgfence test: the setup statement fails'; END$$`,
    );
    const leaser = track(createLocker({ connectionString: migrated.url }));
    const lease = await leaser.lease('fault:setup', { ttlMs: 60_000 });
    const { entries, logger } = capturingLogger();
    const broken = track(
      createLocker({ connectionString: migrated.urlWith({ options: '-c search_path=shadow,pg_catalog,public' }), logger, maxSessions: 1 }),
    );
    const outcome = await broken.acquire('fault:setup', { timeoutMs: 5000 }).catch((err: unknown) => err);
    if (!(outcome instanceof Error)) await (outcome as { release(): Promise<boolean> }).release();
    expect(outcome).toBeInstanceOf(LockUnavailableError);
    expect((outcome as Error).message).toMatch(/setup statement did not succeed: pgfence test: the setup statement fails/);
    const logged = entries.filter((e) => e.level === 'warn' && /setup failed/.test(e.msg));
    expect(logged.map((e) => (e.obj.err as Error).message)).toContain('pgfence test: the setup statement fails');
    // Nothing was taken on the broken session, and the lease is still the only holder of the name.
    expect(await advisoryLocksOf(migrated.url, lockKey('fault:setup'))).toBe(0);
    expect(await lease.release()).toBe(true);
  });
});
