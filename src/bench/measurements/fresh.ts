/**
 * Fresh lockers and fresh processes, where nothing is connected or warm yet:
 *  - a fresh locker's first acquire of a held lock: the holder (a bare connection) releases once the
 *    waiter waits in pg_locks; the time from that release to the grant, next to a fresh connection
 *    blocking in pg_advisory_lock on the same schedule;
 *  - the cold-start burst: a new process creates 8 lockers that take 25 turns each on one lock,
 *    next to a new process whose 8 new connections do the same with pg_advisory_lock / unlock;
 *  - 8 processes contending on one lock, one locker each, next to 8 processes with one blocking
 *    connection each: grants/s over a common window.
 */

import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { lockKey } from '../../keys.js';
import type { BurstResult, ContendResult } from '../child.js';
import { SQL, type BenchContext } from '../context.js';
import { atLeast, atMost, cpuColumns, timeRow, type CpuPair } from '../report.js';
import { fmt, pairedRatios, spread } from '../stats.js';
import { interleavedSamples, sleep } from '../timing.js';

const CHILD = fileURLToPath(new URL('../child.js', import.meta.url));
const BURST_WORKERS = 8;
const BURST_GRANTS = 25;
const PROCESSES = 8;
const MIN_HEAD_START_MS = 20;
const MAX_HEAD_START_MS = 2000;
/** Someone waits for the key (an int8 advisory key is classid:objid with objsubid 1). */
const WAITING = {
  name: 'bench_waiting',
  text: `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
           AND ((classid::int8 << 32) | objid::int8) = $1::int8`,
};

export async function fresh(ctx: BenchContext): Promise<void> {
  await firstContended(ctx);
  await coldStartBurst(ctx);
  await processesContending(ctx);
}

async function firstContended(ctx: BenchContext): Promise<void> {
  const holder = await ctx.client('m4h');
  let i = 0;
  /**
   * Holds the key, starts `acquire`, and releases once a backend waits for the key in pg_locks (or
   * after MAX_HEAD_START_MS): both sides are then set up and waiting, whatever their setup cost.
   * Returns the ms from the release to the grant.
   */
  const sample = async (key: string, acquire: () => Promise<() => Promise<unknown>>): Promise<number> => {
    await holder.query({ ...SQL.lock, values: [key] });
    let grantedAt = 0;
    const granted = acquire().then((release) => {
      grantedAt = performance.now();
      return release;
    });
    granted.catch(() => {}); // awaited below; not unhandled meanwhile
    const t0 = performance.now();
    await sleep(MIN_HEAD_START_MS);
    while (performance.now() - t0 < MAX_HEAD_START_MS && (await holder.query({ ...WAITING, values: [key] })).rowCount === 0) await sleep(2);
    const releasedAt = performance.now();
    await holder.query({ ...SQL.unlock, values: [key] });
    await (await granted)();
    return grantedAt - releasedAt;
  };
  const { values, cpuUs } = await interleavedSamples(ctx.cfg.samples, [
    async () => {
      const name = ctx.name('first', i++);
      const locker = ctx.locker(`m4f`);
      try {
        return await sample(lockKey(name).toString(), async () => {
          const h = await locker.acquire(name);
          return () => h.release();
        });
      } finally {
        await locker.close();
      }
    },
    async () => {
      const key = lockKey(ctx.name('first-baseline', i++)).toString();
      const opened: pg.Client[] = [];
      try {
        return await sample(key, async () => {
          const c = await ctx.client('m4fb'); // connecting is part of a fresh connection's acquire
          opened.push(c);
          await c.query({ ...SQL.lock, values: [key] });
          return () => c.query({ ...SQL.unlock, values: [key] });
        });
      } finally {
        await Promise.all(opened.map((c) => c.end()));
      }
    },
  ]);
  const [mine, bare] = values;
  // CPU per sample: the whole sample (the locker or connection created, its acquire, release, close).
  timeRow(ctx, '4. fresh locker, first contended acquire: release -> grant', spread(mine!), spread(bare!), pairedRatios(mine!, bare!), atMost(2), { pgfence: cpuUs[0]!, baseline: cpuUs[1]! });
  ctx.note(`4. first contended acquire, release -> grant (ms): pgfence ${fmt.list(mine!, 2)}; fresh connection ${fmt.list(bare!, 2)}`);
}

async function coldStartBurst(ctx: BenchContext): Promise<void> {
  let i = 0;
  const run = (side: 'pgfence' | 'pg') => async () => {
    const name = ctx.name('burst', i++);
    const r = (await child({ kind: 'burst', side, url: ctx.urlFor(`m4c`), name, key: lockKey(name).toString(), workers: BURST_WORKERS, grants: BURST_GRANTS })) as BurstResult;
    if (r.grants !== BURST_WORKERS * BURST_GRANTS) throw new Error(`burst: ${r.grants} grants`);
    results[side].push(r);
    return (r.grants * 1000) / r.burstMs;
  };
  const results: Record<'pgfence' | 'pg', BurstResult[]> = { pgfence: [], pg: [] };
  const [mine, bare] = (await interleavedSamples(ctx.cfg.samples, [run('pgfence'), run('pg')])).values;
  const ratio = pairedRatios(mine!, bare!);
  // CPU of the child process, per grant (the burst) and per process (loading the modules).
  const cpu = (f: (r: BurstResult) => number): CpuPair => ({ pgfence: results.pgfence.map(f), baseline: results.pg.map(f) });
  ctx.row({
    measurement: `4. cold start: ${BURST_WORKERS} fresh lockers x ${BURST_GRANTS} grants, new process`,
    pgfence: fmt.rate(spread(mine!).median),
    baseline: fmt.rate(spread(bare!).median),
    ratio: fmt.ratio(ratio.median),
    range: fmt.range(ratio),
    target: atLeast(0.75).text,
    met: ratio.median >= 0.75,
    ...cpuColumns(cpu((r) => r.burstCpuUs / r.grants)),
  });
  const ms = (side: 'pgfence' | 'pg', f: (r: BurstResult) => number) => spread(results[side].map(f));
  timeRow(ctx, '4. ... the burst, from creating lockers/connections', ms('pgfence', (r) => r.burstMs), ms('pg', (r) => r.burstMs), pairedRatios(results.pgfence.map((r) => r.burstMs), results.pg.map((r) => r.burstMs)), undefined, cpu((r) => r.burstCpuUs / r.grants));
  timeRow(ctx, '4. ... loading pgfence / pg in the new process', ms('pgfence', (r) => r.importMs), ms('pg', (r) => r.importMs), pairedRatios(results.pgfence.map((r) => r.importMs), results.pg.map((r) => r.importMs)), atMost(1.2), cpu((r) => r.importCpuUs));
  ctx.note(`4. cold-start burst (grants/s per sample): pgfence ${fmt.list(mine!)}; bare pg ${fmt.list(bare!)}`);
}

async function processesContending(ctx: BenchContext): Promise<void> {
  const warmupMs = ctx.cfg.quick ? 200 : 500;
  const measureMs = ctx.cfg.quick ? 500 : 2000;
  const rounds = ctx.cfg.quick ? 1 : 3;
  const rates: Record<'pgfence' | 'pg', number[]> = { pgfence: [], pg: [] };
  const cpu: Record<'pgfence' | 'pg', number[]> = { pgfence: [], pg: [] }; // per grant, the processes' CPU summed
  for (let r = 0; r < rounds; r++) {
    for (const side of r % 2 === 0 ? (['pgfence', 'pg'] as const) : (['pg', 'pgfence'] as const)) {
      const name = ctx.name('processes', side, r);
      const results = await contendingProcesses(PROCESSES, { kind: 'contend', side, url: ctx.urlFor(`m4p_${side}`), name, key: lockKey(name).toString(), warmupMs, measureMs });
      const grants = results.reduce((a, x) => a + x.grants, 0);
      rates[side].push((grants * 1000) / measureMs);
      cpu[side].push(results.reduce((a, x) => a + x.cpuUs, 0) / Math.max(1, grants));
    }
  }
  const ratio = pairedRatios(rates.pgfence, rates.pg);
  ctx.row({
    measurement: `4. ${PROCESSES} processes contending, 1 locker each: grants/s`,
    pgfence: fmt.rate(spread(rates.pgfence).median),
    baseline: fmt.rate(spread(rates.pg).median),
    ratio: fmt.ratio(ratio.median),
    range: fmt.range(ratio),
    target: atLeast(0.85).text,
    met: ratio.median >= 0.85,
    ...cpuColumns({ pgfence: cpu.pgfence, baseline: cpu.pg }),
  });
  ctx.note(`4. ${PROCESSES} processes (grants/s per round, ${measureMs} ms windows): pgfence ${fmt.list(rates.pgfence)}; blocking connections ${fmt.list(rates.pg)}`);
}

/** Starts `n` contending processes, starts them together once all are connected, returns their results. */
async function contendingProcesses(n: number, task: object): Promise<ContendResult[]> {
  const procs = Array.from({ length: n }, () => start(task));
  await Promise.all(procs.map((p) => p.ready));
  for (const p of procs) p.proc.stdin!.write('go\n');
  return (await Promise.all(procs.map((p) => p.result))) as ContendResult[];
}

function child(task: object): Promise<unknown> {
  const p = start(task);
  p.proc.stdin!.end();
  return p.result;
}

function start(task: object) {
  const proc = spawn(process.execPath, [CHILD, JSON.stringify(task)], { stdio: ['pipe', 'pipe', 'pipe'] });
  proc.stdin!.on('error', () => {}); // a child that died early: its result says why
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const lines = createInterface({ input: proc.stdout! });
  let onReady!: () => void;
  const ready = new Promise<void>((r) => (onReady = r));
  const result = new Promise<unknown>((resolve, reject) => {
    let last = '';
    lines.on('line', (line) => {
      if (line === 'ready') onReady();
      else last = line;
    });
    proc.on('close', (code) => {
      onReady();
      if (code === 0) resolve(JSON.parse(last));
      else reject(new Error(`bench child exited with ${code}: ${stderr.trim().slice(-500)}`));
    });
  });
  result.catch(() => {}); // the caller awaits it; not unhandled meanwhile
  return { proc, ready, result };
}
