/**
 * Contended hand-off: `workers` loops take turns on one lock, each with its own locker (think:
 * instances), and all on one shared locker; next to as many dedicated connections looping a blocking
 * pg_advisory_lock / pg_advisory_unlock. Rounds rotate the three variants; latencies are pooled.
 */

import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { lockKey } from '../../keys.js';
import { SQL, type BenchContext } from '../context.js';
import { cpuColumns, type CpuPair } from '../report.js';
import { fmt, percentile } from '../stats.js';
import { cpuUsSince, sleep } from '../timing.js';

/** Resolves once worker `w` holds the lock; returns its release. */
type Acquire = (w: number) => Promise<() => Promise<unknown>>;

interface Round {
  grants: number;
  changes: number;
  overlaps: number;
  latencies: number[];
  perWorker: number[];
  elapsedMs: number;
  /** This process's CPU over the measuring window, µs. */
  cpuUs: number;
}

/** One round: a warm-up, then a measuring window; the time from each release to the next grant. */
async function handoffRound(workers: number, warmupMs: number, measureMs: number, acquire: Acquire): Promise<Round> {
  let phase: 'warmup' | 'measure' | 'stop' = 'warmup';
  let holder: number | null = null; // who holds the lock now, as this process sees it
  let lastHolder: number | null = null;
  let releasedAt: number | null = null;
  const r: Round = { grants: 0, changes: 0, overlaps: 0, latencies: [], perWorker: new Array<number>(workers).fill(0), elapsedMs: 0, cpuUs: 0 };
  const loops = Array.from({ length: workers }, async (_, w) => {
    while (phase !== 'stop') {
      const release = await acquire(w);
      const now = performance.now();
      if (holder !== null) r.overlaps++; // two holders at once: mutual exclusion broken
      holder = w;
      if (phase === 'measure') {
        r.grants++;
        r.perWorker[w]!++;
        if (releasedAt !== null) r.latencies.push(now - releasedAt);
        if (lastHolder !== null && lastHolder !== w) r.changes++;
      }
      lastHolder = w;
      holder = null;
      releasedAt = performance.now();
      await release();
    }
  });
  await sleep(warmupMs);
  phase = 'measure';
  releasedAt = null;
  lastHolder = null;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  await sleep(measureMs);
  phase = 'stop';
  r.elapsedMs = performance.now() - t0;
  r.cpuUs = cpuUsSince(cpu0);
  await Promise.all(loops);
  return r;
}

interface HandoffSummary {
  p50: number;
  p99: number;
  over10ms: number;
  handoffs: number;
  changeShare: number;
  grantsPerSec: number;
  roundRates: number[];
  /** Per round: CPU µs per grant. */
  roundCpu: number[];
  overlaps: number;
  minWorkerShare: number;
}

function summarize(rounds: Round[]): HandoffSummary {
  const sum = (f: (r: Round) => number) => rounds.reduce((acc, r) => acc + f(r), 0);
  const latencies = rounds.flatMap((r) => r.latencies);
  const grants = sum((r) => r.grants);
  const perWorker = rounds[0]!.perWorker.map((_, w) => sum((r) => r.perWorker[w]!));
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    over10ms: latencies.filter((x) => x > 10).length,
    handoffs: latencies.length,
    changeShare: sum((r) => r.changes) / Math.max(1, sum((r) => Math.max(0, r.grants - 1))),
    grantsPerSec: (grants * 1000) / sum((r) => r.elapsedMs),
    roundRates: rounds.map((r) => (r.grants * 1000) / r.elapsedMs),
    roundCpu: rounds.map((r) => r.cpuUs / Math.max(1, r.grants)),
    overlaps: sum((r) => r.overlaps),
    minWorkerShare: Math.min(...perWorker) / Math.max(1, grants),
  };
}

export async function handoff(ctx: BenchContext): Promise<void> {
  const { workers, handoffRounds, handoffWarmupMs, handoffMs } = ctx.cfg;
  const lockers = Array.from({ length: workers }, (_, w) => ctx.locker(`m3_${w}`, { maxSessions: 1 }));
  const shared = ctx.locker('m3s');
  const clients: pg.Client[] = [];
  for (let w = 0; w < workers; w++) clients.push(await ctx.client(`m3b_${w}`));
  // Every locker's session is open before any clock starts.
  await Promise.all([...lockers, shared].map(async (l) => (await l.acquire(ctx.name('handoff', 'warm'))).release()));

  const variants: Record<'own' | 'base' | 'one', (round: number) => Promise<Round>> = {
    own: (round) => {
      const name = ctx.name('handoff', 'lockers', round);
      return handoffRound(workers, handoffWarmupMs, handoffMs, async (w) => {
        const h = await lockers[w]!.acquire(name);
        return () => h.release();
      });
    },
    base: (round) => {
      const key = lockKey(ctx.name('handoff', 'baseline', round)).toString();
      return handoffRound(workers, handoffWarmupMs, handoffMs, async (w) => {
        await clients[w]!.query({ ...SQL.lock, values: [key] });
        return () => clients[w]!.query({ ...SQL.unlock, values: [key] });
      });
    },
    one: (round) => {
      const name = ctx.name('handoff', 'shared', round);
      return handoffRound(workers, handoffWarmupMs, handoffMs, async () => {
        const h = await shared.acquire(name);
        return () => h.release();
      });
    },
  };
  const results: Record<string, Round[]> = { own: [], base: [], one: [] };
  const order = ['own', 'base', 'one'] as const;
  for (let round = 0; round < handoffRounds; round++) {
    for (let i = 0; i < order.length; i++) {
      const v = order[(i + round) % order.length]!;
      results[v]!.push(await variants[v](round));
    }
  }
  const own = summarize(results.own!);
  const base = summarize(results.base!);
  const one = summarize(results.one!);
  const paired = (a: Round[], b: Round[]) => a.map((r, i) => r.grants / r.elapsedMs / (b[i]!.grants / b[i]!.elapsedMs));

  const l = `3. hand-off, ${workers} workers / ${workers} lockers:`;
  const row = (measurement: string, p: string, b: string, ratio = '', target = '', met: boolean | null = null, range = '', cpu?: CpuPair) =>
    ctx.row({ measurement, pgfence: p, baseline: b, ratio, range, target, met, ...cpuColumns(cpu) });
  row(`${l} p50`, fmt.ms(own.p50), fmt.ms(base.p50), fmt.ratio(own.p50 / base.p50), '<= 1 ms', own.p50 <= 1);
  row(`${l} p99`, fmt.ms(own.p99), fmt.ms(base.p99), fmt.ratio(own.p99 / base.p99));
  row(`${l} hand-offs > 10 ms`, `${own.over10ms} of ${own.handoffs}`, `${base.over10ms} of ${base.handoffs}`);
  row(`${l} holder changes`, fmt.pct(own.changeShare), fmt.pct(base.changeShare), '', '>= 90%', own.changeShare >= 0.9);
  const ownRatios = paired(results.own!, results.base!);
  const rate = own.grantsPerSec / base.grantsPerSec;
  row(`${l} grants/s`, fmt.rate(own.grantsPerSec), fmt.rate(base.grantsPerSec), fmt.ratio(rate), '>= 0.85x', rate >= 0.85, rangeOf(ownRatios), { pgfence: own.roundCpu, baseline: base.roundCpu });
  row(`${l} fewest grants, 1 worker`, fmt.pct(own.minWorkerShare), fmt.pct(base.minWorkerShare), '', `(fair: ${fmt.pct(1 / workers)})`);
  row(`${l} overlapping holders`, String(own.overlaps), String(base.overlaps), '', '= 0', own.overlaps === 0 && base.overlaps === 0);
  const l2 = `3. hand-off, ${workers} workers / 1 locker:`;
  row(`${l2} p50`, fmt.ms(one.p50), fmt.ms(base.p50), fmt.ratio(one.p50 / base.p50));
  row(`${l2} p99`, fmt.ms(one.p99), fmt.ms(base.p99), fmt.ratio(one.p99 / base.p99));
  row(`${l2} holder changes`, fmt.pct(one.changeShare), fmt.pct(base.changeShare));
  const oneRate = one.grantsPerSec / base.grantsPerSec;
  row(`${l2} grants/s`, fmt.rate(one.grantsPerSec), fmt.rate(base.grantsPerSec), fmt.ratio(oneRate), '>= 0.85x', oneRate >= 0.85, rangeOf(paired(results.one!, results.base!)), { pgfence: one.roundCpu, baseline: base.roundCpu });
  row(`${l2} overlapping holders`, String(one.overlaps), String(base.overlaps), '', '= 0', one.overlaps === 0);
  ctx.note(`3. grants/s per round: ${workers} lockers ${fmt.list(own.roundRates)}; baseline ${fmt.list(base.roundRates)}; 1 locker ${fmt.list(one.roundRates)}`);
}

const rangeOf = (xs: number[]) => (xs.length > 1 ? `${fmt.ratio(Math.min(...xs))}..${fmt.ratio(Math.max(...xs))}` : '');
