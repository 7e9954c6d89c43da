import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLocker,
  fencedClaim,
  fencedUpdate,
  fencingColumnSql,
  InvalidArgumentError,
  lockKey,
  xactLock,
} from '../src/index.js';
import * as kyselyLocks from '../src/adapters/kysely/index.js';
import { migrate } from '../src/migrate/index.js';
import { eventually, sleep, track, useMigratedDatabase } from './support/db.js';
import { startEmbedded } from './support/server.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
const open = () => track(createLocker({ connectionString: db.url }));

beforeAll(async () => {
  db = await useMigratedDatabase('fencing');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
});
afterAll(async () => {
  await pool.end();
});

const isIncreasing = (xs: bigint[]) => xs.every((x, i) => i === 0 || x > xs[i - 1]!);

describe('fencing tokens', () => {
  it('strictly increase in grant order under 20 competing workers, one counter per key for every kind', async () => {
    const lockersOf = [open(), open(), open()];
    const grants: bigint[] = [];
    await Promise.all(
      Array.from({ length: 20 }, async (_, w) => {
        for (let i = 0; i < 5; i++) {
          await lockersOf[w % 3]!.withLock('fence:counter', async (h) => void grants.push(h.token!), { fencing: true, timeoutMs: 60_000 });
        }
      }),
    );
    expect(grants).toHaveLength(100);
    expect(isIncreasing(grants)).toBe(true);

    // Transaction locks (pg and Kysely) and leases draw from the same counter.
    const client = await pool.connect();
    await client.query('BEGIN');
    const x = await xactLock(client, 'fence:counter', { fencing: true });
    await client.query('COMMIT');
    client.release();
    const kdb = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 1 }) }) });
    const k = await kdb.transaction().execute((trx) => kyselyLocks.xactLock(trx, 'fence:counter', { fencing: true }));
    const tk = await kdb.transaction().execute((trx) => kyselyLocks.tryXactLock(trx, 'fence:counter', { fencing: true }));
    await kdb.destroy();
    const lease = await lockersOf[0]!.lease('fence:counter');
    await lease.release();
    const after = [x.token!, k.token!, tk!.token!, lease.token];
    expect(isIncreasing([grants.at(-1)!, ...after])).toBe(true);
  });

  it('increase across release and lease expiry', async () => {
    const a = open();
    const b = open();
    const h1 = await a.acquire('fence:expiry', { fencing: true });
    await h1.release();
    const h2 = await b.acquire('fence:expiry', { fencing: true });
    await h2.release();
    const l1 = await a.lease('fence:expiry', { ttlMs: 150, renew: false });
    await sleep(300); // expires without release
    expect(l1.signal.aborted).toBe(true);
    const l2 = await b.lease('fence:expiry', { timeoutMs: 5000 });
    await l2.release();
    expect(isIncreasing([h1.token!, h2.token!, l1.token, l2.token])).toBe(true);
  });

  it('an unfenced acquire issues no token', async () => {
    const h = await open().acquire('fence:none');
    expect(h.token).toBeNull();
    await h.release();
  });

  it('tell the caller to migrate when the schema is missing', async () => {
    const bare = await import('./support/db.js').then((m) => m.useTestDatabase('fencing_bare'));
    const locker = track(createLocker({ connectionString: bare.url }));
    await expect(locker.acquire('x', { fencing: true })).rejects.toMatchObject({ code: 'PGFENCE_NOT_MIGRATED' });
    await expect(locker.lease('x')).rejects.toMatchObject({ code: 'PGFENCE_NOT_MIGRATED' });
    // The failed fenced try left no lock behind.
    const h = await locker.tryAcquire('x');
    expect(h).not.toBeNull();
    await h!.release();
  });
});

describe('guarded writes', () => {
  beforeAll(async () => {
    await pool.query(`CREATE SCHEMA app; CREATE TABLE app.orders (id int PRIMARY KEY, status text, note text)`);
    await pool.query(fencingColumnSql('app.orders'));
    await pool.query(`INSERT INTO app.orders (id, status) VALUES (1, 'new'), (2, 'new')`);
  });

  it('apply with the current token, again with the same token, and refuse an older one', async () => {
    const one = { applied: true, written: 1, refused: 0 };
    expect(await fencedUpdate(pool, { table: 'app.orders', set: { status: 'paid' }, where: { id: 1 }, token: 5n })).toEqual(one);
    expect(await fencedUpdate(pool, { table: 'app.orders', set: { note: 'x' }, where: { id: 1 }, token: 5n })).toEqual(one);
    expect(await fencedUpdate(pool, { table: 'app.orders', set: { status: 'stale' }, where: { id: 1 }, token: 4n })).toEqual({
      applied: false,
      written: 0,
      refused: 1,
      reason: 'stale',
      currentToken: 5n,
    });
    expect(await fencedUpdate(pool, { table: 'app.orders', set: { status: 'gone' }, where: { id: 99 }, token: 9n })).toEqual({
      applied: false,
      written: 0,
      refused: 0,
      reason: 'missing',
    });
    const { rows } = await pool.query(`SELECT status, note, fencing_token FROM app.orders WHERE id = 1`);
    expect(rows[0]).toEqual({ status: 'paid', note: 'x', fencing_token: '5' });
  });

  it('pass values as parameters, never as SQL', async () => {
    const evil = `'); DROP TABLE app.orders; --`;
    expect((await fencedUpdate(pool, { table: 'app.orders', set: { note: evil }, where: { id: 2 }, token: 1n })).applied).toBe(true);
    const { rows } = await pool.query(`SELECT note FROM app.orders WHERE id = 2`);
    expect(rows[0].note).toBe(evil);
  });

  it.each<[string, object]>([
    ['an injection-shaped table', { table: 'orders; DROP TABLE x', set: { a: 1 }, where: { id: 1 }, token: 1n }],
    ['a quoted table', { table: '"orders"', set: { a: 1 }, where: { id: 1 }, token: 1n }],
    ['three-part table', { table: 'a.b.c', set: { a: 1 }, where: { id: 1 }, token: 1n }],
    ['an injection-shaped column', { table: 'app.orders', set: { 'a = 1 --': 1 }, where: { id: 1 }, token: 1n }],
    ['a bad where column', { table: 'app.orders', set: { note: 1 }, where: { 'id OR 1=1': 1 }, token: 1n }],
    ['an empty where', { table: 'app.orders', set: { note: 1 }, where: {}, token: 1n }],
    ['a number token', { table: 'app.orders', set: { note: 1 }, where: { id: 1 }, token: 5 }],
    ['a zero token', { table: 'app.orders', set: { note: 1 }, where: { id: 1 }, token: 0n }],
    ['a negative token', { table: 'app.orders', set: { note: 1 }, where: { id: 1 }, token: -3n }],
    ['an undefined value', { table: 'app.orders', set: { note: undefined }, where: { id: 1 }, token: 1n }],
    ['the fencing column in set', { table: 'app.orders', set: { fencing_token: 9n }, where: { id: 1 }, token: 1n }],
    ['a bad column option', { table: 'app.orders', set: { note: 1 }, where: { id: 1 }, token: 1n, column: 'x y' }],
  ])('refuse %s before any I/O', async (_label, spec) => {
    await expect(fencedUpdate(pool, spec as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('fencingColumnSql refuses odd identifiers', () => {
    expect(() => fencingColumnSql('x"; DROP TABLE y; --')).toThrow(InvalidArgumentError);
    expect(() => fencingColumnSql('orders', { column: '1abc' })).toThrow(InvalidArgumentError);
    expect(() => fencingColumnSql('orders', { enforce: 'yes' as never })).toThrow(InvalidArgumentError);
  });
});

describe('a guarded write over several rows', () => {
  it('reports how many rows it wrote and how many a newer token kept, and is applied only when it wrote them all', async () => {
    await pool.query(`CREATE TABLE shipments (id int PRIMARY KEY, batch int, state text)`);
    await pool.query(fencingColumnSql('shipments'));
    await pool.query(`INSERT INTO shipments VALUES (1, 7, 'new', 3), (2, 7, 'new', 10), (3, 8, 'new', NULL)`);

    const partial = await fencedUpdate(pool, { table: 'shipments', set: { state: 'sent' }, where: { batch: 7 }, token: 5n });
    expect(partial).toEqual({ applied: false, written: 1, refused: 1, reason: 'stale', currentToken: 10n });
    const { rows } = await pool.query(`SELECT id, state, fencing_token FROM shipments WHERE batch = 7 ORDER BY id`);
    expect(rows).toEqual([
      { id: 1, state: 'sent', fencing_token: '5' }, // token 3 row: written
      { id: 2, state: 'new', fencing_token: '10' }, // token 10 row: kept
    ]);

    expect(await fencedUpdate(pool, { table: 'shipments', set: { state: 'done' }, where: { batch: 7 }, token: 10n })).toEqual({
      applied: true,
      written: 2,
      refused: 0,
    });
    expect(await fencedUpdate(pool, { table: 'shipments', set: { state: 'x' }, where: { batch: 7 }, token: 4n })).toEqual({
      applied: false,
      written: 0,
      refused: 2,
      reason: 'stale',
      currentToken: 10n,
    });
    expect(await fencedUpdate(pool, { table: 'shipments', set: { state: 'x' }, where: { batch: 9 }, token: 4n })).toEqual({
      applied: false,
      written: 0,
      refused: 0,
      reason: 'missing',
    });
  });
});

describe('a fenced read-modify-write', () => {
  // A holds token 1, its lease expires, B takes over with token 2: both increment one counter.
  const A = 1n;
  const B = 2n;
  beforeAll(async () => {
    await pool.query(`CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL)`);
    await pool.query(fencingColumnSql('counters'));
  });
  const reset = () => pool.query(`INSERT INTO counters VALUES (1, 0, NULL) ON CONFLICT (id) DO UPDATE SET n = 0, fencing_token = NULL`);
  const counter = async () => (await pool.query(`SELECT n FROM counters WHERE id = 1`)).rows[0].n as number;
  const increment = (n: number, token: bigint) => fencedUpdate(pool, { table: 'counters', set: { n: n + 1 }, where: { id: 1 }, token });

  it('loses an increment when the stale holder reads, then writes first, with a plain read and fencedUpdate', async () => {
    await reset();
    const readA = await counter(); // A reads 0; then its lease expires
    const readB = await counter(); // B (token 2) reads 0
    const writeA = await increment(readA, A); // no newer token on the row yet: applied
    const writeB = await increment(readB, B);
    expect([writeA.applied, writeB.applied]).toEqual([true, true]);
    expect(await counter()).toBe(1); // two increments acknowledged, one kept: the hazard fencedClaim removes
  });

  it('loses none when each holder claims the row with its token before reading it (fencedClaim)', async () => {
    await reset();
    const claimA = await fencedClaim<{ id: number; n: number }>(pool, { table: 'counters', where: { id: 1 }, token: A });
    expect(claimA).toEqual({ claimed: true, rows: [{ id: 1, n: 0, fencing_token: 1n }], refused: 0 });
    const claimB = await fencedClaim<{ id: number; n: number }>(pool, { table: 'counters', where: { id: 1 }, token: B });
    expect(claimB.claimed).toBe(true);
    const writeA = await increment(claimA.rows[0]!.n, A); // B's claim stamped token 2: refused
    const writeB = await increment(claimB.rows[0]!.n, B);
    expect(writeA).toEqual({ applied: false, written: 0, refused: 1, reason: 'stale', currentToken: B });
    expect(writeB.applied).toBe(true);
    expect(await counter()).toBe(1); // one increment acknowledged, one kept
  });

  it('refuses a claim by an older token once a newer one has claimed the row, and reports a missing row', async () => {
    await reset();
    expect((await fencedClaim(pool, { table: 'counters', where: { id: 1 }, token: B })).claimed).toBe(true);
    expect(await fencedClaim(pool, { table: 'counters', where: { id: 1 }, token: A })).toEqual({
      claimed: false,
      rows: [],
      refused: 1,
      reason: 'stale',
      currentToken: B,
    });
    // The same holder may claim again.
    expect((await fencedClaim(pool, { table: 'counters', where: { id: 1 }, token: B })).claimed).toBe(true);
    expect(await fencedClaim(pool, { table: 'counters', where: { id: 404 }, token: B })).toEqual({
      claimed: false,
      rows: [],
      refused: 0,
      reason: 'missing',
    });
  });

  it('inside a transaction, a newer claim waits for the older claimant to commit and reads its write', async () => {
    await reset();
    const [a, b] = await Promise.all([pool.connect(), pool.connect()]);
    try {
      await a.query('BEGIN');
      const claimA = await fencedClaim<{ n: number }>(a, { table: 'counters', where: { id: 1 }, token: A });
      await b.query('BEGIN');
      const claimB = fencedClaim<{ n: number }>(b, { table: 'counters', where: { id: 1 }, token: B });
      await eventually(async () => (await lockWaiters()) === 1, 15_000, "B's claim to wait for A's row lock");
      await fencedUpdate(a, { table: 'counters', set: { n: claimA.rows[0]!.n + 1 }, where: { id: 1 }, token: A });
      await a.query('COMMIT');
      const claimedB = await claimB;
      expect(claimedB.rows[0]!.n).toBe(1); // B reads A's committed increment
      await fencedUpdate(b, { table: 'counters', set: { n: claimedB.rows[0]!.n + 1 }, where: { id: 1 }, token: B });
      await b.query('COMMIT');
      expect(await counter()).toBe(2);
    } finally {
      a.release();
      b.release();
    }
  });

  it('works on tables whose names match the words of its own SQL', async () => {
    for (const table of ['updated', 'claimed', 'seen']) {
      await pool.query(`CREATE TABLE ${table} (id int PRIMARY KEY, n int)`);
      await pool.query(fencingColumnSql(table));
      await pool.query(`INSERT INTO ${table} VALUES (1, 0, 5), (2, 0, NULL)`);
      expect(await fencedUpdate(pool, { table, set: { n: 1 }, where: { id: 1 }, token: 4n })).toEqual({
        applied: false,
        written: 0,
        refused: 1,
        reason: 'stale',
        currentToken: 5n,
      });
      expect(await fencedClaim(pool, { table, where: { id: 1 }, token: 4n })).toMatchObject({ claimed: false, refused: 1, currentToken: 5n });
      expect(await fencedClaim(pool, { table, where: { id: 2 }, token: 4n })).toEqual({
        claimed: true,
        rows: [{ id: 2, n: 0, fencing_token: 4n }],
        refused: 0,
      });
    }
  });

  it.each<[string, object]>([
    ['an injection-shaped table', { table: 'counters; DROP TABLE x', where: { id: 1 }, token: 1n }],
    ['a bad where column', { table: 'counters', where: { 'id OR 1=1': 1 }, token: 1n }],
    ['an empty where', { table: 'counters', where: {}, token: 1n }],
    ['a number token', { table: 'counters', where: { id: 1 }, token: 1 }],
    ['a zero token', { table: 'counters', where: { id: 1 }, token: 0n }],
    ['an undefined value', { table: 'counters', where: { id: undefined }, token: 1n }],
    ['a set (a claim writes only the token)', { table: 'counters', set: { n: 5 }, where: { id: 1 }, token: 1n }],
    ['a bad column option', { table: 'counters', where: { id: 1 }, token: 1n, column: 'x y' }],
  ])('fencedClaim refuses %s before any I/O', async (_label, spec) => {
    const noIo = { query: () => Promise.reject(new Error('no I/O expected')) };
    await expect(fencedClaim(noIo as never, spec as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

async function lockWaiters(): Promise<number> {
  const { rows } = await pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`);
  return rows[0].n;
}

describe('the enforcing trigger', () => {
  it('makes the table refuse a raw SQL write with an older token, whoever writes', async () => {
    await pool.query(`CREATE TABLE ledgers (id int PRIMARY KEY, balance int)`);
    await pool.query(fencingColumnSql('ledgers', { enforce: true }));
    await pool.query(fencingColumnSql('ledgers', { enforce: true })); // idempotent
    await pool.query(`INSERT INTO ledgers VALUES (1, 100, NULL)`);
    await pool.query(`UPDATE ledgers SET balance = 90, fencing_token = 7 WHERE id = 1`);
    await expect(pool.query(`UPDATE ledgers SET balance = 0, fencing_token = 6 WHERE id = 1`)).rejects.toMatchObject({ code: 'PGF01' });
    await expect(pool.query(`UPDATE ledgers SET balance = 0, fencing_token = NULL WHERE id = 1`)).rejects.toMatchObject({ code: 'PGF01' });
    await pool.query(`UPDATE ledgers SET balance = 80 WHERE id = 1`); // the token is left as it is: allowed
    await pool.query(`UPDATE ledgers SET balance = 70, fencing_token = 8 WHERE id = 1`);
    const { rows } = await pool.query(`SELECT balance, fencing_token FROM ledgers`);
    expect(rows[0]).toEqual({ balance: 70, fencing_token: '8' });
  });
});

describe('a holder paused past its lease', () => {
  it('is refused by the database when it resumes, while an unfenced write silently overwrites', async () => {
    await pool.query(`CREATE TABLE docs (id int PRIMARY KEY, body text)`);
    await pool.query(fencingColumnSql('docs'));
    await pool.query(`CREATE TABLE docs_unfenced (id int PRIMARY KEY, body text)`);
    await pool.query(`INSERT INTO docs VALUES (1, 'v0', NULL); INSERT INTO docs_unfenced VALUES (1, 'v0')`);

    const ttlMs = 800;
    const child = spawn(process.execPath, [new URL('./fixtures/paused-holder.mjs', import.meta.url).pathname, db.url, 'doc:1', String(ttlMs)], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    try {
      const first = JSON.parse((await lines.next()).value as string) as { token: string };
      child.kill('SIGSTOP');
      const contender = open();
      const lease = await contender.lease('doc:1', { timeoutMs: 20_000 }); // granted once the paused lease expires
      expect(lease.token).toBeGreaterThan(BigInt(first.token));
      expect(await fencedUpdate(pool, { table: 'docs', set: { body: 'written by the new holder' }, where: { id: 1 }, token: lease.token })).toEqual({
        applied: true,
        written: 1,
        refused: 0,
      });
      await pool.query(`UPDATE docs_unfenced SET body = 'written by the new holder' WHERE id = 1`);

      child.kill('SIGCONT');
      child.stdin!.write('write\n');
      const result = JSON.parse((await lines.next()).value as string) as {
        fenced: { applied: boolean; reason?: string; currentToken?: string };
        controlRows: number;
      };
      expect(result.fenced).toEqual({ applied: false, written: 0, refused: 1, reason: 'stale', currentToken: String(lease.token) });
      expect(result.controlRows).toBe(1);
      const fenced = await pool.query(`SELECT body FROM docs WHERE id = 1`);
      const control = await pool.query(`SELECT body FROM docs_unfenced WHERE id = 1`);
      expect(fenced.rows[0].body).toBe('written by the new holder'); // protected
      expect(control.rows[0].body).toBe('written by the paused holder'); // the lost update fencing prevents
      await lease.release();
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('a server restart', () => {
  it('keeps tokens increasing and signals the loss of held locks', async () => {
    const server = await startEmbedded();
    try {
      await migrate({ connectionString: server.url });
      const locker = createLocker({ connectionString: server.url, keepaliveMs: 200 });
      // A name is one lock whatever its kind: the lock goes back before the lease of its name is taken.
      const first = await locker.acquire('restart:key', { fencing: true });
      await first.release();
      const lease = await locker.lease('restart:key', { ttlMs: 60_000 });
      const before = await locker.acquire('restart:other', { fencing: true });
      await server.restart();
      for (let i = 0; i < 100 && !before.signal.aborted; i++) await sleep(50);
      expect(before.signal.aborted).toBe(true);
      expect(await lease.release()).toBe(true); // the lease outlives the restart
      const after = await locker.acquire('restart:key', { fencing: true, timeoutMs: 20_000 });
      expect(after.token).toBeGreaterThan(lease.token);
      expect(lease.token).toBeGreaterThan(first.token!);
      await after.release();
      await locker.close();
    } finally {
      await server.stop();
    }
  });
});

describe('lockKey is what the database sees', () => {
  it('tokens are kept per key', async () => {
    const h = await open().acquire('fence:keyed', { fencing: true });
    const { rows } = await pool.query(`SELECT token FROM pgfence.fencing_tokens WHERE key = $1`, [lockKey('fence:keyed')]);
    expect(BigInt(rows[0].token)).toBe(h.token);
    await h.release();
  });
});

describe('token exhaustion', () => {
  it('issues the int64 maximum once, then refuses rather than wrap, and leaves no lock behind', async () => {
    const locker = open();
    const key = lockKey('fence:exhausted');
    await pool.query(`INSERT INTO pgfence.fencing_tokens (key, token) VALUES ($1, 9223372036854775806)`, [key]);
    const last = await locker.acquire('fence:exhausted', { fencing: true });
    expect(last.token).toBe(2n ** 63n - 1n);
    await last.release();
    await expect(locker.acquire('fence:exhausted', { fencing: true })).rejects.toMatchObject({ code: 'PGFENCE_TOKENS_EXHAUSTED' });
    await expect(locker.lease('fence:exhausted')).rejects.toMatchObject({ code: 'PGFENCE_TOKENS_EXHAUSTED' });
    const h = await open().tryAcquire('fence:exhausted');
    expect(h).not.toBeNull(); // the refused grant was given back
    await h!.release();
  });
});
