import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker } from '../src/index.js';
import { deadClientBounds } from '../src/session/server-settings.js';
import { sleep, track, useTestDatabase } from './support/db.js';
import { capturingLogger } from './support/log.js';

let db: Awaited<ReturnType<typeof useTestDatabase>>;

beforeAll(async () => {
  db = await useTestDatabase('server_settings');
});

describe('pinned-session settings', () => {
  it('a pinned session carries dead-client detection derived from keepaliveMs and no idle timeouts', async () => {
    // A caller's pool lets the test look at the very connection the locker pinned.
    const pool = track(new pg.Pool({ connectionString: db.url, max: 4 }) as unknown as pg.Pool & { close(): Promise<void> });
    (pool as unknown as { close(): Promise<void> }).close = () => pool.end();
    const clients: pg.PoolClient[] = [];
    pool.on('connect', (c) => clients.push(c));
    const locker = track(createLocker({ pool, keepaliveMs: 1000, maxSessions: 1 }));
    const h = await locker.acquire('settings:1');
    const expected = deadClientBounds(1000, 2000);
    const { rows } = await pool.query<{ pid: number }>(
      `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    const pinned = clients.find((c) => (c as unknown as { processID: number }).processID === rows[0]!.pid)!;
    expect(pinned).toBeDefined();
    const show = async (name: string) => (await pinned.query('SELECT setting FROM pg_settings WHERE name = $1', [name])).rows[0].setting as string;
    expect(await show('tcp_keepalives_idle')).toBe(String(expected.keepalivesIdleS));
    expect(await show('tcp_keepalives_interval')).toBe(String(expected.keepalivesIntervalS));
    expect(await show('tcp_keepalives_count')).toBe(String(expected.keepalivesCount));
    expect(await show('tcp_user_timeout')).toBe(String(expected.tcpUserTimeoutMs));
    expect(await show('client_connection_check_interval')).toBe(String(expected.connectionCheckIntervalMs));
    expect(await show('idle_session_timeout')).toBe('0');
    expect(await show('idle_in_transaction_session_timeout')).toBe('0');
    await h.release();
  });

  it('the documented bounds: the holder aborts before the server lets go', () => {
    for (const keepaliveMs of [10, 100, 1000, 5000, 30_000]) {
      const b = deadClientBounds(keepaliveMs, Math.max(2 * keepaliveMs, 2000));
      expect(b.tcpUserTimeoutMs).toBeGreaterThan(b.clientLossMs);
      expect(b.keepalivesIdleS * 1000).toBeLessThan(b.tcpUserTimeoutMs);
    }
    expect(deadClientBounds(5000, 10_000)).toMatchObject({ clientLossMs: 17_500, tcpUserTimeoutMs: 20_000, serverFreeMs: 22_000 });
    expect(deadClientBounds(1000, 2000)).toMatchObject({ clientLossMs: 3500, tcpUserTimeoutMs: 4500, serverFreeMs: 5500 });
  });

  it("a database's idle_session_timeout does not kill an idle holder", async () => {
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      await admin.query(`ALTER DATABASE ${db.name} SET idle_session_timeout = '300ms'`);
      const { entries, logger } = capturingLogger();
      const locker = track(createLocker({ connectionString: db.url, logger }));
      const other = track(createLocker({ connectionString: db.url, keepaliveMs: 60_000 }));
      const h = await locker.acquire('settings:idle');
      await sleep(1500); // several idle_session_timeouts, while the holder's own probes are 5 s apart
      expect(h.signal.aborted).toBe(false);
      expect(await other.tryAcquire('settings:idle')).toBeNull();
      expect(await h.release()).toBe(true);
      // PostgreSQL 15 has no transaction_timeout: said once, at info, and the locker carries on.
      const version = Number((await admin.query('SHOW server_version_num')).rows[0].server_version_num);
      const lacking = entries.filter((e) => e.level === 'info' && e.msg.includes('lacks'));
      expect(lacking.length).toBe(version < 170000 ? 1 : 0);
    } finally {
      await admin.query(`ALTER DATABASE ${db.name} RESET idle_session_timeout`);
      await admin.end();
    }
  });
});
