import { Kysely, PostgresDialect, sql } from 'kysely';
import { statementsSent } from './support/statements-sent.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pgSqlExecutor } from '../src/core/index.js';
import { type XactExecutor, xactLockWith } from '../src/advisory/index.js';
import {
  DeadlockError,
  lockKey,
  NestedLockError,
  LockTimeoutError,
  LockUnavailableError,
  NotInTransactionError,
  TransactionAbortedError,
  tryXactLock,
  xactLock,
} from '../src/index.js';
import * as k from '../src/adapters/kysely/index.js';
import { eventually, sleep, useMigratedDatabase } from './support/db.js';
import { proxyTo } from './support/tcp-proxy.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
let kdb: Kysely<{ items: { id: number; v: string } }>;

beforeAll(async () => {
  db = await useMigratedDatabase('xact');
  pool = new pg.Pool({ connectionString: db.url, max: 8 });
  kdb = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: db.url, max: 4 }) }) });
  await pool.query(`CREATE TABLE items (id int PRIMARY KEY, v text)`);
});
afterAll(async () => {
  await pool.end();
  await kdb.destroy();
});

async function holdInTransaction(name: string): Promise<{ release(): Promise<void> }> {
  const c = await pool.connect();
  await c.query('BEGIN');
  await xactLock(c, name);
  return {
    release: async () => {
      await c.query('COMMIT');
      c.release();
    },
  };
}

/**
 * The first lock a client takes in a migrated database finds the lease guard there (one statement more,
 * once per client; see tryXactLockSql): statements counted after it are every later call's.
 */
async function warmUp(c: pg.ClientBase): Promise<void> {
  expect(await tryXactLock(c, 'x:warm-up')).not.toBeNull();
}

describe('xactLock on node-postgres', () => {
  it('a free key costs one plain statement: no savepoint, lock_timeout untouched', async () => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await c.query(`SET LOCAL lock_timeout = '7s'`);
      await warmUp(c);
      const variants = [{}, { timeoutMs: 5000 }, { timeoutMs: Infinity }, { signal: new AbortController().signal }, { fencing: true }, { mode: 'shared' as const }];
      for (const [i, opts] of variants.entries()) {
        const sent = await statementsSent(() => xactLock(c, `x:free:${i}`, opts));
        expect(sent).toHaveLength(1);
        expect(sent[0]).not.toMatch(/SAVEPOINT|lock_timeout/i);
      }
      expect((await c.query('SHOW lock_timeout')).rows[0].lock_timeout).toBe('7s');
      const other = await pool.connect();
      try {
        await other.query('BEGIN');
        for (const i of variants.keys()) expect(await tryXactLock(other, `x:free:${i}`)).toBeNull();
      } finally {
        await other.query('ROLLBACK');
        other.release();
      }
      await c.query('COMMIT');
    } finally {
      c.release();
    }
  });

  it('a busy key is tried once, then waited for in the savepoint script; its timeout leaves the transaction as it was', async () => {
    const holder = await holdInTransaction('x:busy');
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await c.query(`SET LOCAL lock_timeout = '7s'`);
      await warmUp(c);
      await c.query(`INSERT INTO items VALUES (3, 'before the wait')`);
      const sent = await statementsSent(() => expect(xactLock(c, 'x:busy', { timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError));
      expect(sent[0]).not.toMatch(/SAVEPOINT/i);
      expect(sent[1]).toMatch(/^SAVEPOINT/);
      expect(sent.at(-1)).toMatch(/^ROLLBACK TO SAVEPOINT/);
      expect((await c.query('SHOW lock_timeout')).rows[0].lock_timeout).toBe('7s');
      await c.query(`INSERT INTO items VALUES (4, 'after the wait')`);
      await c.query('COMMIT');
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM items WHERE id IN (3, 4)`);
      expect(rows[0].n).toBe(2);
    } finally {
      c.release();
      await holder.release();
    }
  });

  it('is released by COMMIT and by ROLLBACK', async () => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await xactLock(c, 'x:end');
      const other = await pool.connect();
      await other.query('BEGIN');
      expect(await tryXactLock(other, 'x:end')).toBeNull();
      await c.query('ROLLBACK');
      expect(await tryXactLock(other, 'x:end')).toMatchObject({ key: expect.any(BigInt) });
      await other.query('COMMIT');
      other.release();
    } finally {
      c.release();
    }
  });

  it('a timeout leaves the transaction usable and the caller’s lock_timeout as it was', async () => {
    const holder = await holdInTransaction('x:timeout');
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await c.query(`SET LOCAL lock_timeout = '7s'`);
      await c.query(`INSERT INTO items VALUES (1, 'before')`);
      await expect(xactLock(c, 'x:timeout', { timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
      expect((await c.query('SHOW lock_timeout')).rows[0].lock_timeout).toBe('7s');
      await c.query(`INSERT INTO items VALUES (2, 'after')`); // still usable
      await xactLock(c, 'x:other', { timeoutMs: 1000 });
      expect((await c.query('SHOW lock_timeout')).rows[0].lock_timeout).toBe('7s');
      await c.query('COMMIT');
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM items WHERE id IN (1, 2)`);
      expect(rows[0].n).toBe(2);
    } finally {
      c.release();
      await holder.release();
    }
  });

  it('waits without bound when asked (timeoutMs: Infinity) and gets the lock once it is free', async () => {
    const holder = await holdInTransaction('x:infinite');
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const waiting = xactLock(c, 'x:infinite', { timeoutMs: Infinity });
      setTimeout(() => void holder.release(), 200);
      expect((await waiting).key).toBeTypeOf('bigint');
      await c.query('COMMIT');
    } finally {
      c.release();
    }
  });

  it('turns a deadlock into DeadlockError and keeps that transaction usable', async () => {
    const [c1, c2] = await Promise.all([pool.connect(), pool.connect()]);
    try {
      await c1.query('BEGIN');
      await c2.query('BEGIN');
      await xactLock(c1, 'x:dl:a');
      await xactLock(c2, 'x:dl:b');
      const wait = (c: pg.PoolClient, name: string) =>
        xactLock(c, name, { timeoutMs: 20_000 }).then(
          () => ({ client: c, error: null }),
          (error: unknown) => ({ client: c, error }),
        );
      const w1 = wait(c1, 'x:dl:b');
      const w2 = wait(c2, 'x:dl:a');
      // PostgreSQL fails one wait of the cycle; that transaction still holds its first lock and is usable.
      const first = await Promise.race([w1, w2]);
      expect(first.error).toBeInstanceOf(DeadlockError);
      const loser = first.client;
      const winnerWait = loser === c1 ? w2 : w1;
      expect((await loser.query('SELECT 1 AS ok')).rows[0].ok).toBe(1);
      await loser.query('ROLLBACK'); // gives up its first lock: the other wait completes
      expect((await winnerWait).error).toBeNull();
    } finally {
      await c1.query('ROLLBACK');
      await c2.query('ROLLBACK');
      c1.release();
      c2.release();
    }
  });

  it('refuses an aborted transaction with a clear error', async () => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      await c.query('SELECT 1/0').catch(() => {});
      for (const attempt of [xactLock(c, 'x:aborted'), tryXactLock(c, 'x:aborted')]) {
        const err = await attempt.catch((e: unknown) => e);
        // Not "outside a transaction": the caller must roll back, not BEGIN.
        expect(err).not.toBeInstanceOf(NotInTransactionError);
        expect(err).toBeInstanceOf(TransactionAbortedError);
        expect(err).toMatchObject({ code: 'PGFENCE_TRANSACTION_ABORTED', message: expect.stringMatching(/roll/i) });
      }
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
  });

  it('issues fencing tokens that commit with the transaction', async () => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const a = await xactLock(c, 'x:fenced', { fencing: true });
      await c.query('COMMIT');
      await c.query('BEGIN');
      const b = await tryXactLock(c, 'x:fenced', { fencing: true });
      await c.query('COMMIT');
      expect(b!.token).toBeGreaterThan(a.token!);
    } finally {
      c.release();
    }
  });
});

describe('an executor that neither follows transactions nor reports script rows (the core seam every adapter uses)', () => {
  /** A node-postgres client seen as a library that reports no script rows and keeps one object across transactions. */
  const blindExecutor = (c: pg.ClientBase): XactExecutor => {
    const sql = pgSqlExecutor(c);
    return {
      query: (text, values) => sql.query(text, values),
      script: async (text) => {
        await sql.script(text);
        return null;
      },
      scriptResults: false,
      identity: c,
      database: c,
      perTransaction: false,
      status: () => 'unknown',
      abandonAdvice: 'discard the client',
      abandon: () => {},
    };
  };

  it('after a wait, knows which transaction holds the key: nested in it, free again in the next', async () => {
    const c = await pool.connect();
    const exec = blindExecutor(c);
    try {
      for (const fencing of [false, true]) {
        const name = `x:blind:${fencing}`;
        const holder = await holdInTransaction(name);
        await c.query('BEGIN');
        const waiting = xactLockWith(exec, name, { timeoutMs: 10_000, fencing });
        await eventually(async () => (await pool.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`)).rows[0].n === 1);
        await holder.release();
        const got = await waiting;
        expect(got.token === null).toBe(!fencing);
        // The same name again in this transaction: nested; in the next transaction: granted.
        await expect(xactLockWith(exec, name, { timeoutMs: 0 })).rejects.toBeInstanceOf(NestedLockError);
        await c.query('COMMIT');
        await c.query('BEGIN');
        await expect(xactLockWith(exec, name, { timeoutMs: 0, fencing })).resolves.toMatchObject({ key: lockKey(name) });
        await c.query('COMMIT');
      }
    } finally {
      c.release();
    }
  });
});

describe('xactLock on Kysely', () => {
  it('a free key costs one plain statement: no savepoint', async () => {
    await kdb.transaction().execute(async (trx) => {
      // The first lock a Kysely instance takes in a migrated database finds the lease guard (one statement more, once).
      expect(await k.tryXactLock(trx, 'k:warm-up')).not.toBeNull();
      for (const [i, opts] of [{}, { fencing: true }].entries()) {
        const sent = await statementsSent(() => k.xactLock(trx, `k:free:${i}`, opts));
        expect(sent).toHaveLength(1);
        expect(sent[0]).not.toMatch(/SAVEPOINT|lock_timeout/i);
      }
    });
  });

  it('refuses a Kysely instance outside a transaction', async () => {
    await expect(k.xactLock(kdb, 'k:outside')).rejects.toBeInstanceOf(NotInTransactionError);
  });

  it('a timeout leaves the transaction usable and lock_timeout restored', async () => {
    const holder = await holdInTransaction('k:timeout');
    try {
      await kdb.transaction().execute(async (trx) => {
        await sql`SET LOCAL lock_timeout = '3s'`.execute(trx);
        await expect(k.xactLock(trx, 'k:timeout', { timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
        const shown = await sql<{ lock_timeout: string }>`SHOW lock_timeout`.execute(trx);
        expect(shown.rows[0]!.lock_timeout).toBe('3s');
        await trx.insertInto('items').values({ id: 10, v: 'kysely' }).execute();
      });
      const { rows } = await pool.query(`SELECT v FROM items WHERE id = 10`);
      expect(rows[0].v).toBe('kysely');
    } finally {
      await holder.release();
    }
  });

  it('refuses an aborted transaction with its own error, not NotInTransactionError', async () => {
    const err = await kdb
      .transaction()
      .execute(async (trx) => {
        await sql`SELECT 1/0`.execute(trx).catch(() => {});
        await k.xactLock(trx, 'k:aborted', { timeoutMs: 1000 });
      })
      .catch((e: unknown) => e);
    expect(err).not.toBeInstanceOf(NotInTransactionError);
    expect(err).toBeInstanceOf(TransactionAbortedError);
    expect(err).toMatchObject({ code: 'PGFENCE_TRANSACTION_ABORTED' });
  });

  it('issues fencing tokens', async () => {
    const a = await kdb.transaction().execute((trx) => k.xactLock(trx, 'k:fenced', { fencing: true }));
    const b = await kdb.transaction().execute((trx) => k.xactLock(trx, 'k:fenced', { fencing: true }));
    expect(b.token).toBeGreaterThan(a.token!);
  });
});

/** The tables of the guarded-write tests, as a Kysely database type (the fencing column as pg reads it: a string). */
interface Guarded {
  accounts: { id: number; balance: number; fencing_token: string | null };
  parcels: { id: number; batch: number; state: string; fencing_token: string | null };
  tallies: { id: number; n: number; fencing_token: string | null };
  'public.tallies': { id: number; n: number; fencing_token: string | null };
}

describe('Kysely guarded writes', () => {
  let gdb: Kysely<Guarded>;
  beforeAll(async () => {
    gdb = kdb as unknown as Kysely<Guarded>;
    await pool.query(`CREATE TABLE accounts (id int PRIMARY KEY, balance int)`);
    await k.addFencingColumn(kdb, 'accounts', { enforce: true });
    await pool.query(`INSERT INTO accounts (id, balance) VALUES (1, 100)`);
  });

  it('fenced() guards an update builder and reports stale vs missing', async () => {
    expect(await k.fenced(gdb.updateTable('accounts').set({ balance: 90 }).where('id', '=', 1), 3n).execute()).toEqual({ applied: true, written: 1, refused: 0 });
    expect(await k.fenced(gdb.updateTable('accounts').set({ balance: 0 }).where('id', '=', 1), 2n).execute()).toEqual({
      applied: false,
      written: 0,
      refused: 1,
      reason: 'stale',
      currentToken: 3n,
    });
    expect(await k.fenced(gdb.updateTable('accounts').set({ balance: 0 }).where('id', '=', 2), 9n).execute()).toEqual({
      applied: false,
      written: 0,
      refused: 0,
      reason: 'missing',
    });
    // An aliased table, in a transaction, with a builder expression: the counts read the same rows.
    const inTrx = await gdb.transaction().execute((trx) =>
      k.fenced(trx.updateTable('accounts as a').set((eb) => ({ balance: eb('a.balance', '+', 1) })).where('a.id', '=', 1), 3n).execute(),
    );
    expect(inTrx).toEqual({ applied: true, written: 1, refused: 0 });
    expect(k.fenced(gdb.updateTable('accounts').set({ balance: 1 }).where('id', '=', 1), 4n).compile().sql).toMatch(
      /^with "pgfence updated" AS \( update "accounts" set "balance" = \$1, "fencing_token" = \$2 where "id" = \$3 and \("fencing_token" IS NULL OR "fencing_token" <= \$4\) returning 1 as "pgfence_written" \) SELECT /,
    );
    const { rows } = await pool.query(`SELECT balance, fencing_token FROM accounts WHERE id = 1`);
    expect(rows[0]).toEqual({ balance: 91, fencing_token: '3' });
    expect(() => k.fenced(gdb.updateTable('accounts').set({ balance: 1 }).from('parcels'), 4n)).toThrow(/one table \(no FROM, joins or WITH\)/);
  });

  it('checks tables, columns and values against the Kysely database type (compile time)', () => {
    const compileOnly = (_: () => unknown) => {};
    compileOnly(() => [
      // @ts-expect-error: not a table of the database
      k.fencedUpdate(gdb, { table: 'acounts', set: { balance: 1 }, where: { id: 1 }, token: 1n }),
      // @ts-expect-error: not a column of accounts
      k.fencedUpdate(gdb, { table: 'accounts', set: { balanse: 1 }, where: { id: 1 }, token: 1n }),
      // @ts-expect-error: a value of the wrong type
      k.fencedUpdate(gdb, { table: 'accounts', set: { balance: 'a lot' }, where: { id: 1 }, token: 1n }),
      // @ts-expect-error: the fencing column is written by fencedUpdate itself
      k.fencedUpdate(gdb, { table: 'accounts', set: { fencing_token: '9' }, where: { id: 1 }, token: 1n }),
      // @ts-expect-error: where names a column accounts lacks
      k.fencedClaim(gdb, { table: 'accounts', where: { idd: 1 }, token: 1n }),
      // @ts-expect-error: a token is a bigint
      k.fencedClaim(gdb, { table: 'accounts', where: { id: 1 }, token: 1 }),
      // @ts-expect-error: not a column of accounts
      k.fencedClaim(gdb, { table: 'accounts', where: { id: 1 }, token: 1n, column: 'fence' }),
    ]);
  });

  it('fencedUpdate reports stale and missing', async () => {
    expect(await k.fencedUpdate(gdb, { table: 'accounts', set: { balance: 80 }, where: { id: 1 }, token: 4n })).toEqual({
      applied: true,
      written: 1,
      refused: 0,
    });
    expect(await k.fencedUpdate(gdb, { table: 'accounts', set: { balance: 1 }, where: { id: 1 }, token: 3n })).toEqual({
      applied: false,
      written: 0,
      refused: 1,
      reason: 'stale',
      currentToken: 4n,
    });
    expect(await k.fencedUpdate(gdb, { table: 'accounts', set: { balance: 1 }, where: { id: 2 }, token: 9n })).toEqual({
      applied: false,
      written: 0,
      refused: 0,
      reason: 'missing',
    });
  });

  it('fencedUpdate over several rows reports written and refused rows', async () => {
    await pool.query(`CREATE TABLE parcels (id int PRIMARY KEY, batch int, state text)`);
    await k.addFencingColumn(kdb, 'parcels');
    await pool.query(`INSERT INTO parcels VALUES (1, 7, 'new', 3), (2, 7, 'new', 10)`);
    expect(await k.fencedUpdate(gdb, { table: 'parcels', set: { state: 'sent' }, where: { batch: 7 }, token: 5n })).toEqual({
      applied: false,
      written: 1,
      refused: 1,
      reason: 'stale',
      currentToken: 10n,
    });
    const { rows } = await pool.query(`SELECT id, state FROM parcels ORDER BY id`);
    expect(rows).toEqual([
      { id: 1, state: 'sent' },
      { id: 2, state: 'new' },
    ]);
  });

  it('fencedClaim: a stale holder that read first cannot overwrite the newer holder’s increment', async () => {
    await pool.query(`CREATE TABLE tallies (id int PRIMARY KEY, n int NOT NULL)`);
    await k.addFencingColumn(kdb, 'tallies', { enforce: true });
    await pool.query(`INSERT INTO tallies (id, n) VALUES (1, 0)`);
    // A (token 1) claims and reads; its lease expires; B (token 2) claims and reads; A writes, then B.
    const a = await k.fencedClaim(gdb, { table: 'tallies', where: { id: 1 }, token: 1n });
    const b = await gdb.transaction().execute((trx) => k.fencedClaim(trx, { table: 'public.tallies', where: { id: 1 }, token: 2n }));
    expect([a.claimed, b.claimed]).toEqual([true, true]);
    // Rows typed from the database type; the token comes back a bigint, as everywhere.
    expect(a.rows).toEqual([{ id: 1, n: 0, fencing_token: 1n }]);
    const token: bigint = b.rows[0]!.fencing_token;
    expect(token).toBe(2n);
    expect(await k.fencedUpdate(gdb, { table: 'tallies', set: { n: a.rows[0]!.n + 1 }, where: { id: 1 }, token: 1n })).toMatchObject({
      applied: false,
      reason: 'stale',
      currentToken: 2n,
    });
    expect((await k.fencedUpdate(gdb, { table: 'tallies', set: { n: b.rows[0]!.n + 1 }, where: { id: 1 }, token: 2n })).applied).toBe(true);
    expect(await k.fencedClaim(gdb, { table: 'tallies', where: { id: 1 }, token: 1n })).toEqual({
      claimed: false,
      rows: [],
      refused: 1,
      reason: 'stale',
      currentToken: 2n,
    });
    const { rows } = await pool.query(`SELECT n FROM tallies WHERE id = 1`);
    expect(rows[0].n).toBe(1);
  });

  it('the enforced table refuses a lower token from any writer', async () => {
    await expect(pool.query(`UPDATE accounts SET fencing_token = 1 WHERE id = 1`)).rejects.toMatchObject({ code: 'PGF01' });
  });
});

describe('a network blackhole during an xactLock wait', () => {
  // The answer PostgreSQL gives to a wait is due at timeoutMs; the client allows it a grace of 2 s.
  const NO_ANSWER_AFTER_MS = 12_000;
  const proxied = () => proxyTo(db.url);
  /** Sessions of this database waiting for an advisory lock. */
  const advisoryWaiters = async () =>
    (
      await pool.query(`SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                         WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()`)
    ).rows[0].n as number;
  const settleWithin = <T>(p: Promise<T>, ms: number) =>
    Promise.race([p.then((v) => v, (e: unknown) => e), sleep(ms).then(() => 'no answer while the network was down' as const)]);

  it.each<[string, () => { timeoutMs: number; signal?: AbortSignal }]>([
    ['timeoutMs 2000', () => ({ timeoutMs: 2000 })],
    ['no timeout but a signal (waits in 250 ms slices)', () => ({ timeoutMs: Infinity, signal: new AbortController().signal })],
  ])('node-postgres, %s: rejects within the bound plus the grace with LockUnavailableError and ends the client', async (label, options) => {
    const holder = await holdInTransaction('x:blackhole:pg');
    const { proxy, url } = await proxied();
    const client = new pg.Client({ connectionString: url });
    const clientErrors: unknown[] = [];
    client.on('error', (e) => clientErrors.push(e));
    try {
      await client.connect();
      await client.query('BEGIN');
      await client.query(`INSERT INTO items VALUES (500, 'in the cut-off transaction')`);
      const waiting = xactLock(client, 'x:blackhole:pg', options());
      await eventually(async () => (await advisoryWaiters()) === 1, 15_000, 'the wait to reach the server');
      proxy.blackhole();
      const started = performance.now();
      const outcome = await settleWithin(waiting, NO_ANSWER_AFTER_MS);
      console.log(`xactLock (${label}) under a blackhole answered after ${Math.round(performance.now() - started)} ms`);
      expect(outcome).toBeInstanceOf(LockUnavailableError);
      expect((outcome as Error).message).toMatch(/discard/i);
      // The client was ended: a later statement fails at once, it never runs in some other transaction.
      const later = await settleWithin(client.query('SELECT 1'), 5000);
      expect(later).toMatchObject({ message: expect.stringMatching(/not queryable|terminated|closed/i) });
      expect(clientErrors).toEqual([]); // ended on purpose: no 'error' event for an unwary caller to crash on
    } finally {
      proxy.heal();
      await proxy.close();
      await holder.release();
      await client.end().catch(() => {});
    }
    // Once the server sees the connection gone, the transaction is rolled back.
    await eventually(async () => (await pool.query(`SELECT 1 FROM items WHERE id = 500`)).rowCount === 0 && (await advisoryWaiters()) === 0);
  });

  it('Kysely: rejects within timeoutMs plus the grace, and the transaction refuses every later statement', async () => {
    const holder = await holdInTransaction('x:blackhole:kysely');
    const { proxy, url } = await proxied();
    const kp = new pg.Pool({ connectionString: url, max: 1 });
    kp.on('error', () => {});
    const kk = new Kysely<{ items: { id: number; v: string } }>({ dialect: new PostgresDialect({ pool: kp }) });
    try {
      const result = await kk
        .transaction()
        .execute(async (trx) => {
          const waiting = k.xactLock(trx, 'x:blackhole:kysely', { timeoutMs: 2000 });
          await eventually(async () => (await advisoryWaiters()) === 1, 15_000, 'the wait to reach the server');
          proxy.stall(); // held, not lost: delivered when the network heals
          let later: Promise<unknown>;
          try {
            // The server grants the wait, but its answer is stuck in the network.
            await holder.release();
            await eventually(async () => (await advisoryWaiters()) === 0, 15_000, 'the server to grant the wait');
            const outcome = await settleWithin(waiting, NO_ANSWER_AFTER_MS);
            expect(outcome).toBeInstanceOf(LockUnavailableError);
            // A caller that carries on anyway: its statement waits for the network, then is refused.
            later = trx.insertInto('items').values({ id: 501, v: 'after giving up' }).execute();
            later.catch(() => {});
          } finally {
            proxy.heal();
          }
          const err = await later.then(() => null, (e: unknown) => e);
          expect(err).toMatchObject({ code: '25P02' });
          return 'carried on';
        })
        .catch((e: unknown) => e);
      // Its COMMIT is a rollback (Kysely reports it as AbortedTransactionError): nothing of it is kept.
      expect(result).toMatchObject({ message: expect.stringMatching(/rolled back/) });
      expect((await pool.query(`SELECT 1 FROM items WHERE id = 501`)).rowCount).toBe(0);
    } finally {
      proxy.heal();
      await kk.destroy();
      await proxy.close();
      await holder.release().catch(() => {});
    }
  });
});
