import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fencingColumnSql,
  InvalidArgumentError,
  LockTimeoutError,
  LockUnavailableError,
  lockKey,
  NestedLockError,
  NotInTransactionError,
  versionColumnSql,
} from '../src/index.js';
import * as p from '../src/adapters/postgres/index.js';
import { eventually, useMigratedDatabase } from './support/db.js';
import { advisoryLocksOf } from './support/server-locks.js';
import { proxyTo } from './support/tcp-proxy.js';
import { installedAtLeast } from './support/versions.js';

let url: string;
let pool: pg.Pool;
/** The instance most tests use, and the statements it sent (its `debug` hook sees each one). */
let sql: postgres.Sql;
const sent: string[] = [];

beforeAll(async () => {
  url = (await useMigratedDatabase('adapters_postgres')).url;
  pool = new pg.Pool({ connectionString: url, max: 6 });
  sql = postgres(url, { max: 4, onnotice: () => {}, debug: (_connection, text) => void sent.push(text) });
  await pool.query(`CREATE TABLE items (id int PRIMARY KEY, v text)`);
  await pool.query(`CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL, fencing_token bigint)`);
});
afterAll(async () => {
  await sql.end({ timeout: 5 });
  await pool.end();
});

/** The statements `sql` sends while `fn` runs. */
async function statementsOf(fn: () => Promise<unknown>): Promise<string[]> {
  const from = sent.length;
  await fn();
  return sent.slice(from);
}

/** A lock held by a node-postgres transaction until release(). */
async function holdInTransaction(name: string): Promise<{ release(): Promise<void> }> {
  const c = await pool.connect();
  await c.query('BEGIN');
  await c.query('SELECT pg_advisory_xact_lock($1::int8)', [String(lockKey(name))]);
  return {
    release: async () => {
      await c.query('COMMIT');
      c.release();
    },
  };
}

const waiters = (name: string) => advisoryLocksOf(url, lockKey(name), false);
const settled = <T>(promise: Promise<T>): Promise<T | unknown> => promise.then((v) => v, (e: unknown) => e);
const item = async (id: number) => (await pool.query(`SELECT v FROM items WHERE id = $1`, [id])).rows[0]?.v as string | undefined;

describe('xactLock in sql.begin()', () => {
  it('a free name costs one statement; the lease guard is looked for once per instance, not per transaction', async () => {
    // The first lock of an instance in a migrated database finds the lease guard there (and, on postgres 3, checks the column names).
    await sql.begin((tx) => p.tryXactLock(tx, 'pg:warm-up'));
    for (const [i, opts] of [{}, { fencing: true as const }].entries()) {
      // A new transaction each time: what was learnt of the database is kept by the instance.
      const statements = await sql.begin((tx) => statementsOf(() => p.xactLock(tx, `pg:free:${i}`, opts)));
      expect(statements).toHaveLength(1);
      expect(statements[0]).not.toMatch(/SAVEPOINT|lock_timeout/i);
    }
  });

  it('a timeout leaves the transaction usable, its lock_timeout as it was, and it commits', async () => {
    const holder = await holdInTransaction('pg:timeout');
    try {
      const outcome = await sql.begin(async (tx) => {
        await tx`SET LOCAL lock_timeout = '3s'`;
        await p.tryXactLock(tx, 'pg:timeout:warm-up'); // the instance's first lock finds the lease guard: counted below are every later call's
        let err: unknown;
        const statements = await statementsOf(async () => (err = await settled(p.xactLock(tx, 'pg:timeout', { timeoutMs: 150 }))));
        expect(err).toBeInstanceOf(LockTimeoutError);
        // The try, then the wait in postgres.js's savepoint, which its rollback undoes: nothing more to undo.
        expect(statements, statements.join('\n---\n')).toHaveLength(4);
        expect(statements[1]).toMatch(/^savepoint/i);
        expect(statements[3]).toMatch(/^rollback to/i);
        expect((await tx<{ lock_timeout: string }[]>`SHOW lock_timeout`)[0]!.lock_timeout).toBe('3s');
        await tx`INSERT INTO items VALUES (1, 'after a timeout')`;
        return 'committed';
      });
      expect(outcome).toBe('committed');
      expect(await item(1)).toBe('after a timeout');
    } finally {
      await holder.release();
    }
  });

  it('a cancellable wait whose first slices time out gets the lock, and the transaction commits', async () => {
    // With a signal the wait goes in slices of 250 ms: each one that ends without the lock fails, by design.
    const holder = await holdInTransaction('pg:slices');
    const controller = new AbortController();
    const from = sent.length;
    const slicesEnded = () => sent.slice(from).filter((text) => /^rollback to/i.test(text)).length;
    const committed = sql.begin(async (tx) => {
      const { token } = await p.xactLock(tx, 'pg:slices', { timeoutMs: 30_000, signal: controller.signal, fencing: true });
      await tx`INSERT INTO items VALUES (2, ${`token ${token}`})`;
      return token;
    });
    try {
      await eventually(async () => (await waiters('pg:slices')) === 1, 15_000, 'the wait to reach the server');
      await eventually(() => slicesEnded() >= 2, 15_000, 'two slices to end without the lock');
    } finally {
      await holder.release();
    }
    const token = await committed;
    expect(await item(2)).toBe(`token ${token}`);
  });

  it('in a savepoint (tx.savepoint): a timeout leaves it usable, a lock is kept with it or let go with its rollback', async () => {
    const holder = await holdInTransaction('pg:savepoint:busy');
    try {
      await sql.begin(async (tx) => {
        await tx.savepoint(async (sp) => {
          await expect(p.xactLock(sp, 'pg:savepoint:busy', { timeoutMs: 150 })).rejects.toBeInstanceOf(LockTimeoutError);
          await p.xactLock(sp, 'pg:savepoint:kept');
        });
        const failure = new Error('the savepoint’s own failure');
        await expect(
          tx.savepoint(async (sp) => {
            await p.xactLock(sp, 'pg:savepoint:rolled-back');
            throw failure;
          }),
        ).rejects.toBe(failure);
        expect(await advisoryLocksOf(url, lockKey('pg:savepoint:kept'))).toBe(1);
        expect(await advisoryLocksOf(url, lockKey('pg:savepoint:rolled-back'))).toBe(0);
        await tx`INSERT INTO items VALUES (3, 'after the savepoints')`;
      });
      expect(await item(3)).toBe('after the savepoints');
    } finally {
      await holder.release();
    }
  });

  it('refuses the instance itself without sending anything', async () => {
    const statements = await statementsOf(async () => {
      // @ts-expect-error the instance is not a transaction: the type says so first
      await expect(p.xactLock(sql, 'pg:outside')).rejects.toBeInstanceOf(NotInTransactionError);
    });
    expect(statements).toEqual([]);
  });
});

describe('xactLock on a reserved connection (BEGIN sent by the caller)', () => {
  it('outside BEGIN the server says no transaction; inside, a name is one lock per transaction, not per connection', async () => {
    const r = await sql.reserve();
    try {
      await expect(p.xactLock(r, 'pg:reserved')).rejects.toBeInstanceOf(NotInTransactionError);
      await r`BEGIN`;
      await p.xactLock(r, 'pg:reserved');
      await expect(p.xactLock(r, 'pg:reserved')).rejects.toBeInstanceOf(NestedLockError);
      await r`COMMIT`;
      // The same connection, the next transaction: the name is free again, and no longer nested.
      await r`BEGIN`;
      expect(await p.tryXactLock(r, 'pg:reserved')).not.toBeNull();
      await r`COMMIT`;
    } finally {
      r.release();
    }
  });
});

describe('guarded writes through postgres.js', () => {
  it('bigints travel exactly: a token above 2^53 is written and compared as an int8', async () => {
    await pool.query(`INSERT INTO counters VALUES (1, 0, NULL)`);
    const token = 2n ** 62n + 1n;
    expect(await p.fencedUpdate(sql, { table: 'counters', set: { n: 1 }, where: { id: 1 }, token })).toEqual({ applied: true, written: 1, refused: 0 });
    expect(await p.fencedUpdate(sql, { table: 'counters', set: { n: 2 }, where: { id: 1 }, token: token - 1n })).toMatchObject({
      applied: false,
      reason: 'stale',
      currentToken: token,
    });
    expect((await pool.query(`SELECT fencing_token::text AS t FROM counters WHERE id = 1`)).rows[0].t).toBe(String(token));
  });

  it('fencedClaim types its rows by its type parameter', async () => {
    await pool.query(`INSERT INTO counters VALUES (2, 41, NULL)`);
    await sql.begin(async (tx) => {
      const claim = await p.fencedClaim<{ id: number; n: number; fencing_token: bigint }>(tx, { table: 'counters', where: { id: 2 }, token: 7n });
      const row = claim.rows[0]!;
      // @ts-expect-error the row type has no such column
      void row.missing;
      expect(row).toEqual({ id: 2, n: 41, fencing_token: 7n });
      await p.fencedUpdate(tx, { table: 'counters', set: { n: row.n + 1 }, where: { id: 2 }, token: 7n });
    });
    expect((await pool.query(`SELECT n FROM counters WHERE id = 2`)).rows[0].n).toBe(42);
  });

  it('the fencing and version columns are added with sql.unsafe (a script of several statements)', async () => {
    await sql`CREATE TABLE documents (id int PRIMARY KEY, body text)`;
    await sql.unsafe(fencingColumnSql('documents', { enforce: true }));
    await sql.unsafe(versionColumnSql('documents'));
    await sql`INSERT INTO documents (id, body) VALUES (1, 'draft')`;
    expect(await p.versionedUpdate(sql, { table: 'documents', set: { body: 'v1' }, where: { id: 1 }, version: 0n })).toEqual({ applied: true, currentVersion: 1n });
    expect(await p.fencedUpdate(sql, { table: 'documents', set: { body: 'fenced' }, where: { id: 1 }, token: 5n })).toMatchObject({ applied: true });
    // The trigger refuses a lower token from any writer, postgres.js's own statements included.
    await expect(sql`UPDATE documents SET fencing_token = 4 WHERE id = 1`).rejects.toMatchObject({ code: 'PGF01' });
  });
});

describe('postgres.js instances configured their own way', () => {
  it('a column transform (postgres.camel): read through on postgres 4, refused with the fix on postgres 3', async () => {
    const camel = postgres(url, { max: 1, transform: postgres.camel });
    try {
      const outcome = await settled(camel.begin((tx) => p.xactLock(tx, 'pg:camel', { fencing: true })));
      if (installedAtLeast('postgres', 4)) {
        expect(outcome).toMatchObject({ key: lockKey('pg:camel'), token: expect.any(BigInt) });
      } else {
        expect(outcome).toBeInstanceOf(InvalidArgumentError);
        expect((outcome as Error).message).toMatch(/renames the columns.*postgres 4/);
        // Guarded writes are refused the same way, not misread.
        await expect(p.fencedUpdate(camel, { table: 'counters', set: { n: 0 }, where: { id: 1 }, token: 2n ** 63n - 1n })).rejects.toBeInstanceOf(InvalidArgumentError);
      }
    } finally {
      await camel.end({ timeout: 5 });
    }
  });
});

describe('a connection that breaks or stops answering during a wait', () => {
  /** Ends the session waiting for `name`'s lock (pg_terminate_backend), as an operator or a failover would. */
  const terminateWaiter = (name: string) =>
    pool.query(
      `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND ((classid::int8 << 32) | objid::int8) = $1::int8`,
      [String(lockKey(name))],
    );
  /** A connection's end as postgres.js reports it: FATAL 57P01 from the server or its own CONNECTION_CLOSED, whichever comes first. */
  const connectionEnd = /^(57P01|CONNECTION_CLOSED|CONNECTION_DESTROYED)$/;

  it('a terminated backend in sql.begin(): LockUnavailableError with postgres.js’s error as its cause, and nothing sent after it', async () => {
    const holder = await holdInTransaction('pg:terminated');
    const own = postgres(url, { max: 1, onnotice: () => {} });
    let lockOutcome: unknown = 'not settled';
    try {
      const ended = settled(
        own.begin(async (tx) => {
          lockOutcome = await settled(p.xactLock(tx, 'pg:terminated', { timeoutMs: 30_000 }));
          // Left waiting: postgres 3.4 would write its own ROLLBACK to the closed socket once the callback
          // settles, an uncaught TypeError (porsager/postgres#1208). Any write after the end is then pgfence's.
          await new Promise(() => {});
        }),
      );
      await eventually(async () => (await waiters('pg:terminated')) === 1, 15_000, 'the wait to reach the server');
      await terminateWaiter('pg:terminated');
      expect(await ended).toMatchObject({ code: expect.stringMatching(connectionEnd) }); // sql.begin() rejects with the connection's end
      await eventually(() => lockOutcome !== 'not settled', 15_000, 'xactLock to settle');
      expect(lockOutcome).toBeInstanceOf(LockUnavailableError);
      expect((lockOutcome as { cause?: { code?: string } }).cause?.code).toMatch(connectionEnd);
    } finally {
      await holder.release();
      await own.end({ timeout: 1 });
    }
  });

  it('a terminated backend on a reserved connection: LockUnavailableError with postgres.js’s error as its cause', async () => {
    const holder = await holdInTransaction('pg:terminated:reserved');
    const own = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const r = await own.reserve();
      await r`BEGIN`;
      const outcome = settled(p.xactLock(r, 'pg:terminated:reserved', { timeoutMs: 30_000 }));
      await eventually(async () => (await waiters('pg:terminated:reserved')) === 1, 15_000, 'the wait to reach the server');
      await terminateWaiter('pg:terminated:reserved');
      const err = await outcome;
      expect(err).toBeInstanceOf(LockUnavailableError);
      expect((err as { cause?: { code?: string } }).cause?.code).toMatch(connectionEnd);
    } finally {
      await holder.release();
      await own.end({ timeout: 1 });
    }
  });

  /** A transaction through a proxy that stalls while xactLock waits; what its later statements meet. */
  async function stalledWait(name: string, id: number, grantDuringStall: boolean) {
    const holder = await holdInTransaction(name);
    const { proxy, url: via } = await proxyTo(url);
    const cut = postgres(via, { max: 1, onnotice: () => {} });
    const later: unknown[] = [];
    let lockOutcome: unknown;
    try {
      const outcome = await settled(
        cut.begin(async (tx) => {
          await tx`INSERT INTO items VALUES (${id}, 'before the stall')`;
          const waiting = settled(p.xactLock(tx, name, { timeoutMs: 1000 }));
          await eventually(async () => (await waiters(name)) === 1, 15_000, 'the wait to reach the server');
          proxy.stall(); // held, not lost: delivered when the network heals
          try {
            if (grantDuringStall) {
              // The server grants the wait, but its answer is stuck in the network.
              await holder.release();
              await eventually(async () => (await waiters(name)) === 0, 15_000, 'the server to grant the wait');
            } // else the server's lock_timeout ends the wait, and that answer is stuck
            lockOutcome = await waiting;
          } finally {
            proxy.heal();
          }
          // A caller that carries on anyway, statement after statement.
          later.push(await settled(tx`INSERT INTO items VALUES (${id + 1}, 'after giving up')`));
          later.push(await settled(tx`INSERT INTO items VALUES (${id + 2}, 'and again')`));
          return 'carried on';
        }),
      );
      return { lockOutcome, later, outcome };
    } finally {
      proxy.heal();
      await holder.release().catch(() => {}); // released above when the server granted the wait
      await cut.end({ timeout: 5 });
      await proxy.close();
    }
  }

  it.each([
    ['the server grants the wait', true],
    ['the server’s lock_timeout ends the wait', false],
  ])('no answer (%s): LockUnavailableError, every later statement is refused, nothing commits', async (_label, grant) => {
    const id = grant ? 100 : 200;
    const { lockOutcome, later, outcome } = await stalledWait(`pg:stall:${id}`, id, grant);
    expect(lockOutcome).toBeInstanceOf(LockUnavailableError);
    expect((lockOutcome as Error).message).toMatch(/doomed/);
    expect(later).toHaveLength(2);
    for (const err of later) expect(err).toMatchObject({ code: '25P02' });
    // postgres.js rolls back a transaction with a failed statement, and rejects with the first failure.
    expect(outcome).toBeInstanceOf(Error);
    for (const n of [id, id + 1, id + 2]) expect(await item(n)).toBeUndefined();
  });
});
