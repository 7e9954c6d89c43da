// The fenced locks of the SQL interface hold nothing they did not hand out: a session lock of SQL
// (try_lock_fenced, lock_fenced) is a transaction lock until COMMIT, so a failed call, a ROLLBACK or a
// rolled-back savepoint leave nothing held, and no two holders ever share a token; a transaction lock
// of SQL (xact_lock_fenced, try_xact_lock_fenced) outside a transaction block is refused (25P01), over
// the simple and the extended protocol, and from psycopg (sql/interface-commit.sql).
import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, lockKey } from '../src/index.js';
import { capabilityMissing } from './support/capability.js';
import { probeClient, SYSTEM_PYTHON } from './support/clients.js';
import { track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
const clients: pg.Client[] = [];
const connect = async () => {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  c.on('error', () => {});
  clients.push(c);
  return c;
};

beforeAll(async () => {
  db = await useMigratedDatabase('sql_fenced_locks');
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => {})));
});

/** How the key goes to the server: inlined (the simple protocol) or as a parameter (the extended one). */
type Protocol = 'simple' | 'extended';
const PROTOCOLS: Protocol[] = ['simple', 'extended'];
function call(client: pg.Client, protocol: Protocol, fn: string, key: bigint): Promise<string | null> {
  const q = protocol === 'simple' ? client.query(`SELECT pgfence.${fn}(${key})::text AS v`) : client.query('SELECT pgfence.' + fn + '($1)::text AS v', [key]);
  return q.then((r) => r.rows[0].v as string | null);
}
/**
 * PostgreSQL sends a statement's error before it aborts the transaction (which gives the locks back):
 * the connection's next statement runs after that, so once it answers, what is still held stays held.
 */
const settled = (client: pg.Client) => client.query('SELECT 1');
const failure = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (err: { code?: string; message: string }) => err,
  );

/** Advisory locks of `key` held by the backend of `client` (either scope). */
async function heldBy(client: pg.Client, key: bigint): Promise<number> {
  const observer = await observerClient();
  const pid = (client as unknown as { processID: number }).processID;
  const { rows } = await observer.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = $1
        AND ((classid::int8 << 32) | objid::int8) = $2`,
    [pid, key],
  );
  return rows[0]!.n;
}
let observer: pg.Client | null = null;
const observerClient = async () => (observer ??= await connect());
const lastToken = async (key: bigint) =>
  (await (await observerClient()).query<{ t: string | null }>('SELECT (SELECT token::text FROM pgfence.fencing_tokens WHERE key = $1) AS t', [key])).rows[0]!.t;

describe('a failed call holds nothing (issue 19, item 1)', () => {
  for (const fn of ['try_lock_fenced', 'lock_fenced']) {
    for (const protocol of PROTOCOLS) {
      it(`${fn} in a read-only session (25006), ${protocol} protocol: the name stays free for SQL and Node`, async () => {
        const key = lockKey(`failed:${fn}:${protocol}:read-only`);
        const a = await connect();
        await a.query('SET default_transaction_read_only = on');
        expect((await failure(call(a, protocol, fn, key)))?.code).toBe('25006');
        await settled(a);
        expect(await heldBy(a, key)).toBe(0);
        const b = await connect();
        expect(await call(b, protocol, 'try_lock_fenced', key)).not.toBeNull();
        expect(await call(b, protocol, 'unlock', key)).toBe('true');
        const locker = track(createLocker({ connectionString: db.url }));
        const h = await locker.tryAcquire(`failed:${fn}:${protocol}:read-only`);
        expect(h).not.toBeNull();
        await h!.release();
      });
    }

    it(`${fn} with the key's tokens exhausted (PGF02): nothing held`, async () => {
      const name = `failed:${fn}:exhausted`;
      const key = lockKey(name);
      const a = await connect();
      await a.query('INSERT INTO pgfence.fencing_tokens (key, token) VALUES ($1, 9223372036854775807)', [key]);
      expect((await failure(call(a, 'extended', fn, key)))?.code).toBe('PGF02');
      await settled(a);
      expect(await heldBy(a, key)).toBe(0);
      const locker = track(createLocker({ connectionString: db.url }));
      const h = await locker.tryAcquire(name);
      expect(h, 'a Node locker finds the name free').not.toBeNull();
      await h!.release();
    });
  }

  it('lock_fenced cancelled while it waits out a lease: nothing held', async () => {
    const name = 'failed:lock_fenced:cancelled';
    const key = lockKey(name);
    const locker = track(createLocker({ connectionString: db.url }));
    const lease = await locker.lease(name, { ttlMs: 10_000 });
    const a = await connect();
    await a.query(`SET statement_timeout = '300ms'`);
    expect((await failure(call(a, 'extended', 'lock_fenced', key)))?.code).toBe('57014');
    await settled(a);
    expect(await heldBy(a, key)).toBe(0);
    await lease.release();
  });
});

describe('no two holders share a token (issue 19, item 2)', () => {
  for (const fn of ['try_lock_fenced', 'lock_fenced']) {
    it(`${fn} then ROLLBACK: nothing held, and the token rolled back is never handed out again`, async () => {
      const key = lockKey(`rollback:${fn}`);
      const [a, b] = [await connect(), await connect()];
      await a.query('BEGIN');
      const t = await call(a, 'extended', fn, key);
      expect(t).not.toBeNull();
      expect(await call(b, 'extended', 'try_lock_fenced', key), 'held until the transaction ends').toBeNull();
      await a.query('ROLLBACK');
      expect(await heldBy(a, key)).toBe(0);
      expect(await call(a, 'extended', 'unlock', key)).toBe('false');
      // The grant ended with the transaction; its number is skipped, never handed out again (issue 30).
      expect(BigInt((await call(b, 'extended', 'try_lock_fenced', key))!)).toBeGreaterThan(BigInt(t!));
      expect(await heldBy(a, key)).toBe(0);
      expect(await call(b, 'extended', 'unlock', key)).toBe('true');
    });

    it(`${fn} in a transaction: held from the call, a session lock from COMMIT on`, async () => {
      const key = lockKey(`commit:${fn}`);
      const [a, b] = [await connect(), await connect()];
      await a.query('BEGIN');
      const t = BigInt((await call(a, 'simple', fn, key))!);
      await a.query('COMMIT');
      expect(await heldBy(a, key)).toBe(1);
      expect(await call(b, 'simple', 'try_lock_fenced', key)).toBeNull();
      expect(await call(a, 'simple', 'unlock', key)).toBe('true');
      expect(await heldBy(a, key)).toBe(0);
      expect(BigInt((await call(b, 'simple', 'try_lock_fenced', key))!)).toBe(t + 1n);
      await call(b, 'simple', 'unlock', key);
    });
  }

  it('an unlock before COMMIT gives the lock up; a rolled-back savepoint takes its lock and token with it', async () => {
    const key = lockKey('commit:unlock-first');
    const a = await connect();
    await a.query('BEGIN');
    expect(await call(a, 'extended', 'try_lock_fenced', key)).not.toBeNull();
    expect(await call(a, 'extended', 'unlock', key)).toBe('true');
    await a.query('COMMIT');
    expect(await heldBy(a, key)).toBe(0);

    const before = await lastToken(key);
    await a.query('BEGIN');
    await a.query('SAVEPOINT s');
    expect(await call(a, 'extended', 'lock_fenced', key)).not.toBeNull();
    await a.query('ROLLBACK TO SAVEPOINT s');
    await a.query('COMMIT');
    expect(await heldBy(a, key)).toBe(0);
    expect(await lastToken(key)).toBe(before);
  });

  it('a key held twice by one session (two grants) needs two unlocks, as before', async () => {
    const key = lockKey('commit:twice');
    const [a, b] = [await connect(), await connect()];
    const t1 = BigInt((await call(a, 'extended', 'try_lock_fenced', key))!);
    expect(BigInt((await call(a, 'extended', 'lock_fenced', key))!)).toBe(t1 + 1n);
    expect(await call(a, 'extended', 'unlock', key)).toBe('true');
    expect(await call(b, 'extended', 'try_lock_fenced', key)).toBeNull();
    expect(await call(a, 'extended', 'unlock', key)).toBe('true');
    expect(await call(a, 'extended', 'unlock', key)).toBe('false');
    expect(await call(b, 'extended', 'try_lock_fenced', key)).not.toBeNull();
    await call(b, 'extended', 'unlock', key);
  });
});

describe('transaction locks of SQL need a transaction block (issue 19, item 3)', () => {
  for (const fn of ['try_xact_lock_fenced', 'xact_lock_fenced']) {
    for (const protocol of PROTOCOLS) {
      it(`${fn} in autocommit, ${protocol} protocol: 25P01, no token issued, nothing held`, async () => {
        const key = lockKey(`autocommit:${fn}:${protocol}`);
        const a = await connect();
        const before = await lastToken(key);
        const err = await failure(call(a, protocol, fn, key));
        expect(err?.code, err?.message).toBe('25P01');
        expect(err?.message).toMatch(/need a transaction block/);
        await settled(a);
        expect(await lastToken(key)).toBe(before);
        expect(await heldBy(a, key)).toBe(0);
      });

      it(`${fn} in a transaction block, ${protocol} protocol: a token, the lock held until COMMIT`, async () => {
        const key = lockKey(`block:${fn}:${protocol}`);
        const [a, b] = [await connect(), await connect()];
        await a.query('BEGIN');
        const t = await call(a, protocol, fn, key);
        expect(t).not.toBeNull();
        expect(await call(b, protocol, 'try_lock_fenced', key)).toBeNull();
        await a.query('SELECT 1'); // a later statement of the same transaction
        await a.query('COMMIT');
        expect(await lastToken(key)).toBe(t);
        expect(await heldBy(a, key)).toBe(0);
      });
    }
  }
});

describe('from psycopg (the extended protocol, as Python programs use it)', () => {
  const skip = capabilityMissing('SQL INTERFACE FROM PSYCOPG', probeClient('python').unavailable);
  it.skipIf(skip)('autocommit: 25P01 for the transaction locks; a transaction: tokens; a rolled-back session lock: nothing held', () => {
    const key = lockKey('psycopg:xact');
    const program = `
import os, psycopg
key = int(os.environ["KEY"])
url = os.environ["DATABASE_URL"]
out = []
with psycopg.connect(url, autocommit=True) as c:
    for fn in ["try_xact_lock_fenced", "xact_lock_fenced"]:
        try:
            c.execute(f"SELECT pgfence.{fn}(%s)", [key]).fetchone()
            out.append(f"{fn} autocommit: granted")
        except psycopg.Error as e:
            out.append(f"{fn} autocommit: {e.sqlstate}")
with psycopg.connect(url) as c:  # psycopg's default: a transaction, committed by commit()
    for fn in ["try_xact_lock_fenced", "xact_lock_fenced"]:
        t = c.execute(f"SELECT pgfence.{fn}(%s)", [key]).fetchone()[0]
        c.commit()
        out.append(f"{fn} in a transaction: {'token' if t else 'none'}")
    c.execute("SELECT pgfence.try_lock_fenced(%s)", [key])
    c.rollback()
    n = c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").fetchone()[0]
    c.commit()
    out.append(f"try_lock_fenced rolled back: {n} held")
print("\\n".join(out))
`;
    const r = spawnSync(SYSTEM_PYTHON, ['-c', program], {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, DATABASE_URL: db.url, KEY: key.toString() },
    });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim().split('\n')).toEqual([
      'try_xact_lock_fenced autocommit: 25P01',
      'xact_lock_fenced autocommit: 25P01',
      'try_xact_lock_fenced in a transaction: token',
      'xact_lock_fenced in a transaction: token',
      'try_lock_fenced rolled back: 0 held',
    ]);
  });
});
