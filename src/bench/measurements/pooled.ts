/**
 * Through a transaction pooler (PgBouncer in transaction mode, Supavisor 6543, ...), where waits poll
 * instead of listening: a lease's hand-off latency to a waiter of another locker, lease cycles/s, and
 * a fleet of lockers doing lease cycles on a few names — each next to the same work straight to
 * PostgreSQL. Needs PGFENCE_BENCH_POOLER_URL: a transaction pooler's URL to the bench's database.
 */

import { withApplicationName } from '../../session/index.js';
import type { BenchContext } from '../context.js';
import { rateRow, timeRow } from '../report.js';
import { fmt, pairedRatios, percentile, spread } from '../stats.js';
import { compareThroughput } from '../timing.js';

export async function pooled(ctx: BenchContext): Promise<void> {
  const poolerUrl = process.env.PGFENCE_BENCH_POOLER_URL;
  if (!poolerUrl) {
    ctx.note('12. skipped: set PGFENCE_BENCH_POOLER_URL to a transaction pooler in front of the bench database');
    return;
  }
  const through = (label: string) => withApplicationName(poolerUrl, `${ctx.runId}_${label}`);

  // Hand-off: a holder releases while a waiter of another locker waits (polling through the pooler; LISTEN direct).
  const handoff = async (url: (label: string) => string, label: string): Promise<number[]> => {
    const [holder, waiter] = [ctx.locker(`${label}h`, {}, url(`${label}h`)), ctx.locker(`${label}w`, {}, url(`${label}w`))];
    const name = ctx.name('pooled-handoff', label);
    const samples: number[] = [];
    for (let i = 0; i < (ctx.cfg.quick ? 10 : 40); i++) {
      const held = await holder.lease(name, { ttlMs: 30_000, renew: false });
      const waiting = waiter.lease(name, { ttlMs: 30_000, renew: false });
      // Let the waiter find the lease busy and settle into its wait (its poll backs off as in production).
      await new Promise((r) => setTimeout(r, 20 + (i % 5) * 60));
      const released = performance.now();
      await held.release();
      const next = await waiting;
      samples.push(performance.now() - released);
      await next.release();
    }
    return samples;
  };
  const viaPooler = await handoff(through, 'm12p');
  const direct = await handoff((l) => ctx.urlFor(l), 'm12d');
  timeRow(ctx, '12. lease hand-off to another locker, p50: pooler (poll) vs direct (LISTEN)', spread([percentile(viaPooler, 50)]), spread([percentile(direct, 50)]), spread([percentile(viaPooler, 50) / percentile(direct, 50)]));
  ctx.note(`12. lease hand-off ms through the pooler: p50 ${fmt.ms(percentile(viaPooler, 50))}, p95 ${fmt.ms(percentile(viaPooler, 95))}, max ${fmt.ms(Math.max(...viaPooler))}; direct p50 ${fmt.ms(percentile(direct, 50))}, p95 ${fmt.ms(percentile(direct, 95))}`);

  // Uncontended lease cycles, one worker: through the pooler vs direct.
  const [p, d] = [ctx.locker('m12c', {}, through('m12c')), ctx.locker('m12e')];
  const r = await compareThroughput(ctx.cfg, [
    { label: 'pooler', workers: 1, cycle: async () => (await p.lease(ctx.name('pooled-cycle'), { ttlMs: 10_000, renew: false })).release() },
    { label: 'direct', workers: 1, cycle: async () => (await d.lease(ctx.name('direct-cycle'), { ttlMs: 10_000, renew: false })).release() },
  ]);
  rateRow(ctx, '12. lease acquire+release: through the pooler vs direct', r.medians[0]!, r.medians[1]!, pairedRatios(r.rates[0]!, r.rates[1]!));

  // A fleet: many lockers, lease cycles on 20 names, through the pooler (the fleet test's shape, one process).
  const lockers = Array.from({ length: ctx.cfg.quick ? 30 : 100 }, (_, i) => ctx.locker(`m12f${i}`, {}, through(`m12f${i}`)));
  const rounds = ctx.cfg.quick ? 2 : 5;
  const started = performance.now();
  let cycles = 0;
  await Promise.all(
    lockers.map(async (locker, i) => {
      for (let k = 0; k < rounds; k++) {
        await (await locker.lease(ctx.name('pooled-fleet', (i + k) % 20), { ttlMs: 10_000, renew: false })).release();
        cycles++;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  ctx.row({ measurement: `12. fleet: ${lockers.length} lockers, lease cycles on 20 names through the pooler`, pgfence: fmt.rate(cycles / seconds) });
}
