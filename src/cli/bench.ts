/**
 * pgfence bench: a quick sanity check of pgfence against an operator's own database, each figure
 * side by side with bare pg doing the same work (the repository's bench/run.js is the full run).
 * Uses random int64 keys, so it writes nothing to pgfence's name registry and works without the schema.
 */

import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createLocker, type Locker } from '../locker.js';
import { numberFlag } from './args.js';
import { noPositionals, runCommand, type CommandSpec } from './command.js';
import { databaseFlag, databaseHelp, databaseUrl, redactUrl, withApplicationName } from './database.js';
import { openClient } from '../session/multi-host.js';
import { EXIT } from './exit-codes.js';
import { fmt, table } from './format.js';

const DEFAULT_SECONDS = 10;
const DEFAULT_WORKERS = 4;

const spec: CommandSpec = {
  name: 'bench',
  synopsis: 'pgfence bench [--seconds N] [--workers N] [--database-url <url>]',
  help: `A quick benchmark against your database, as a sanity check (about --seconds long):
  1. uncontended acquire+release cycles/s on one locker, side by side with one pinned pg client
     doing pg_try_advisory_lock + pg_advisory_unlock: short rounds alternate between the two and
     the ratio is the median of the per-round ratios (so drift in the machine's load cancels out);
  2. contended hand-off: --workers workers, each with its own locker, take turns on one lock;
     the time from one release to the next grant (p50, p99) and grants/s, next to the same number
     of connections looping a blocking pg_advisory_lock / pg_advisory_unlock.
It uses random keys (nothing is written to pgfence's tables) and opens about 3 connections per
worker. Figures depend on the network and the server's load: compare the ratios.

options:
  --seconds N           total duration, 2 to 600 (default ${DEFAULT_SECONDS})
  --workers N           contending workers, 2 to 16 (default ${DEFAULT_WORKERS})
${databaseHelp(24)}
  -h, --help            this help

exit status: 0 done; 1 a measurement failed (e.g. the database could not be reached); 64 bad command line.
`,
  flags: {
    ...databaseFlag,
    seconds: { type: 'number', min: 2, max: 600 },
    workers: { type: 'number', min: 2, max: 16, integer: true },
  },
};

export async function run(argv: string[]): Promise<number> {
  return runCommand(spec, argv, async (args) => {
    noPositionals(args);
    const url = databaseUrl(args);
    const seconds = numberFlag(args, 'seconds') ?? DEFAULT_SECONDS;
    const workers = numberFlag(args, 'workers') ?? DEFAULT_WORKERS;
    return bench(url, seconds * 1000, workers);
  });
}

// Named, so the server parses them once, as pgfence's own statements are.
const TRY = { name: 'pgfence_bench_try', text: 'SELECT pg_try_advisory_lock($1::int8) AS ok' };
const UNLOCK = { name: 'pgfence_bench_unlock', text: 'SELECT pg_advisory_unlock($1::int8) AS ok' };
const LOCK = { name: 'pgfence_bench_lock', text: 'SELECT pg_advisory_lock($1::int8)' };

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const randomKey = () => randomBytes(8).readBigInt64BE();
const progress = (text: string) => process.stderr.write(text);

function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

async function connect(url: string, applicationName: string): Promise<pg.Client> {
  const client = openClient(withApplicationName(url, applicationName), { connectionTimeoutMillis: 10_000 });
  client.on('error', () => {}); // a lost connection surfaces as a failed query
  await client.connect();
  return client;
}

/** Cycles per second of `cycle` run back to back for `ms`. */
async function rate(ms: number, cycle: () => Promise<void>): Promise<number> {
  let n = 0;
  const t0 = performance.now();
  const end = t0 + ms;
  while (performance.now() < end) {
    await cycle();
    n++;
  }
  return (n * 1000) / (performance.now() - t0);
}

interface Handoff {
  p50: number;
  p99: number;
  grantsPerSec: number;
  overlaps: number;
}

/**
 * `workers` loops of acquire -> release on one lock; records the time from each release to the next
 * grant during the measuring window (after a warm-up).
 */
async function handoff(workers: number, warmupMs: number, measureMs: number, acquire: (w: number) => Promise<() => Promise<unknown>>): Promise<Handoff> {
  let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
  let holder: number | null = null;
  let releasedAt: number | null = null;
  let grants = 0;
  let overlaps = 0;
  const latencies: number[] = [];
  const loops = Array.from({ length: workers }, async (_, w) => {
    while (phase !== 'stop') {
      const release = await acquire(w);
      const now = performance.now();
      if (holder !== null) overlaps++;
      holder = w;
      if (phase === 'measure') {
        grants++;
        if (releasedAt !== null) latencies.push(now - releasedAt);
      }
      holder = null;
      releasedAt = performance.now();
      await release();
    }
  });
  await sleep(warmupMs);
  phase = 'measure';
  releasedAt = null;
  const t0 = performance.now();
  await sleep(measureMs);
  phase = 'stop';
  const elapsed = performance.now() - t0;
  await Promise.all(loops);
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), grantsPerSec: (grants * 1000) / elapsed, overlaps };
}

async function bench(url: string, totalMs: number, workers: number): Promise<number> {
  const lockers: Locker[] = [];
  const clients: pg.Client[] = [];
  const newLocker = (label: string) => {
    const l = createLocker({ connectionString: withApplicationName(url, `pgfence bench ${label}`), maxSessions: 1, defaultTimeoutMs: 60_000 });
    lockers.push(l);
    return l;
  };
  const newClient = async (label: string) => {
    const c = await connect(url, `pgfence bench ${label}`);
    clients.push(c);
    return c;
  };
  try {
    const baseline = await newClient('baseline');
    const version = (await baseline.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v;
    process.stdout.write(`pgfence bench: ${redactUrl(url)} (PostgreSQL ${version}), ${totalMs / 1000} s, ${workers} contending workers\n\n`);

    // 1. Uncontended: half the time, alternating rounds of about 200 ms.
    progress('uncontended acquire+release ... ');
    const locker = newLocker('uncontended');
    const key = randomKey();
    const baseKey = randomKey().toString();
    const pgfenceCycle = async () => {
      await (await locker.acquire(key)).release();
    };
    const bareCycle = async () => {
      const { rows } = await baseline.query<{ ok: boolean }>({ ...TRY, values: [baseKey] });
      if (!rows[0]!.ok) throw new Error('bare pg: an uncontended pg_try_advisory_lock failed (is something else holding the key?)');
      await baseline.query({ ...UNLOCK, values: [baseKey] });
    };
    const budget1 = totalMs / 2;
    const warmupMs = Math.min(300, budget1 * 0.1);
    await rate(warmupMs, pgfenceCycle);
    await rate(warmupMs, bareCycle);
    const rounds = Math.max(3, Math.min(21, Math.floor((budget1 - 2 * warmupMs) / 400)));
    const roundMs = Math.max(50, (budget1 - 2 * warmupMs) / (2 * rounds));
    const a: number[] = [];
    const b: number[] = [];
    for (let r = 0; r < rounds; r++) {
      // Flip which side goes first, so neither always runs on a warmer machine.
      if (r % 2 === 0) {
        a.push(await rate(roundMs, pgfenceCycle));
        b.push(await rate(roundMs, bareCycle));
      } else {
        b.push(await rate(roundMs, bareCycle));
        a.push(await rate(roundMs, pgfenceCycle));
      }
    }
    const ratio = percentile(a.map((x, i) => x / b[i]!), 50);
    progress('done\n');

    // 2. Contended hand-off: the other half, split between pgfence and the baseline.
    progress(`contended hand-off, ${workers} workers ... `);
    const handoffLockers = Array.from({ length: workers }, (_, w) => newLocker(`handoff ${w}`));
    const handoffClients: pg.Client[] = [];
    for (let w = 0; w < workers; w++) handoffClients.push(await newClient(`handoff baseline ${w}`));
    // Open every locker's session before any clock starts.
    await Promise.all(handoffLockers.map(async (l) => (await l.acquire(randomKey())).release()));
    const side = totalMs / 4;
    const hKey = randomKey();
    const mine = await handoff(workers, side * 0.2, side * 0.8, async (w) => {
      const h = await handoffLockers[w]!.acquire(hKey);
      return () => h.release();
    });
    const hBaseKey = randomKey().toString();
    const bare = await handoff(workers, side * 0.2, side * 0.8, async (w) => {
      await handoffClients[w]!.query({ ...LOCK, values: [hBaseKey] });
      return () => handoffClients[w]!.query({ ...UNLOCK, values: [hBaseKey] });
    });
    progress('done\n\n');

    const median = (xs: number[]) => percentile(xs, 50);
    const rows = [
      ['uncontended acquire+release', fmt.rate(median(a)), fmt.rate(median(b)), fmt.ratio(ratio)],
      [`hand-off p50, ${workers} workers`, fmt.ms(mine.p50), fmt.ms(bare.p50), fmt.ratio(mine.p50 / bare.p50)],
      [`hand-off p99, ${workers} workers`, fmt.ms(mine.p99), fmt.ms(bare.p99), fmt.ratio(mine.p99 / bare.p99)],
      [`hand-off grants, ${workers} workers`, fmt.rate(mine.grantsPerSec), fmt.rate(bare.grantsPerSec), fmt.ratio(mine.grantsPerSec / bare.grantsPerSec)],
      ['overlapping holders', String(mine.overlaps), String(bare.overlaps), ''],
    ];
    process.stdout.write(`${table(['measurement', 'pgfence', 'bare pg', 'ratio'], rows, { alignRight: [1, 2, 3] })}\n\n`);
    process.stdout.write(
      `uncontended: median of ${rounds} per-round ratios (rounds of ${Math.round(roundMs)} ms, alternating) against one pinned\n` +
        `client doing pg_try_advisory_lock + pg_advisory_unlock. hand-off: release to next grant, each worker with\n` +
        `its own locker, against ${workers} connections looping pg_advisory_lock / pg_advisory_unlock.\n`,
    );
    if (mine.overlaps > 0) {
      process.stderr.write('pgfence bench: two holders overlapped: mutual exclusion was broken\n');
      return EXIT.FAILURE;
    }
    return EXIT.OK;
  } catch (err) {
    progress('failed\n');
    throw err;
  } finally {
    await Promise.all([...lockers.map((l) => l.close().catch(() => {})), ...clients.map((c) => c.end().catch(() => {}))]);
  }
}
