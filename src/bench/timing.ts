/**
 * How the bench times things: loops of a cycle for a while (throughput), and interleaved rounds that
 * put every side of a comparison next to each other, round after round, in a rotating order.
 */

import { performance } from 'node:perf_hooks';
import type { BenchConfig } from './context.js';
import { median, pairedRatios, type Spread } from './stats.js';

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A cycle run by `workers` loops at once; `w` is the loop's number. */
type Cycle = (w: number) => Promise<unknown>;

interface Throughput {
  /** Cycles per second. */
  rate: number;
  cycles: number;
  /** This process's CPU time (user + system) per counted cycle, in µs, over the same window. */
  cpuUsPerOp: number;
}

/** A process.cpuUsage() reading (or difference) as CPU µs, user + system. */
export const cpuUs = (u: NodeJS.CpuUsage): number => u.user + u.system;

/** This process's CPU µs since `from` (a process.cpuUsage() reading). */
export const cpuUsSince = (from: NodeJS.CpuUsage): number => cpuUs(process.cpuUsage(from));

/**
 * Runs `workers` loops of `cycle` for at least `ms` and at least `minCycles` cycles. The rate is the
 * cycles completed by the last completion inside that window, over the time to that completion: with
 * many workers, cycles complete in bursts (one batch per round trip), and a window that ends between
 * two bursts would otherwise count one burst more or less. Every loop is drained before returning.
 */
export async function throughput(workers: number, ms: number, cycle: Cycle, minCycles = 1): Promise<Throughput> {
  let stop = false;
  let counted = 0;
  let lastAt = 0;
  let cpuUs = 0;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const end = t0 + ms;
  const hardEnd = t0 + 3 * ms; // minCycles yields to this: a stalled side must not hold the run up
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => (resolveDone = r));
  const loops = Array.from({ length: workers }, async (_, w) => {
    while (!stop) {
      await cycle(w);
      if (stop) break;
      counted++;
      lastAt = performance.now();
      if (lastAt >= end && (counted >= minCycles || lastAt >= hardEnd)) {
        stop = true;
        cpuUs = cpuUsSince(cpu0);
        resolveDone();
      }
    }
  });
  await Promise.race([done, Promise.all(loops)]);
  stop = true;
  await Promise.all(loops);
  if (cpuUs === 0) cpuUs = cpuUsSince(cpu0); // every loop ended without reaching the window's end
  return { rate: counted === 0 ? 0 : (counted * 1000) / (lastAt - t0), cycles: counted, cpuUsPerOp: counted === 0 ? NaN : cpuUs / counted };
}

export interface Side {
  label: string;
  workers: number;
  cycle: Cycle;
}

interface Compared {
  /** Per side (in the order given): every round's rate. */
  rates: number[][];
  /** Per side: the median rate. */
  medians: number[];
  /** Per side: this process's CPU µs per cycle, every round's. */
  cpu: number[][];
  /** Per side after the first: the first side's rate over that side's, round by round. */
  firstOver: Spread[];
  rounds: number;
  roundMs: number;
}

/**
 * How long each side's round lasts and how many rounds fit the budget: long enough for the slowest
 * side (its rate per worker after the warm-up) to complete cfg.minCyclesPerWorker cycles per worker.
 */
export function planRounds(cfg: BenchConfig, slowestPerWorker: number, sides: number, budgetMs = cfg.budgetMs): { roundMs: number; rounds: number } {
  const roundMs = Math.min(cfg.maxRoundMs, Math.max(cfg.roundMs, (1000 * cfg.minCyclesPerWorker) / slowestPerWorker));
  const rounds = Math.max(cfg.minRounds, Math.min(cfg.maxRounds, Math.floor(budgetMs / (sides * roundMs))));
  return { roundMs, rounds };
}

/**
 * Warms every side up, sizes the rounds so that the slowest side completes cfg.minCyclesPerWorker
 * cycles per worker per round (at least cfg.roundMs), then runs rounds in a rotating order.
 */
export async function compareThroughput(cfg: BenchConfig, sides: Side[], budgetMs = cfg.budgetMs): Promise<Compared> {
  const warm: number[] = [];
  for (const s of sides) warm.push((await throughput(s.workers, cfg.warmupMs, s.cycle)).rate / s.workers);
  const { roundMs, rounds } = planRounds(cfg, Math.min(...warm), sides.length, budgetMs);
  const rates: number[][] = sides.map(() => []);
  const cpu: number[][] = sides.map(() => []);
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < sides.length; i++) {
      const k = (i + r) % sides.length; // rotate: no side always runs first
      const s = sides[k]!;
      const t = await throughput(s.workers, roundMs, s.cycle, cfg.minCyclesPerWorker * s.workers);
      rates[k]!.push(t.rate);
      cpu[k]!.push(t.cpuUsPerOp);
    }
  }
  return {
    rates,
    medians: rates.map(median),
    cpu,
    firstOver: rates.slice(1).map((b) => pairedRatios(rates[0]!, b)),
    rounds,
    roundMs,
  };
}

/**
 * One-shot samples of each side (e.g. a fresh locker's first acquire), interleaved: sample i of every
 * side is taken before sample i + 1 of any. Returns every side's samples in the order given, and
 * every side's CPU µs of this process per sample (the whole sample, set-up included).
 */
export async function interleavedSamples(count: number, sides: (() => Promise<number>)[]): Promise<{ values: number[][]; cpuUs: number[][] }> {
  const values: number[][] = sides.map(() => []);
  const cpuUs: number[][] = sides.map(() => []);
  for (let i = 0; i < count; i++) {
    for (let j = 0; j < sides.length; j++) {
      const k = (j + i) % sides.length;
      const cpu0 = process.cpuUsage();
      values[k]!.push(await sides[k]!());
      cpuUs[k]!.push(cpuUsSince(cpu0));
    }
  }
  return { values, cpuUs };
}

