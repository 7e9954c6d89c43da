/**
 * 10,000 locks held at once by one locker (on its maxSessions connections), or as many as the
 * server-wide lock-table guard lets one locker take on this server (guardedCount):
 *  - acquireAll of 10,000 names, next to the floor: one statement taking the same 10,000 keys
 *    (SELECT pg_advisory_lock(k) FROM unnest($1)) on a bare client;
 *  - 10,000 acquire() calls, 2,000 at a time, checked from another connection in pg_locks;
 *  - what held locks cost everyone else: an uncontended acquire+release cycle on the same locker
 *    while 0, 1,000 and 10,000 are held (rounds rotate the three).
 * --quick takes a tenth of each (a smoke run: the targets are for 10,000).
 */

import { performance } from 'node:perf_hooks';
import type { LockHandle } from '../../core/index.js';
import { SERVER_LOCK_TABLE_SHARE } from '../../advisory/index.js';
import { lockKey } from '../../keys.js';
import { lockTableSizeSql } from '../../session/index.js';
import type { BenchContext } from '../context.js';
import { atMost, timeRow } from '../report.js';
import { fmt, pairedRatios, spread } from '../stats.js';
import { cpuUs, cpuUsSince, throughput } from '../timing.js';

const CHUNK = 2000;
const MAX_SESSIONS = 2; // the default

export async function many(ctx: BenchContext): Promise<void> {
  const observer = await ctx.client('m7_observer');
  const N = Math.min(ctx.cfg.quick ? 1000 : 10_000, await guardedCount(observer));
  const appName = `${ctx.runId}_m7`;
  const locker = ctx.locker('m7', { maxHeldLocks: N + 1000 /* past the default budget, a share of the lock table */ });
  const floorClient = await ctx.client('m7b');
  const names = Array.from({ length: N }, (_, i) => ctx.name('many', i));
  const keys = names.map((n) => lockKey(n).toString());
  await (await locker.acquire(ctx.name('many', 'warm'))).release(); // connected before the clock starts

  // acquireAll vs one unnest statement; each sample releases before the next. Sides alternate which
  // goes first; a slow acquireAll (seconds) cuts the samples short rather than the whole run's time.
  const sampleCount = Math.min(ctx.cfg.samples, ctx.cfg.quick ? 2 : 7);
  const releases: number[][] = [[], []];
  // This process's CPU (µs) per side: taking the locks, releasing them.
  const cpu = { take: [[], []] as number[][], release: [[], []] as number[][] };
  const sides = [
    async () => {
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      const h = await locker.acquireAll(names);
      const ms = performance.now() - t0;
      const cpu1 = process.cpuUsage();
      const t1 = performance.now();
      await h.release();
      releases[0]!.push(performance.now() - t1);
      cpu.release[0]!.push(cpuUsSince(cpu1));
      cpu.take[0]!.push(cpuUs(cpu1) - cpuUs(cpu0));
      return ms;
    },
    async () => {
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await floorClient.query({ name: 'bench_lock_many', text: 'SELECT count(pg_advisory_lock(k)) FROM unnest($1::int8[]) AS k', values: [keys] });
      const ms = performance.now() - t0;
      const cpu1 = process.cpuUsage();
      const t1 = performance.now();
      await floorClient.query('SELECT pg_advisory_unlock_all()');
      releases[1]!.push(performance.now() - t1);
      cpu.release[1]!.push(cpuUsSince(cpu1));
      cpu.take[1]!.push(cpuUs(cpu1) - cpuUs(cpu0));
      return ms;
    },
  ];
  const all: number[] = [];
  const floor: number[] = [];
  const started = performance.now();
  for (let i = 0; i < sampleCount && (i < 2 || performance.now() - started < 10_000); i++) {
    if (i % 2 === 0) {
      all.push(await sides[0]!());
      floor.push(await sides[1]!());
    } else {
      floor.push(await sides[1]!());
      all.push(await sides[0]!());
    }
  }
  timeRow(ctx, `7. acquireAll of ${count(N)} names vs one unnest statement`, spread(all), spread(floor), pairedRatios(all, floor), atMost(3), { pgfence: cpu.take[0]!, baseline: cpu.take[1]! });
  timeRow(ctx, '7. ... releasing them (pg_advisory_unlock_all)', spread(releases[0]!), spread(releases[1]!), pairedRatios(releases[0]!, releases[1]!), atMost(3), { pgfence: cpu.release[0]!, baseline: cpu.release[1]! });
  ctx.note(`7. acquireAll (ms): ${fmt.list(all, 1)}; unnest floor ${fmt.list(floor, 1)}`);

  await heldByAcquire(ctx, locker, observer, names, appName);
  await cycleWhileHeld(ctx, locker, names);
}

async function heldByAcquire(ctx: BenchContext, locker: ReturnType<BenchContext['locker']>, observer: Awaited<ReturnType<BenchContext['client']>>, names: string[], appName: string): Promise<void> {
  const N = names.length;
  const expected = new Set(names.map((n) => lockKey(n).toString()));
  let handles: LockHandle[] = [];
  try {
    const t0 = performance.now();
    for (let i = 0; i < N; i += CHUNK) handles.push(...(await Promise.all(names.slice(i, i + CHUNK).map((n) => locker.acquire(n)))));
    const acquireMs = performance.now() - t0;
    const { rows: held } = await observer.query<{ pid: number; key: string }>(
      `SELECT l.pid, ((l.classid::int8 << 32) | l.objid::int8)::text AS key
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted`,
      [appName],
    );
    const { rows: conns } = await observer.query<{ pid: number; query: string }>('SELECT pid, query FROM pg_stat_activity WHERE application_name = $1', [appName]);
    const heldKeys = new Set(held.map((r) => r.key));
    const allOurs = [...heldKeys].every((k) => expected.has(k)) && heldKeys.size === held.length;
    const holding = new Set(held.map((r) => r.pid));
    const others = conns.filter((c) => !holding.has(c.pid));
    const t1 = performance.now();
    await Promise.all(handles.map((h) => h.release()));
    const releaseMs = performance.now() - t1;
    handles = [];
    const { rows: after } = await observer.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted`,
      [appName],
    );
    const l = `7. ${count(N)} acquire() calls, ${count(Math.min(N, CHUNK))} at a time:`;
    ctx.row({ measurement: `${l} granted in pg_locks`, pgfence: `${held.length}${allOurs ? '' : ' (unexpected keys!)'}`, target: `= ${N}`, met: held.length === N && allOurs });
    ctx.row({ measurement: `${l} connections holding them`, pgfence: String(holding.size), target: `<= ${MAX_SESSIONS}`, met: holding.size <= MAX_SESSIONS });
    ctx.row({ measurement: `${l} other locker connections`, pgfence: String(others.length), target: '(listener etc.)' });
    ctx.row({ measurement: `${l} acquire all, release all`, pgfence: `${fmt.ms(acquireMs)}, ${fmt.ms(releaseMs)}` });
    ctx.row({ measurement: `${l} left in pg_locks after release`, pgfence: String(after[0]!.n), target: '= 0', met: after[0]!.n === 0 });
  } finally {
    await Promise.all(handles.map((h) => h.release().catch(() => false))); // tidying up after the figures (release never rejects)
  }
}

async function cycleWhileHeld(ctx: BenchContext, locker: ReturnType<BenchContext['locker']>, names: string[]): Promise<void> {
  const name = ctx.name('many', 'cycle');
  const cycle = async () => (await locker.acquire(name)).release();
  const N = names.length;
  const levels = [0, N / 10, N] as const;
  // Held with acquire() calls, 2,000 at a time: the levels change every round, and this is the fast way in.
  const held: LockHandle[] = [];
  const hold = async (level: number) => {
    while (held.length > level) await Promise.all(held.splice(level, CHUNK).map((h) => h.release()));
    while (held.length < level) held.push(...(await Promise.all(names.slice(held.length, Math.min(level, held.length + CHUNK)).map((n) => locker.acquire(n)))));
  };
  const rates: number[][] = levels.map(() => []);
  const cpu: number[][] = levels.map(() => []);
  const rounds = ctx.cfg.quick ? 2 : 7;
  const roundMs = ctx.cfg.quick ? 200 : 700;
  try {
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < levels.length; i++) {
        const k = (i + r) % levels.length;
        await hold(levels[k]!);
        await throughput(1, ctx.cfg.warmupMs / 5, cycle);
        const t = await throughput(1, roundMs, cycle);
        rates[k]!.push(t.rate);
        cpu[k]!.push(t.cpuUsPerOp);
      }
    }
  } finally {
    await hold(0).catch(() => {}); // tidying up: the figures are taken
  }
  const times = rates.map((rs) => rs.map((x) => 1000 / x));
  timeRow(ctx, `7. acquire+release while ${count(N)} held (by acquire()) vs none`, spread(times[2]!), spread(times[0]!), pairedRatios(times[2]!, times[0]!), atMost(1.5), { pgfence: cpu[2]!, baseline: cpu[0]! });
  timeRow(ctx, `7. ... while ${count(N / 10)} held vs none`, spread(times[1]!), spread(times[0]!), pairedRatios(times[1]!, times[0]!), undefined, { pgfence: cpu[1]!, baseline: cpu[0]! });
  ctx.note(`7. cycle (ms) per round at 0 / ${count(N / 10)} / ${count(N)} held: ${times.map((t) => fmt.list(t, 3)).join(' / ')}`);
}

const count = (n: number) => n.toLocaleString('en-US');

/**
 * The most locks (in thousands) one locker takes here without the server-wide guard refusing them: its
 * split of the headroom under the guard's share among itself and the backends holding advisory locks now
 * (the guard's own rule), less a margin. A default server's table (64 x 100 = 6,400) keeps 10,000 out of
 * reach; the row's label says the count it measured.
 */
async function guardedCount(observer: Awaited<ReturnType<BenchContext['client']>>): Promise<number> {
  const { rows } = await observer.query<{ size: number; locks: number; holders: number }>(
    `SELECT ${lockTableSizeSql}::int AS size, count(*)::int AS locks, count(DISTINCT pid)::int AS holders
       FROM pg_locks WHERE locktype = 'advisory'`,
  );
  const { size, locks, holders } = rows[0]!;
  const split = (size * SERVER_LOCK_TABLE_SHARE - locks) / (holders + 1);
  return Math.max(1000, Math.floor((split * 0.85) / 1000) * 1000);
}
