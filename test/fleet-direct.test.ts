/**
 * A fleet of lockers on direct connections (issue 21 item 4): each locker holding a session lock and a
 * lease keeps one backend, so a server with a small max_connections serves the whole fleet.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type LeaseHandle, type LockHandle, type Locker, migrate } from '../src/index.js';
import { capabilityMissing } from './support/capability.js';
import { type PrivateCluster, privateClusterUnavailable, startPrivateCluster } from './support/cluster.js';
import { appName } from './support/db.js';

const LOCKERS = 60;
/** Room for the fleet at one backend per locker, the test's own connection and a little slack; at two per locker it is full. */
const MAX_CONNECTIONS = 70;

const skipped = capabilityMissing('DIRECT FLEET TESTS', privateClusterUnavailable(), 'they start a PostgreSQL of their own with a small max_connections');

describe.skipIf(skipped)('a direct fleet on a small server', () => {
  let cluster: PrivateCluster;
  beforeAll(async () => {
    cluster = await startPrivateCluster({ settings: { max_connections: MAX_CONNECTIONS } });
    await migrate({ connectionString: cluster.url });
  }, 120_000);
  afterAll(async () => {
    await cluster?.stop();
  }, 60_000);

  it(`${LOCKERS} lockers each holding a session lock and a lease keep one backend each`, async () => {
    const app = appName('fleet');
    const admin = new pg.Client({ connectionString: cluster.url });
    await admin.connect();
    const lockers: Locker[] = Array.from({ length: LOCKERS }, () => createLocker({ connectionString: `${cluster.url}?application_name=${app}` }));
    try {
      const held = await Promise.all(
        lockers.map(async (locker, i): Promise<[LockHandle, LeaseHandle]> => [
          await locker.acquire(`fleet:lock:${i}`, { fencing: true }),
          await locker.lease(`fleet:lease:${i}`, { ttlMs: 60_000 }),
        ]),
      );
      const { rows } = await admin.query<{ n: number; max: number }>(
        `SELECT count(*)::int AS n, current_setting('max_connections')::int AS max FROM pg_stat_activity WHERE application_name = $1`,
        [app],
      );
      expect(rows[0]!.max).toBe(MAX_CONNECTIONS);
      expect(rows[0]!.n).toBe(LOCKERS);
      for (const [lock, lease] of held) {
        expect(lock.signal.aborted).toBe(false);
        expect(lease.signal.aborted).toBe(false);
      }
      // Every lock and lease is held by its own locker, as the server sees it.
      const locks = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`,
        [app],
      );
      expect(locks.rows[0]!.n).toBe(LOCKERS);
      const leases = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgfence.leases WHERE released_at IS NULL AND expires_at > clock_timestamp()`);
      expect(leases.rows[0]!.n).toBe(LOCKERS);
      for (const [lock, lease] of held) {
        expect(await lock.release()).toBe(true);
        expect(await lease.release()).toBe(true);
      }
    } finally {
      await Promise.all(lockers.map((l) => l.close()));
      await admin.end();
    }
  }, 120_000);
});
