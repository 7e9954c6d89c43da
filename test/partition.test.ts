import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type Locker } from '../src/index.js';
import { deadClientBounds } from '../src/session/server-settings.js';
import { capabilityMissing } from './support/capability.js';
import { eventually } from './support/db.js';
import { createPartitionLab, netnsUnavailable, type PartitionLab } from './support/netns.js';

/**
 * Real partitions: a holder process inside a network namespace, its link cut with `ip link set down`.
 * The server must drop the partitioned backend (and its locks) within the documented bound, after the
 * holder's own signal has aborted. Needs root and iproute2; CI sets PGFENCE_REQUIRE_TOPOLOGY_TESTS=1.
 */
const skipped = capabilityMissing('PARTITION TESTS', netnsUnavailable(), 'they need root, iproute2 and network namespaces');

const keepaliveMs = Number(process.env.PGFENCE_PARTITION_KEEPALIVE_MS ?? 1000);
const bounds = deadClientBounds(keepaliveMs, Math.max(2 * keepaliveMs, 2000));
/** Generous: the test asserts outcomes; the figures are printed for bench notes. */
const hangGuardMs = 3 * bounds.serverFreeMs + 15_000;

describe.skipIf(skipped)('a partitioned client', () => {
  let lab: PartitionLab;
  let admin: pg.Client;
  const lockers: Locker[] = [];
  let child: ChildProcess | null = null;

  beforeAll(async () => {
    lab = await createPartitionLab();
    admin = new pg.Client({ connectionString: lab.outerUrl });
    await admin.connect();
  }, 120_000);

  afterAll(async () => {
    child?.kill('SIGKILL');
    await Promise.all(lockers.map((l) => l.close().catch(() => {})));
    await admin?.end().catch(() => {});
    await lab?.destroy();
  }, 60_000);

  const fromNamespace = async (sql: string) =>
    (
      await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory'
          WHERE a.client_addr = $1::inet AND ${sql}`,
        [lab.innerAddress],
      )
    ).rows[0]!.n;

  it(
    "aborts the holder's signal first, then the server frees its lock and drops its queued wait; nothing leaks once the link is back",
    async () => {
      const outer = createLocker({ connectionString: lab.outerUrl });
      const probe = createLocker({ connectionString: lab.outerUrl });
      lockers.push(outer, probe);
      const blocker = await outer.acquire('part:waited');

      const fixture = new URL('./fixtures/partition-holder.mjs', import.meta.url).pathname;
      const [cmd, ...args] = lab.exec([process.execPath, fixture, lab.innerUrl, 'part:held', 'part:waited', String(keepaliveMs)]);
      const proc = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'] });
      child = proc;
      const events: { event: string; at: number; code?: string }[] = [];
      let stderr = '';
      proc.stderr!.on('data', (d) => (stderr += d));
      createInterface({ input: proc.stdout! }).on('line', (line) => events.push(JSON.parse(line)));
      const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
      const seen = (event: string) => events.find((e) => e.event === event);

      await eventually(() => seen('held') !== undefined, 30_000, 'the namespaced holder to take its lock');
      await eventually(async () => (await fromNamespace('NOT l.granted')) === 1, 30_000, 'the namespaced waiter to queue on the server');
      expect(await probe.tryAcquire('part:held')).toBeNull();

      const cutAt = Date.now();
      await lab.cut();

      let freedAt = 0;
      let waiterGoneAt = 0;
      await Promise.all([
        eventually(
          async () => {
            const h = await probe.tryAcquire('part:held');
            if (!h) return false;
            freedAt = Date.now();
            await h.release();
            return true;
          },
          hangGuardMs,
          'the server to free the partitioned holder',
        ),
        eventually(
          async () => {
            if ((await fromNamespace('NOT l.granted')) > 0) return false;
            waiterGoneAt = Date.now();
            return true;
          },
          hangGuardMs,
          "the partitioned waiter to leave the server's queue",
        ),
        eventually(() => seen('aborted') !== undefined, hangGuardMs, "the holder's signal to abort"),
      ]);
      const abortedAt = seen('aborted')!.at;
      console.log(
        `[partition] keepaliveMs ${keepaliveMs}: holder aborted ${abortedAt - cutAt} ms after the cut, ` +
          `server freed its lock ${freedAt - cutAt} ms, dropped its queued wait ${waiterGoneAt - cutAt} ms ` +
          `(documented bound ${bounds.serverFreeMs} ms; waiter + ${bounds.connectionCheckIntervalMs} ms)`,
      );
      expect(seen('aborted')!.code).toBe('PGFENCE_LOCK_LOST');
      expect(abortedAt).toBeLessThan(freedAt);
      expect(await fromNamespace('true')).toBe(0); // no backend of the partitioned client is left

      // The blocker's release hands the key to nobody partitioned: it is free for the outside at once.
      await blocker.release();
      const again = await probe.tryAcquire('part:waited');
      expect(again).not.toBeNull();
      await again!.release();

      // Link back: the same process recovers (new sessions), takes its lock again, closes cleanly.
      await lab.restore();
      proc.stdin!.write('again\n');
      await eventually(() => seen('reacquired') !== undefined || seen('reacquire-failed') !== undefined, 60_000, 'the holder to retry');
      expect(seen('reacquire-failed')).toBeUndefined();
      proc.stdin!.write('close\n');
      expect(await exited).toBe(0);
      child = null;
      expect(stderr).toBe('');
      await eventually(async () => (await fromNamespace('true')) === 0, 15_000, 'no backend of the namespace left');
      const { rows } = await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'`);
      expect(rows[0]!.n).toBe(0);
    },
    hangGuardMs * 2 + 60_000,
  );
});
