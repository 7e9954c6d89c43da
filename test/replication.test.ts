/**
 * Failover on real streaming replication: a primary and a pg_basebackup -R standby of the machine's
 * own PostgreSQL binaries, the primary crashed (`-m immediate`), the standby promoted. Where the
 * machine has no server binaries to start them with: skipped (with the reason), and failed under
 * PGFENCE_REQUIRE_TOPOLOGY_TESTS=1 (CI), like every test that needs a capability.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createLocker, fencedUpdate, fencingColumnSql, LockLostError, type Locker } from '../src/index.js';
import { migrate } from '../src/migrate/index.js';
import { capabilityMissing } from './support/capability.js';
import { eventually, queryOnce } from './support/db.js';
import { replicationBinaries, startReplicaPair, type ReplicaPair } from './support/replication.js';

const run = promisify(execFile);
const bin = replicationBinaries();
const skipped = capabilityMissing(
  'REPLICATION TESTS',
  bin ? null : 'no /usr/lib/postgresql/N/bin with initdb, pg_ctl, pg_basebackup and postgres',
  'they start a primary and a streaming standby of their own',
);

const pairs: ReplicaPair[] = [];
const lockers: Locker[] = [];
afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close().catch(() => {})));
  await Promise.all(pairs.map((p) => p.destroy()));
});

async function pair(label: string): Promise<ReplicaPair> {
  const p = await startReplicaPair(bin!, label);
  pairs.push(p);
  await migrate({ connectionString: p.primary.url });
  await sql(p.primary.url, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
    INSERT INTO accounts VALUES (1, 0);
    ${fencingColumnSql('accounts', { enforce: true })}`);
  return p;
}

function open(url: string): Locker & { url: string } {
  const l = createLocker({ connectionString: url });
  lockers.push(l);
  return Object.assign(l, { url });
}

async function runCli(args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [fileURLToPath(new URL('../dist/cli/main.js', import.meta.url)), ...args], { timeout: 30_000 });
  return stdout;
}

const sql = queryOnce;

/** `count` fenced grants (session locks and leases alternating) on `locker`; their tokens. */
async function issueTokens(locker: Locker, name: string, count: number): Promise<bigint[]> {
  const tokens: bigint[] = [];
  for (let i = 0; i < count; i++) {
    if (i % 2 === 0) {
      const h = await locker.acquire(name, { fencing: true });
      tokens.push(h.token!);
      await h.release();
    } else {
      const lease = await locker.lease(name, { ttlMs: 60_000 });
      tokens.push(lease.token);
      await lease.release();
    }
  }
  return tokens;
}

async function lockedOn(url: string, key: bigint): Promise<boolean> {
  const rows = await sql<{ n: number }>(
    url,
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted
      AND ((classid::int8 << 32) | objid::int8) = $1::int8`,
    [key.toString()],
  );
  return rows[0]!.n > 0;
}

const max = (xs: bigint[]) => xs.reduce((a, b) => (b > a ? b : a));

describe.skipIf(skipped)('failover on streaming replication', () => {
  it('tokens issued after a promotion exceed every earlier one; session holders are told their locks are gone', async () => {
    const p = await pair('sync');
    const before = open(p.primary.url);
    const issued = await issueTokens(before, 'ha:account', 20);
    const held = await before.acquire('ha:held', { fencing: true });
    issued.push(held.token!);
    // A locker on both hosts, the standby named first: its sessions go to the primary all the same.
    const both = open(`postgresql://postgres@127.0.0.1:${p.standby.port},127.0.0.1:${p.primary.port}/pgfence_ha?target_session_attrs=read-write`);
    const heldByBoth = await both.acquire('ha:both');
    const carried = await both.lease('ha:carried', { ttlMs: 120_000 });
    expect(await lockedOn(p.primary.url, heldByBoth.key)).toBe(true);
    issued.push(...(await issueTokens(both, 'ha:account', 2)));
    await p.caughtUp();

    // Replication safety, as inspect() and `pgfence status` report it: asynchronous, then synchronous.
    expect((await both.inspect()).replication).toMatchObject({
      standby: false, timeline: 1, synchronousStandbyNames: '', synchronous: false,
      standbys: [{ name: 'walreceiver', state: 'streaming', syncState: 'async' }],
    });
    const status = await runCli(['status', '--database-url', both.url]);
    expect(status).toContain('replication: asynchronous (walreceiver streaming/async), timeline 1: a failover can lose');
    await sql(p.primary.url, `ALTER SYSTEM SET synchronous_standby_names = '*'`);
    await sql(p.primary.url, 'SELECT pg_reload_conf()');
    await eventually(async () => (await both.inspect()).replication.synchronous);
    expect(await runCli(['status', '--database-url', both.url])).toContain('replication: synchronous (walreceiver streaming/sync), timeline 1');
    issued.push(...(await issueTokens(both, 'ha:account', 2))); // commits wait for the standby: nothing to lose

    await p.primary.ctl('stop', '-m', 'immediate');
    for (const h of [held, heldByBoth]) {
      await eventually(() => h.signal.aborted);
      expect(h.signal.reason).toBeInstanceOf(LockLostError);
      expect((h.signal.reason as LockLostError).reason).toBe('session-lost');
    }

    await p.standby.ctl('promote', '-w');
    // A lease whose row reached the standby carries on there (same token), by the new primary's clock.
    expect(await carried.renew()).toBe(true);
    expect(carried.signal.aborted).toBe(false);
    // The multi-host locker finds the new primary by itself.
    const again = await both.acquire('ha:both', { timeoutMs: 30_000 });
    expect(await lockedOn(p.standby.url, again.key)).toBe(true);
    const viaBoth = await issueTokens(both, 'ha:account', 2);
    expect(viaBoth[0]! > max(issued)).toBe(true);
    await again.release();
    issued.push(...viaBoth);

    const after = open(p.standby.url);
    const next = await issueTokens(after, 'ha:account', 4);
    expect(next[0]! > max(issued)).toBe(true);
    expect(next.every((t, i) => i === 0 || t > next[i - 1]!)).toBe(true);
    // The promoted server is on timeline 2: its tokens start at 1 << 48.
    expect(viaBoth[0]).toBe(1n << 48n);
  });

  it('a token issued after a promotion exceeds the tokens lost with the old primary (async), and those are refused', async () => {
    const p = await pair('async');
    const locker = open(p.primary.url);
    const both = open(`postgresql://postgres@127.0.0.1:${p.primary.port},127.0.0.1:${p.standby.port}/pgfence_ha?target_session_attrs=primary`);
    const replicated = await issueTokens(locker, 'ha:account', 6);
    const kept = await both.lease('ha:kept', { ttlMs: 120_000 });
    await p.caughtUp();
    // The standby falls behind: what the primary issues now is lost when it crashes.
    await p.standby.ctl('stop', '-m', 'fast');
    const lost = await issueTokens(locker, 'ha:account', 10);
    const lostLease = await both.lease('ha:lost', { ttlMs: 120_000 });
    const stale = max(lost);
    const oldPool = new pg.Pool({ connectionString: p.primary.url, max: 1 });
    const w = await fencedUpdate(oldPool, { table: 'accounts', set: { balance: 1 }, where: { id: 1 }, token: stale });
    await oldPool.end();
    expect(w.applied).toBe(true);
    await p.primary.ctl('stop', '-m', 'immediate');
    await p.standby.ctl('-w', 'start');
    await p.standby.ctl('promote', '-w');

    // The promoted standby never saw the lost tokens: its counter went back.
    const [row] = await sql<{ token: string }>(p.standby.url, `SELECT token::text FROM pgfence.fencing_tokens`);
    expect(BigInt(row!.token)).toBe(max(replicated));
    expect(BigInt(row!.token) < stale).toBe(true);

    // Leases are re-decided by the new primary: the replicated one carries on; the lost one is free
    // there at once (a second holder gets in), and its old holder hears so at its next renewal.
    expect(await kept.renew()).toBe(true);
    const second = await open(p.standby.url).tryLease('ha:lost', { ttlMs: 60_000 });
    expect(second).not.toBeNull();
    expect(second!.token > lostLease.token).toBe(true);
    expect(await lostLease.renew()).toBe(false);
    expect(lostLease.signal.reason).toMatchObject({ reason: 'lease-stolen' });

    const after = open(p.standby.url);
    const lease = await after.lease('ha:account', { ttlMs: 60_000 });
    expect(lease.token > stale).toBe(true);
    const pool = new pg.Pool({ connectionString: p.standby.url, max: 1 });
    try {
      expect((await fencedUpdate(pool, { table: 'accounts', set: { balance: 2 }, where: { id: 1 }, token: lease.token })).applied).toBe(true);
      // The old holder's token (issued before the failover, lost with the old primary) is refused.
      const late = await fencedUpdate(pool, { table: 'accounts', set: { balance: 3 }, where: { id: 1 }, token: stale });
      expect(late).toMatchObject({ applied: false, reason: 'stale' });
      // So is a plain UPDATE carrying it (the trigger).
      await expect(pool.query('UPDATE accounts SET balance = 4, fencing_token = $1', [stale])).rejects.toMatchObject({ code: 'PGF01' });
      expect((await pool.query('SELECT balance FROM accounts')).rows[0].balance).toBe(2);
    } finally {
      await pool.end();
    }
    await lease.release();
  });
});
