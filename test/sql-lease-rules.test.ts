// The lease rules are written once (sql/leases.sql) and run by Node and by the SQL interface alike:
// only the holder can renew or release (a busy answer names the holder and the time, never its token),
// an at-least-for hold outlives its holder however it ends, and whom a release wakes is one rule.
import { describe, expect, it } from 'vitest';
import { lockKey } from '../src/index.js';
import { acquireLeaseSql, releaseLeaseSql, renewLeaseSql } from '../src/lease/lease-sql.js';
import { notifyIfWaiters } from '../src/wait/marker-sql.js';
import { eventually } from './support/db.js';
import { useSqlDatabase } from './support/sql-database.js';

const db = useSqlDatabase('sql_lease_rules');
const { one, open } = db;

/** Waits until the lease of `key` is past its expiry on the database clock (its holder did not renew). */
const pastExpiry = (key: bigint) =>
  eventually(
    async () => (await one<{ over: boolean }>('SELECT expires_at < clock_timestamp() AS over FROM pgfence.leases WHERE key = $1', [key])).over,
    15_000,
    'the lease to pass its expiry on the database clock',
  );

describe('only the holder can renew or release a lease (issue 19, item 6)', () => {
  it('a busy try_lease names the holder and until when, not its token; nothing in the answer ends the lease', async () => {
    const key = lockKey('holder-only:sql');
    const holder = await one<{ token: string; expires_at: Date }>("SELECT token::text, expires_at FROM pgfence.try_lease($1, 30000, 'holder-a')", [key]);
    const busy = await one<{ granted: boolean; token: string | null; owner: string; expires_at: Date; remaining_ms: string }>(
      "SELECT granted, token::text, owner, expires_at, remaining_ms FROM pgfence.try_lease($1, 30000, 'intruder-b')",
      [key],
    );
    expect(busy).toMatchObject({ granted: false, token: null, owner: 'holder-a' });
    expect(busy.expires_at.getTime()).toBe(holder.expires_at.getTime());
    expect(Number(busy.remaining_ms)).toBeGreaterThan(0);
    // B takes its busy answer's token for its own: the database refuses it, the holder keeps its lease.
    await expect(db.pool.query('SELECT pgfence.release_lease($1, $2)', [key, busy.token])).rejects.toMatchObject({ code: '22004' });
    await expect(db.pool.query('SELECT pgfence.renew_lease($1, $2, 30000)', [key, busy.token])).rejects.toMatchObject({ code: '22004' });
    expect((await one<{ e: Date | null }>('SELECT pgfence.renew_lease($1, $2, 30000) AS e', [key, holder.token])).e).not.toBeNull();
    expect((await one<{ r: boolean }>('SELECT pgfence.release_lease($1, $2) AS r', [key, holder.token])).r).toBe(true);
  });

  it('Node holders are kept from SQL the same way: the answer of lease_acquire, which both call, has no token', async () => {
    const locker = open();
    const lease = await locker.lease('holder-only:node', { ttlMs: 30_000, owner: 'node-holder' });
    const busy = await one<{ granted: boolean; token: string | null; owner: string }>(
      "SELECT granted, token::text, owner FROM pgfence.lease_acquire($1, 'x', 'someone', 30000, NULL)",
      [lease.key],
    );
    expect(busy).toEqual({ granted: false, token: null, owner: 'node-holder' });
    expect(await lease.renew()).toBe(true);
    await lease.release();
  });
});

describe('an at-least-for hold outlives its holder (issue 19, item 9)', () => {
  it('Node: a holder that stops (no renewal, no release) keeps the name until minHoldMs, past its TTL', async () => {
    const [a, b] = [open(), open()];
    const held = await a.lease('hold:dead-node', { ttlMs: 300, renew: false, minHoldMs: 60_000 });
    await pastExpiry(held.key);
    expect(await b.tryLease('hold:dead-node'), 'the TTL is over, the hold is not').toBeNull();
    const busy = await one<{ granted: boolean; remaining_ms: string }>('SELECT granted, remaining_ms FROM pgfence.try_lease($1, 5000)', [held.key]);
    expect(busy.granted).toBe(false);
    expect(Number(busy.remaining_ms)).toBeGreaterThan(50_000);
    // A session lock gives way to it as to any live lease, from Node and from SQL.
    expect(await b.tryAcquire('hold:dead-node')).toBeNull();
    expect((await one<{ t: string | null }>('SELECT pgfence.try_lock_fenced($1)::text AS t', [held.key])).t).toBeNull();
    const [entry] = (await b.inspect()).leases.filter((l) => l.key === held.key);
    expect(entry?.remainingMs).toBeGreaterThan(50_000);
  });

  it('SQL: try_lease(min_hold_ms => ...) without a release keeps the name past its TTL; a later release keeps it too', async () => {
    const key = lockKey('hold:dead-sql');
    const { token } = await one<{ token: string }>('SELECT token::text FROM pgfence.try_lease($1, 200, p_min_hold_ms => 60000)', [key]);
    await pastExpiry(key);
    expect((await one<{ granted: boolean }>('SELECT granted FROM pgfence.try_lease($1, 5000)', [key])).granted).toBe(false);
    expect(await open().tryLease('hold:dead-sql')).toBeNull();
    // Its holder comes back within the hold: the lease is still its own to renew, and a release keeps the hold.
    expect((await one<{ e: Date | null }>('SELECT pgfence.renew_lease($1, $2, 5000) AS e', [key, token])).e).not.toBeNull();
    expect((await one<{ r: boolean }>('SELECT pgfence.release_lease($1, $2) AS r', [key, token])).r).toBe(true);
    expect((await one<{ granted: boolean }>('SELECT granted FROM pgfence.try_lease($1, 5000)', [key])).granted).toBe(false);
  });

  it('release_lease(min_hold_ms => ...) keeps a lease taken without a hold, and nobody is woken', async () => {
    const key = lockKey('hold:at-release');
    const { token } = await one<{ token: string }>('SELECT token::text FROM pgfence.try_lease($1, 5000)', [key]);
    expect((await one<{ r: boolean }>('SELECT pgfence.release_lease($1, $2, 30000) AS r', [key, token])).r).toBe(true);
    const busy = await one<{ granted: boolean; remaining_ms: string }>('SELECT granted, remaining_ms FROM pgfence.try_lease($1, 5000)', [key]);
    expect(busy.granted).toBe(false);
    expect(Number(busy.remaining_ms)).toBeGreaterThan(20_000);
    expect(await open().tryLease('hold:at-release')).toBeNull();
  });
});

describe('one definition of each rule (issue 19, item 10)', () => {
  it("Node's lease statements are calls of the functions the SQL interface calls, and nothing else", async () => {
    expect(acquireLeaseSql).toMatch(/^SELECT [^;]+\sFROM pgfence\.lease_acquire\(\$1::int8, \$2::text, \$3::text, \$4::int8, \$5::jsonb, \$6::int8\)$/);
    expect(renewLeaseSql).toMatch(/^SELECT [^;]+ FROM pgfence\.lease_renew\(\$1::int8, \$2::int8, \$3::int8\)$/);
    expect(releaseLeaseSql).toMatch(/^SELECT pgfence\.lease_release\(\$1::int8, \$2::int8, \$3::int8\) AS released$/);
    const bodies = Object.fromEntries(
      (
        await db.pool.query<{ name: string; body: string }>(
          `SELECT p.proname AS name, p.prosrc AS body FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'pgfence' AND p.proname IN ('try_lease', 'renew_lease', 'release_lease')`,
        )
      ).rows.map((r) => [r.name, r.body]),
    );
    expect(bodies.try_lease).toContain('FROM pgfence.lease_acquire(');
    expect(bodies.renew_lease).toContain('FROM pgfence.lease_renew(');
    expect(bodies.release_lease).toContain('RETURN pgfence.lease_release(');
    for (const body of Object.values(bodies)) expect(body).not.toMatch(/\b(UPDATE|INSERT)\b/);
  });

  it("pgfence.notify_waiters is Node's notifyIfWaiters, expression for expression", async () => {
    const { body } = await one<{ body: string }>(
      `SELECT p.prosrc AS body FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pgfence' AND p.proname = 'notify_waiters'`,
    );
    const flat = (sql: string) => sql.replace(/\s+/g, ' ').trim();
    expect(flat(body)).toBe(flat(`SELECT ${notifyIfWaiters('p_key', { asyncCommit: false })}`));
  });
});
