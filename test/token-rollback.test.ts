// A token that has left the server is never issued again, whatever happens to the transaction that
// issued it (issue 30, gap 1): every path that issues a token — the SQL interface's session and
// transaction locks, Node's xactLock with fencing, leases, lease-backed permits and leader epochs —
// issues it inside a transaction that is rolled back here, and the next holder of the same key must
// get a larger token, or a paused first holder's writes would pass the guard against the second's.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, lockKey, xactLock } from '../src/index.js';
import { track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
const clients: pg.Client[] = [];
const connect = async () => {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  clients.push(c);
  return c;
};

beforeAll(async () => {
  db = await useMigratedDatabase('token_rollback');
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => {})));
});

/** Runs `issue` in a transaction that then rolls back, and returns the token it was given. */
async function issuedThenRolledBack(issue: (c: pg.Client) => Promise<bigint>): Promise<bigint> {
  const c = await connect();
  await c.query('BEGIN');
  const token = await issue(c);
  await c.query('ROLLBACK');
  return token;
}
const one = async (c: pg.Client, sql: string, values: unknown[]) => BigInt((await c.query<{ t: string }>(sql, values)).rows[0]!.t);

/** The SQL statements that issue a token from another language, each given a key. */
const SQL_ISSUERS: Record<string, string> = {
  try_lock_fenced: 'SELECT pgfence.try_lock_fenced($1)::text AS t',
  lock_fenced: 'SELECT pgfence.lock_fenced($1)::text AS t',
  xact_lock_fenced: 'SELECT pgfence.xact_lock_fenced($1)::text AS t',
  try_xact_lock_fenced: 'SELECT pgfence.try_xact_lock_fenced($1)::text AS t',
  try_lease: 'SELECT token::text AS t FROM pgfence.try_lease($1, 60000)',
  lease: 'SELECT pgfence.lease($1, 60000, 1000)::text AS t',
};

describe('a token issued in a rolled-back transaction is never issued again', () => {
  for (const [fn, sql] of Object.entries(SQL_ISSUERS)) {
    it(`SQL ${fn}: the next holder of the key (SQL and Node) gets a larger token`, async () => {
      const name = `rolled-back:${fn}`;
      const key = lockKey(name);
      const rolledBack = await issuedThenRolledBack((c) => one(c, sql, [key]));
      const b = await connect();
      const next = await one(b, 'SELECT pgfence.try_lock_fenced($1)::text AS t', [key]);
      expect(next).toBeGreaterThan(rolledBack);
      await b.query('SELECT pgfence.unlock($1)', [key]);
      const locker = track(createLocker({ connectionString: db.url }));
      const h = await locker.acquire(name, { fencing: true, timeoutMs: 5000 });
      expect(h.token).toBeGreaterThan(next);
      await h.release();
    });
  }

  it("Node xactLock(…, { fencing: true }) in a transaction that rolls back: the next holder's token is larger", async () => {
    const name = 'rolled-back:node-xact';
    const rolledBack = await issuedThenRolledBack(async (c) => (await xactLock(c, name, { fencing: true, timeoutMs: 5000 })).token);
    const c = await connect();
    await c.query('BEGIN');
    const next = (await xactLock(c, name, { fencing: true, timeoutMs: 5000 })).token;
    await c.query('COMMIT');
    expect(next).toBeGreaterThan(rolledBack);
  });

  it('a lease taken by pgfence.lease_acquire in a rolled-back transaction: the next lease and leader epoch are larger', async () => {
    const name = 'rolled-back:lease';
    const key = lockKey(name);
    const rolledBack = await issuedThenRolledBack((c) =>
      one(c, `SELECT token::text AS t FROM pgfence.lease_acquire($1, $2, 'paused-holder', 60000, NULL)`, [key, name]),
    );
    const locker = track(createLocker({ connectionString: db.url }));
    const lease = await locker.lease(name, { ttlMs: 60000, timeoutMs: 5000 });
    expect(lease.token).toBeGreaterThan(rolledBack);
    await lease.release();

    const leaderName = 'rolled-back:leader';
    const leaderKey = lockKey(leaderName);
    const epochRolledBack = await issuedThenRolledBack((c) =>
      one(c, `SELECT token::text AS t FROM pgfence.lease_acquire($1, $2, 'paused-leader', 60000, NULL)`, [leaderKey, leaderName]),
    );
    const election = locker.leader(leaderName, { ttlMs: 60000 });
    const epoch = await election.whenElected({ signal: AbortSignal.timeout(10_000) });
    expect(epoch).toBeGreaterThan(epochRolledBack);
    await election.resign();
  });

  it('a permit taken by pgfence.permit_acquire in a rolled-back transaction: the next holder of that slot gets a larger token', async () => {
    const c = await connect();
    const slot = BigInt((await c.query<{ k: string }>(`SELECT pgfence.lock_key('rolled-back:permit-slot')::text AS k`)).rows[0]!.k);
    const take = (client: pg.Client, owner: string) =>
      one(client, `SELECT token::text AS t FROM pgfence.permit_acquire(ARRAY[$1::bigint], 'rolled-back:permit', $2, 60000, 0)`, [slot, owner]);
    const rolledBack = await issuedThenRolledBack((client) => take(client, 'paused-holder'));
    expect(await take(c, 'next-holder')).toBeGreaterThan(rolledBack);
  });
});
