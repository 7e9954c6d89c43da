import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../src/index.js';
import { capabilityMissing } from './support/capability.js';
import { type PrivateCluster, privateClusterUnavailable, startPrivateCluster } from './support/cluster.js';
import { queryOnce } from './support/db.js';
import { type Bouncer, pgbouncerUnavailable, startPgBouncer } from './support/pgbouncer.js';
import { childEnv, startProcess } from './support/process.js';

/**
 * A fleet through a real PgBouncer in transaction mode (default_pool_size 20) in front of a server
 * with max_connections 40: 300 lockers in 3 processes doing lease cycles with fenced writes, semaphore
 * permits and one leader election. Every kind but session locks works there, with no pinned connection.
 */
const skipped = capabilityMissing('FLEET TESTS', pgbouncerUnavailable() ?? privateClusterUnavailable(), 'they start PgBouncer and a PostgreSQL of their own');

const PROCESSES = 3;
const LOCKERS_PER_PROCESS = 100;
const ROUNDS = 2;
const LEASE_NAMES = 20;

interface Summary {
  leaseCycles: number;
  permits: number;
  timeouts: number;
  errors: string[];
  maxInside: number;
  maxLeaders: number;
  refusedWrites: number;
}

describe.skipIf(skipped)('a fleet of 300 lockers behind PgBouncer (transaction mode)', () => {
  let cluster: PrivateCluster;
  let bouncer: Bouncer;
  let url: string;

  beforeAll(async () => {
    cluster = await startPrivateCluster({ settings: { max_connections: 40 } });
    await migrate({ connectionString: cluster.url });
    await queryOnce(
      cluster.url,
      `CREATE TABLE fleet_counter (id int PRIMARY KEY, n int NOT NULL, fencing_token bigint NOT NULL DEFAULT 0);
       INSERT INTO fleet_counter SELECT g, 0 FROM generate_series(0, ${LEASE_NAMES - 1}) AS g;
       INSERT INTO fleet_counter VALUES (1000, 0);
       CREATE TABLE fleet_inside (id int PRIMARY KEY, n int NOT NULL);
       INSERT INTO fleet_inside VALUES (1, 0), (2, 0);`,
    );
    bouncer = await startPgBouncer(cluster.url, 'transaction', { maxClientConn: 3000 });
    url = bouncer.url(cluster.url);
  }, 120_000);

  afterAll(async () => {
    await bouncer?.stop();
    await cluster?.stop();
  }, 60_000);

  it('leases, permits and leadership: 0 errors but typed timeouts, fenced counters exact, backends never above 40', async () => {
    // The server's backends, sampled throughout (this monitor is one of them).
    const monitor = new pg.Client({ connectionString: cluster.url });
    await monitor.connect();
    let maxBackends = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await monitor.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend'`);
        maxBackends = Math.max(maxBackends, rows[0]!.n);
        await new Promise((resolve) => setTimeout(resolve, 100)); // the sampling period, not a wait for a state
      }
    })();
    const worker = new URL('./fixtures/fleet-worker.mjs', import.meta.url).pathname;
    const children = Array.from({ length: PROCESSES }, (_, p) =>
      startProcess(process.execPath, [worker, url, String(p), String(LOCKERS_PER_PROCESS), String(ROUNDS), 'candidate'], {
        env: childEnv({}),
        timeoutMs: 90_000,
      }),
    );
    const finished = await Promise.all(children.map((c) => c.done));
    sampling = false;
    await sampler;
    await monitor.end();

    const summaries: Summary[] = finished.map((f, p) => {
      const line = /^done (.*)$/m.exec(f.stdout);
      expect(line, `process ${p} ended without a summary (code ${f.code}): ${f.stderr.slice(-2000)}`).not.toBeNull();
      return JSON.parse(line![1]!) as Summary;
    });
    const total = (k: keyof Summary) => summaries.reduce((n, s) => n + (s[k] as number), 0);
    expect(summaries.flatMap((s) => s.errors)).toEqual([]);
    expect(total('refusedWrites')).toBe(0);
    // Fenced counters exact: every lease cycle that reported its write is in the counters, nothing more.
    const [{ n }] = (await queryOnce<{ n: number }>(cluster.url, `SELECT sum(n)::int AS n FROM fleet_counter WHERE id < ${LEASE_NAMES}`)) as [{ n: number }];
    expect(n).toBe(total('leaseCycles'));
    expect(total('leaseCycles') + total('timeouts')).toBeGreaterThanOrEqual(PROCESSES * LOCKERS_PER_PROCESS * ROUNDS);
    expect(total('leaseCycles')).toBeGreaterThan(0);
    expect(total('permits')).toBeGreaterThan(0);
    expect(Math.max(...summaries.map((s) => s.maxInside))).toBeLessThanOrEqual(5);
    expect(Math.max(...summaries.map((s) => s.maxInside))).toBeGreaterThan(1);
    // One leader at a time; each next one elected after the previous left, with a greater epoch.
    expect(Math.max(...summaries.map((s) => s.maxLeaders))).toBe(1);
    const terms = finished
      .flatMap((f) => [...f.stdout.matchAll(/^(elected|resigned) (\d+)$/gm)].map((m) => ({ what: m[1]!, epoch: BigInt(m[2]!) })))
      .sort((a, b) => (a.epoch < b.epoch ? -1 : a.epoch > b.epoch ? 1 : a.what === 'elected' ? -1 : 1));
    expect(terms.filter((t) => t.what === 'elected')).toHaveLength(PROCESSES);
    expect(new Set(terms.map((t) => t.epoch)).size).toBe(PROCESSES);
    expect(maxBackends).toBeLessThanOrEqual(40);
    // PgBouncer's pool (20) and this test's own connections: the fleet itself pins nothing.
    expect(maxBackends).toBeLessThanOrEqual(20 + 2);
  }, 120_000);
});
