/**
 * The benchmark behind `pgfence bench` and `npm run bench`: every pgfence figure next to a baseline
 * doing the same work in the same run (interleaved rounds, medians, min..max of per-round ratios), so
 * the ratios hold across machines. One module per measurement under measurements/.
 */

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { migrate } from '../migrate/index.js';
import { redactUrl } from '../session/index.js';
import { BenchContext, type BenchConfig } from './context.js';
import { adapters } from './measurements/adapters.js';
import { callers } from './measurements/callers.js';
import { durable } from './measurements/durable.js';
import { footprint } from './measurements/footprint.js';
import { fresh } from './measurements/fresh.js';
import { handoff } from './measurements/handoff.js';
import { many } from './measurements/many.js';
import { names } from './measurements/names.js';
import { pooled } from './measurements/pooled.js';
import { sqlInterface } from './measurements/sql-interface.js';
import { uncontended } from './measurements/uncontended.js';
import { wire } from './measurements/wire.js';
import { xact } from './measurements/xact.js';
import { renderTable } from './report.js';
import { fmt, median } from './stats.js';
import { sleep } from './timing.js';

interface Measurement {
  n: number;
  id: string;
  title: string;
  /** Needs pgfence's schema (tokens, leases, the name registry). */
  schema: boolean;
  run(ctx: BenchContext): Promise<void>;
}

export const MEASUREMENTS: readonly Measurement[] = [
  { n: 1, id: 'uncontended', title: 'uncontended acquire+release', schema: false, run: uncontended },
  { n: 2, id: 'callers', title: '64 callers on 64 keys', schema: false, run: callers },
  { n: 3, id: 'handoff', title: 'contended hand-off', schema: false, run: handoff },
  { n: 4, id: 'fresh', title: 'fresh lockers and processes', schema: false, run: fresh },
  { n: 5, id: 'durable', title: 'fenced locks and leases vs one durable commit', schema: true, run: durable },
  { n: 6, id: 'xact', title: 'xactLock vs pg_advisory_xact_lock', schema: false, run: xact },
  { n: 7, id: 'many', title: '10,000 locks held at once (or as many as the lock-table guard allows)', schema: false, run: many },
  { n: 8, id: 'names', title: 'lock names visible to other processes', schema: true, run: names },
  { n: 9, id: 'wire', title: 'round trips and messages per operation', schema: true, run: wire },
  { n: 10, id: 'sql', title: 'the SQL interface from pgbench', schema: true, run: sqlInterface },
  { n: 11, id: 'footprint', title: 'connections per locker, state by state', schema: true, run: footprint },
  { n: 12, id: 'pooled', title: 'through a transaction pooler', schema: true, run: pooled },
  { n: 13, id: 'adapters', title: "xactLock through each data-layer adapter vs the library's own pg_advisory_xact_lock", schema: true, run: adapters },
];

/** Which measurements `--only` names: numbers or ids, comma-separated; null when it names none. */
export function selectMeasurements(only: string | undefined): Measurement[] | null {
  // Row 12 needs a transaction pooler in front of the bench database: in the default set only when one is given.
  if (only === undefined) return MEASUREMENTS.filter((m) => m.id !== 'pooled' || process.env.PGFENCE_BENCH_POOLER_URL);
  const picked = new Set<Measurement>();
  for (const part of only.split(',').map((p) => p.trim())) {
    const m = MEASUREMENTS.find((x) => String(x.n) === part || x.id === part);
    if (!m) return null;
    picked.add(m);
  }
  return MEASUREMENTS.filter((m) => picked.has(m));
}

interface BenchRun {
  url: string;
  cfg: BenchConfig;
  measurements: Measurement[];
  /** Create or update pgfence's schema first (as `pgfence migrate`). */
  migrate: boolean;
  out: (text: string) => void;
  progress: (text: string) => void;
}

/** Runs the measurements; returns the number that crashed (missed targets are only reported). */
export async function runBench(run: BenchRun): Promise<number> {
  const started = performance.now();
  const runId = `pgfb_${process.pid}_${Date.now().toString(36)}`;
  const ctx = new BenchContext(run.url, run.cfg, runId);
  const { cfg, out } = run;
  if (run.migrate) await migrate({ connectionString: run.url });
  const env = await environment(ctx);
  ctx.rttMs = env.rttUs / 1000;
  const busy = await machineBusy(cfg.quick ? 300 : 1000); // before anything of ours runs
  const cpus = os.cpus();
  const pgVersion = (createRequire(import.meta.url)('pg/package.json') as { version: string }).version;
  out(`pgfence bench${cfg.quick ? ' --quick' : ''}  run ${runId}  ${redactUrl(run.url)}\n`);
  out(`node ${process.version}, pg ${pgVersion}, ${os.availableParallelism()} cores (${cpus[0]?.model?.trim() ?? 'unknown cpu'})\n`);
  out(`PostgreSQL ${env.version}, max_connections ${env.maxconn}, max_locks_per_transaction ${env.mlpt}, synchronous_commit ${env.sync}\n`);
  out(`machine before start: ${busy === null ? '?' : fmt.pct(busy)} CPU busy, load average ${loadavg()} (other work on this machine skews every figure; the ratios less so)\n`);
  out(`SELECT 1 round trip: ${env.rttUs.toFixed(0)} µs median; bare-pg baseline statements are named (prepared), as pgfence's are\n`);
  out(
    `throughput: rounds of >= ${cfg.roundMs} ms and >= ${cfg.minCyclesPerWorker} cycles per worker per side, sides rotating, ` +
      `about ${cfg.budgetMs / 1000} s per comparison; one-shot figures: ${cfg.samples} samples per side, interleaved\n`,
  );
  out('ratio: pgfence over the baseline, the median of per-round (or per-sample) ratios; min..max: theirs\n\n');

  let crashed = 0;
  for (const m of run.measurements) {
    const t = performance.now();
    run.progress(`[${m.n}] ${m.title} ... `);
    try {
      if (m.schema && !env.schema && !run.migrate) {
        ctx.row({ measurement: `${m.n}. ${m.title}`, pgfence: "skipped: needs pgfence's schema (pgfence migrate, or --migrate)" });
        run.progress('skipped\n');
        continue;
      }
      await m.run(ctx);
      run.progress(`${((performance.now() - t) / 1000).toFixed(1)} s\n`);
    } catch (err) {
      crashed++;
      run.progress('crashed\n');
      run.progress(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      ctx.row({ measurement: `${m.n}. ${m.title}`, pgfence: `ERROR: ${err instanceof Error ? err.message : String(err)}`.slice(0, 70), met: false });
    } finally {
      await ctx.closeAll();
    }
  }
  out(`${renderTable(ctx.rows)}\n\n`);
  for (const n of ctx.notes) out(`${n}\n`);
  out(`total ${((performance.now() - started) / 1000).toFixed(1)} s; load average at the end ${loadavg()}\n`);
  return crashed;
}

async function environment(ctx: BenchContext) {
  const client = await ctx.client('env');
  try {
    const { rows } = await client.query<{ version: string; mlpt: string; maxconn: string; sync: string; schema: boolean }>(
      `SELECT current_setting('server_version') AS version, current_setting('max_locks_per_transaction') AS mlpt,
              current_setting('max_connections') AS maxconn, current_setting('synchronous_commit') AS sync,
              to_regclass('pgfence.leases') IS NOT NULL AS schema`,
    );
    const q = { name: 'bench_one', text: 'SELECT 1' };
    for (let i = 0; i < 100; i++) await client.query(q);
    const rtts: number[] = [];
    for (let i = 0; i < 300; i++) {
      const t = performance.now();
      await client.query(q);
      rtts.push(performance.now() - t);
    }
    return { ...rows[0]!, rttUs: median(rtts) * 1000 };
  } finally {
    await ctx.closeAll();
  }
}

/** Share of the machine's CPU time that was busy over `ms` (Linux /proc/stat), or null elsewhere. */
async function machineBusy(ms: number): Promise<number | null> {
  const sample = () => {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    return { idle: f[3]! + (f[4] ?? 0), total: f.reduce((a, b) => a + b, 0) };
  };
  try {
    const a = sample();
    await sleep(ms);
    const b = sample();
    return 1 - (b.idle - a.idle) / Math.max(1, b.total - a.total);
  } catch {
    return null;
  }
}

const loadavg = () => os.loadavg().map((x) => x.toFixed(2)).join(' ');
