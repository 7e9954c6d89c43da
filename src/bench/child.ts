/**
 * A bench process of its own, for the measurements that need fresh or separate processes. Started by
 * the bench as `node child.js <json task>`; writes one JSON result line on stdout.
 *   burst:   `workers` fresh lockers (or bare pg connections) take `grants` turns each on one lock;
 *            the time from creating them to the last release (module loading is timed apart).
 *   contend: one locker (or connection) contends on one lock with the other processes: prints
 *            "ready", waits for a line on stdin, warms up, then counts its grants in a window.
 */

import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { cpuUs } from './timing.js';

interface BurstTask {
  kind: 'burst';
  side: 'pgfence' | 'pg';
  url: string;
  name: string;
  key: string;
  workers: number;
  grants: number;
}

interface ContendTask {
  kind: 'contend';
  side: 'pgfence' | 'pg';
  url: string;
  name: string;
  key: string;
  warmupMs: number;
  measureMs: number;
}

export interface BurstResult {
  importMs: number;
  burstMs: number;
  grants: number;
  /** This process's CPU (user + system, µs) while loading the modules, and during the burst. */
  importCpuUs: number;
  burstCpuUs: number;
}

export interface ContendResult {
  grants: number;
  windowMs: number;
  /** This process's CPU (µs) over the counting window. */
  cpuUs: number;
}


/** Acquire once, return the release; opened lazily, as an application would. */
type Holder = { acquire(): Promise<() => Promise<unknown>>; close(): Promise<unknown> };

async function holders(side: 'pgfence' | 'pg', url: string, name: string, key: string, count: number): Promise<Holder[]> {
  if (side === 'pgfence') {
    const { createLocker } = await import('../index.js');
    return Array.from({ length: count }, () => {
      const locker = createLocker({ connectionString: url, maxSessions: 1, defaultTimeoutMs: 60_000 });
      return {
        acquire: async () => {
          const h = await locker.acquire(name);
          return () => h.release();
        },
        close: () => locker.close(),
      };
    });
  }
  const { default: pg } = await import('pg');
  return Array.from({ length: count }, () => {
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {});
    let connected: Promise<unknown> | null = null;
    return {
      acquire: async () => {
        await (connected ??= client.connect());
        await client.query({ name: 'bench_lock', text: 'SELECT pg_advisory_lock($1::int8)', values: [key] });
        return () => client.query({ name: 'bench_unlock', text: 'SELECT pg_advisory_unlock($1::int8)', values: [key] });
      },
      close: () => client.end(),
    };
  });
}

async function burst(t: BurstTask): Promise<BurstResult> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  // Load the modules first (timed apart), then start the clock on fresh lockers or connections.
  // pgfence as a user loads it: the package's entry point (the bundle of `npm run build`).
  if (t.side === 'pgfence') await import('../index.js');
  else await import('pg');
  const t1 = performance.now();
  const cpu1 = process.cpuUsage();
  const hs = await holders(t.side, t.url, t.name, t.key, t.workers);
  let grants = 0;
  await Promise.all(
    hs.map(async (h) => {
      for (let i = 0; i < t.grants; i++) {
        const release = await h.acquire();
        grants++;
        await release();
      }
    }),
  );
  const t2 = performance.now();
  const burstCpuUs = cpuUs(process.cpuUsage(cpu1));
  await Promise.all(hs.map((h) => h.close()));
  return { importMs: t1 - t0, burstMs: t2 - t1, grants, importCpuUs: cpuUs(cpu1) - cpuUs(cpu0), burstCpuUs };
}

async function contend(t: ContendTask): Promise<ContendResult> {
  const [h] = await holders(t.side, t.url, t.name, t.key, 1);
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  // Connected (a first grant) before the start signal, so that every process starts together.
  await (await h!.acquire())();
  process.stdout.write('ready\n');
  await lines.next();
  const start = performance.now() + t.warmupMs;
  const end = start + t.measureMs;
  const stopAt = end + 300; // keep contending a little past the window: no process ends it uncontended
  let grants = 0;
  let cpuAtStart: NodeJS.CpuUsage | null = null;
  let cpuInWindow = 0;
  for (;;) {
    const release = await h!.acquire();
    const now = performance.now();
    if (now >= start && now < end) {
      cpuAtStart ??= process.cpuUsage();
      grants++;
    } else if (now >= end && cpuAtStart && cpuInWindow === 0) cpuInWindow = cpuUs(process.cpuUsage(cpuAtStart));
    await release();
    if (now >= stopAt) break;
  }
  await h!.close();
  return { grants, windowMs: t.measureMs, cpuUs: cpuInWindow };
}

const task = JSON.parse(process.argv[2] ?? '{}') as BurstTask | ContendTask;
(task.kind === 'burst' ? burst(task) : contend(task)).then(
  (result) => {
    process.stdout.write(`${JSON.stringify(result)}\n`);
    process.exit(0);
  },
  (err: unknown) => {
    process.stderr.write(`bench child: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
