import { createServer, type Socket } from 'node:net';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  createLocker,
  fencedClaim,
  fencedUpdate,
  fencingColumnSql,
  InvalidArgumentError,
  LockerClosedError,
  xactLock,
  LockUnavailableError,
  NestedLockError,
  PgfenceError,
  type Locker,
} from '../src/index.js';
import * as kyselyFencing from '../src/adapters/kysely/index.js';
import { appName, eventually, killBackends, track, useMigratedDatabase } from './support/db.js';

/** Errors that say what happened: a closed locker is not an outage; a refusal names the case and the fix. */

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
const open = () => track(createLocker({ connectionString: db.url }));

beforeAll(async () => {
  db = await useMigratedDatabase('errors');
});

/** The rejection of `p`, or null if it resolved. */
const rejection = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

function expectClosed(err: unknown): void {
  expect((err as PgfenceError).code).toBe('PGFENCE_CLOSED');
  expect(err).toBeInstanceOf(LockerClosedError);
  expect(err).toBeInstanceOf(PgfenceError);
  // Not an outage: code that maps LockUnavailableError to "the database is down" must not see it.
  expect(err).not.toBeInstanceOf(LockUnavailableError);
}

describe('a closed locker', () => {
  it('refuses every kind with PGFENCE_CLOSED, not LockUnavailableError', async () => {
    const locker = open();
    await locker.close();
    expectClosed(await rejection(locker.acquire('closed:lock')));
    expectClosed(await rejection(locker.tryAcquire('closed:lock')));
    expectClosed(await rejection(locker.acquireAll(['closed:a', 'closed:b'])));
    expectClosed(await rejection(locker.lease('closed:lease')));
    expectClosed(await rejection(locker.tryLease('closed:lease')));
    expectClosed(await rejection(locker.semaphore('closed:sem', { permits: 1 }).acquire()));
    expectClosed(await rejection(locker.semaphore('closed:sem', { permits: 1 }).tryAcquire()));
    let thrown: unknown = null;
    try {
      locker.leader('closed:leader');
    } catch (err) {
      thrown = err;
    }
    expectClosed(thrown);
  });

  it('fails the waiters of every kind with PGFENCE_CLOSED when it closes under them', async () => {
    const holder = open();
    const held = [
      await holder.acquire('closing:lock'),
      await holder.lease('closing:lease', { ttlMs: 30_000 }),
      await holder.semaphore('closing:sem', { permits: 1 }).acquire(),
    ];
    const locker = open();
    const waits = [
      rejection(locker.acquire('closing:lock', { timeoutMs: 30_000 })),
      rejection(locker.lease('closing:lease', { timeoutMs: 30_000 })),
      rejection(locker.semaphore('closing:sem', { permits: 1 }).acquire({ timeoutMs: 30_000 })),
    ];
    await eventually(() => locker.stats().waiting === 3, 10_000, 'three waiters');
    await locker.close();
    for (const err of await Promise.all(waits)) expectClosed(err);
    await Promise.all(held.map((h) => h.release()));
  });
});

describe('an unreachable database', () => {
  it('"could not connect within N ms" carries a cause', async () => {
    // A server that accepts and never answers: the connection attempt outlasts the acquire's timeout.
    const sockets = new Set<Socket>();
    const server = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    // keepaliveMs 100: the connection attempt itself gives up after 2 s, so close() does not wait long for it.
    const locker = createLocker({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`, keepaliveMs: 100 });
    try {
      const err = await rejection(locker.acquire('silent', { timeoutMs: 200 }));
      expect(err).toBeInstanceOf(LockUnavailableError);
      // The first try's answer decides (busy is never guessed from a pending connection): the attempt's own
      // failure, with what the driver said as its cause.
      expect((err as Error).message).toMatch(/could not connect to PostgreSQL/);
      expect((err as Error).cause).toBeInstanceOf(Error);
      expect(((err as Error).cause as Error).message).toMatch(/timeout|no answer/i);
    } finally {
      server.close();
      for (const s of sockets) s.destroy();
      await locker.close();
      for (const s of sockets) s.destroy();
    }
  });
});

describe('a timeout names the fix for the kind at hand', () => {
  it('a lock, a lease, a permit, acquireAll and a transaction lock each name their own try', async () => {
    const holder = open();
    const locker = open();
    await holder.acquire('timeout:lock');
    await holder.lease('timeout:lease');
    const sem = holder.semaphore('timeout:sem', { permits: 1 });
    await sem.acquire();
    const messageOf = async (p: Promise<unknown>) => {
      const err = await rejection(p);
      expect(err).toMatchObject({ name: 'LockTimeoutError', code: 'PGFENCE_LOCK_TIMEOUT' });
      return err as { message: string; kind: string };
    };
    const lock = await messageOf(locker.acquire('timeout:lock', { timeoutMs: 0 }));
    expect(lock.message).toMatch(/^lock "timeout:lock" .* not acquired within 0 ms; raise timeoutMs, or use tryAcquire\(\) or tryWithLock\(\)/);
    expect(lock.kind).toBe('lock');
    const lease = await messageOf(locker.withLease('timeout:lease', async () => 1, { timeoutMs: 0 }));
    expect(lease.message).toMatch(/^lease "timeout:lease" .* use tryLease\(\) or tryWithLease\(\)/);
    expect(lease.kind).toBe('lease');
    const permit = await messageOf(locker.semaphore('timeout:sem', { permits: 1 }).acquire({ timeoutMs: 0 }));
    expect(permit.message).toMatch(/^a permit of semaphore "timeout:sem" .* use the semaphore's tryAcquire\(\)/);
    expect(permit.kind).toBe('semaphore');
    const all = await messageOf(locker.acquireAll(['timeout:free', 'timeout:lock'], { timeoutMs: 0 }));
    expect(all.message).toMatch(/^lock "timeout:lock" .* within 0 ms; raise timeoutMs$/);
    // A transaction lock: busy while the holder's session lock on the name is held.
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      const xact = await messageOf(xactLock(other, 'timeout:lock', { timeoutMs: 0 }));
      expect(xact.message).toMatch(/^transaction lock "timeout:lock" .* use tryXactLock\(\)/);
      expect(xact.kind).toBe('xact');
    } finally {
      await other.end();
    }
  });
});

describe('nested locks', () => {
  let locker: Locker;
  beforeAll(() => {
    locker = open();
  });

  it('a permit inside a lock or a lease callback is granted: a permit is a leaf', async () => {
    const sem = locker.semaphore('nested:sem', { permits: 2 });
    await expect(locker.withLock('nested:outer', () => sem.withPermit(async () => 'in a lock'))).resolves.toBe('in a lock');
    await expect(locker.withLease('nested:outer-lease', () => sem.withPermit(async () => 'in a lease'))).resolves.toBe('in a lease');
    await expect(locker.withLock('nested:outer', async () => (await sem.acquire()).release())).resolves.toBe(true);
  });

  it("nothing waits inside a permit's callback: a lock, a lease or another permit there is refused, naming the fixes", async () => {
    const sem = locker.semaphore('nested:leaf', { permits: 2 });
    const other = locker.semaphore('nested:other', { permits: 2 });
    const permit = await rejection(sem.withPermit(() => other.acquire()));
    expect(permit).toBeInstanceOf(NestedLockError);
    const message = (permit as Error).message;
    expect(message).toMatch(/^a permit of semaphore "nested:other" .* was requested inside a callback, which holds a permit of semaphore "nested:leaf"; /);
    expect(message).toMatch(/take the permit outside it, or use the semaphore's tryAcquire\(\) .* or pass \{ allowNested: true \} to the inner call/);
    // acquireAll cannot take a permit: it is not offered as the fix.
    expect(message).not.toMatch(/acquireAll/);
    const lock = await rejection(sem.withPermit(() => locker.acquire('nested:in-permit')));
    expect((lock as Error).message).toMatch(/^lock "nested:in-permit" .* which holds a permit of semaphore "nested:leaf"; .* take both with acquireAll\(\)/);
    expect(await rejection(sem.withPermit(() => locker.lease('nested:in-permit')))).toBeInstanceOf(NestedLockError);
    // The fix works.
    await expect(sem.withPermit(() => other.withPermit(async () => 'ok', { allowNested: true }))).resolves.toBe('ok');
  });

  it('a lease inside a lock callback, and a lock inside a lock callback', async () => {
    const lease = await rejection(locker.withLock('nested:outer2', () => locker.lease('nested:lease')));
    expect((lease as Error).message).toMatch(/^lease "nested:lease" .* which holds lock "nested:outer2" .* take the lease outside it, or use tryLease\(\)/);
    const lock = await rejection(locker.withLease('nested:outer3', () => locker.acquire('nested:inner')));
    expect((lock as Error).message).toMatch(/^lock "nested:inner" .* which holds lease "nested:outer3" .* take both with acquireAll\(\), or use tryAcquire\(\)/);
  });

  it('a request that does not wait (a try, or timeoutMs 0) is allowed inside any callback: it cannot close a cycle', async () => {
    const sem = locker.semaphore('nested:try', { permits: 1 });
    const got = await locker.withLock('nested:try-outer', async () => [
      await locker.tryAcquire('nested:try-lock'),
      await locker.tryLease('nested:try-lease'),
      await locker.acquire('nested:try-zero', { timeoutMs: 0 }),
    ]);
    expect(got.map((h) => h?.name)).toEqual(['nested:try-lock', 'nested:try-lease', 'nested:try-zero']);
    await Promise.all(got.map((h) => h!.release()));
    const inPermit = await sem.withPermit(async () => locker.tryWithLock('nested:try-lock', async () => 'ran'));
    expect(inPermit).toEqual({ acquired: true, value: 'ran' });
  });
});

describe('guarded writes on a table that does not fit, or over a lost connection', () => {
  /** Every way to run a guarded statement: fencedUpdate and fencedClaim, through node-postgres and Kysely. */
  const writers = (client: pg.ClientBase | pg.Pool, kdb: Kysely<any>) => ({
    'fencedUpdate (pg)': (table: string, column?: string) => fencedUpdate(client, { table, set: { v: 'x' }, where: { id: 1 }, token: 5n, column }),
    'fencedClaim (pg)': (table: string, column?: string) => fencedClaim(client, { table, where: { id: 1 }, token: 5n, column }),
    'fencedUpdate (Kysely)': (table: string, column?: string) => kyselyFencing.fencedUpdate(kdb, { table, set: { v: 'x' }, where: { id: 1 }, token: 5n, column }),
    'fencedClaim (Kysely)': (table: string, column?: string) => kyselyFencing.fencedClaim(kdb, { table, where: { id: 1 }, token: 5n, column }),
  });

  it('a missing fencing column: PGFENCE_NOT_MIGRATED, saying how to add it, with the cause', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const kdb = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }) });
    try {
      await pool.query(`CREATE TABLE unfenced (id int PRIMARY KEY, v text); INSERT INTO unfenced VALUES (1, 'a')`);
      for (const [label, write] of Object.entries(writers(pool, kdb))) {
        for (const column of [undefined, 'epoch']) {
          const err = await rejection(write('unfenced', column));
          expect(err, label).toBeInstanceOf(PgfenceError);
          expect((err as PgfenceError).code, label).toBe('PGFENCE_NOT_MIGRATED');
          const sql = fencingColumnSql('unfenced', column === undefined ? undefined : { column });
          expect((err as Error).message, label).toContain(sql);
          expect((err as Error).message, label).toContain('addFencingColumn');
          expect(((err as Error).cause as { code?: string }).code, label).toBe('42703');
        }
      }
      // Once added as it says, the same write goes through.
      await pool.query(fencingColumnSql('unfenced'));
      expect((await fencedUpdate(pool, { table: 'unfenced', set: { v: 'b' }, where: { id: 1 }, token: 5n })).applied).toBe(true);
    } finally {
      await kdb.destroy();
      await pool.end();
    }
  });

  it('a missing table or column: InvalidArgumentError naming the argument, with the cause', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const kdb = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 2 }) }) });
    try {
      for (const [label, write] of Object.entries(writers(pool, kdb))) {
        const err = await rejection(write('no_such_table'));
        expect(err, label).toBeInstanceOf(InvalidArgumentError);
        expect((err as InvalidArgumentError).argument, label).toBe('table');
        expect(((err as Error).cause as { code?: string }).code, label).toBe('42P01');
      }
      await pool.query(`CREATE TABLE fenced_no_v (id int PRIMARY KEY, fencing_token bigint); INSERT INTO fenced_no_v VALUES (1, NULL)`);
      const err = await rejection(fencedUpdate(pool, { table: 'fenced_no_v', set: { v: 'x' }, where: { id: 1 }, token: 5n }));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toContain('column "v"');
      expect(((err as Error).cause as { code?: string }).code).toBe('42703');
    } finally {
      await kdb.destroy();
      await pool.end();
    }
  });

  it('a connection that died: LockUnavailableError with the cause', async () => {
    const app = appName('guarded');
    const client = new pg.Client({ connectionString: db.urlWith({ application_name: app }) });
    client.on('error', () => {}); // the kill below is the point
    await client.connect();
    try {
      await killBackends(db.url, app);
      const err = await rejection(fencedUpdate(client, { table: 'unfenced', set: { v: 'x' }, where: { id: 1 }, token: 5n }));
      expect(err).toBeInstanceOf(LockUnavailableError);
      expect((err as Error).cause).toBeInstanceOf(Error);
      const claim = await rejection(fencedClaim(client, { table: 'unfenced', where: { id: 1 }, token: 5n }));
      expect(claim).toBeInstanceOf(LockUnavailableError);
    } finally {
      await client.end().catch(() => {});
    }
  });
});
