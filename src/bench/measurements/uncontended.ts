/**
 * Uncontended acquire+release on one locker, next to one pinned bare-pg client doing
 * pg_try_advisory_lock + pg_advisory_unlock: on one name again and again, and on a new name each time
 * (a name pgfence has not seen yet: hashing, a fresh lock entry, the name registry's background write).
 */

import { lockKey } from '../../keys.js';
import { bareCycle, type BenchContext } from '../context.js';
import { atLeast, rateRow } from '../report.js';
import { fmt } from '../stats.js';
import { compareThroughput } from '../timing.js';

export async function uncontended(ctx: BenchContext): Promise<void> {
  const locker = ctx.locker('m1');
  const client = await ctx.client('m1b');
  const name = ctx.name('uncontended');
  const baseKey = lockKey(ctx.name('uncontended-baseline')).toString();
  await (await locker.acquire(name)).release(); // the session is open before any clock starts

  const same = await compareThroughput(ctx.cfg, [
    { label: 'pgfence', workers: 1, cycle: async () => (await locker.acquire(name)).release() },
    { label: 'bare pg', workers: 1, cycle: () => bareCycle(client, baseKey) },
  ]);
  rateRow(ctx, '1. uncontended acquire+release, same name', same.medians[0]!, same.medians[1]!, same.firstOver[0]!, atLeast(0.95), { pgfence: same.cpu[0]!, baseline: same.cpu[1]! });
  ctx.note(`1. same name (cycles/s per round): pgfence ${fmt.list(same.rates[0]!)}; bare pg ${fmt.list(same.rates[1]!)}`);

  let n = 0;
  let k = BigInt(lockKey(ctx.name('fresh-baseline')));
  const fresh = await compareThroughput(ctx.cfg, [
    { label: 'pgfence', workers: 1, cycle: async () => (await locker.acquire(ctx.name('fresh', n++))).release() },
    { label: 'bare pg', workers: 1, cycle: () => bareCycle(client, (k = BigInt.asIntN(64, k + 1n)).toString()) },
  ]);
  rateRow(ctx, '1. ... a new name each cycle', fresh.medians[0]!, fresh.medians[1]!, fresh.firstOver[0]!, atLeast(0.95), { pgfence: fresh.cpu[0]!, baseline: fresh.cpu[1]! });
  ctx.note(`1. new names (cycles/s per round): pgfence ${fmt.list(fresh.rates[0]!)}; bare pg ${fmt.list(fresh.rates[1]!)}`);
  ctx.note(`1. ${same.rounds} rounds of ${Math.round(same.roundMs)} ms per side (same name), ${fresh.rounds} of ${Math.round(fresh.roundMs)} ms (new names)`);
}
