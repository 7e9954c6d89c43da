/**
 * xactLock on a free key inside the caller's transaction (BEGIN; xactLock; COMMIT), next to the same
 * transaction with a bare pg_advisory_xact_lock, on one client each.
 */

import { xactLock } from '../../advisory/index.js';
import { lockKey } from '../../keys.js';
import { SQL, type BenchContext } from '../context.js';
import { atLeast, rateRow } from '../report.js';
import { fmt } from '../stats.js';
import { compareThroughput } from '../timing.js';

export async function xact(ctx: BenchContext): Promise<void> {
  const mine = await ctx.client('m6');
  const bare = await ctx.client('m6b');
  const name = ctx.name('xact');
  const key = lockKey(ctx.name('xact-baseline')).toString();
  const r = await compareThroughput(ctx.cfg, [
    {
      label: 'xactLock',
      workers: 1,
      cycle: async () => {
        await mine.query('BEGIN');
        await xactLock(mine, name);
        await mine.query('COMMIT');
      },
    },
    {
      label: 'bare',
      workers: 1,
      cycle: async () => {
        await bare.query('BEGIN');
        await bare.query({ ...SQL.xactLock, values: [key] });
        await bare.query('COMMIT');
      },
    },
  ]);
  rateRow(ctx, '6. xactLock on a free key (BEGIN, lock, COMMIT)', r.medians[0]!, r.medians[1]!, r.firstOver[0]!, atLeast(0.95), { pgfence: r.cpu[0]!, baseline: r.cpu[1]! });
  ctx.note(`6. transactions/s per round: xactLock ${fmt.list(r.rates[0]!)}; bare pg_advisory_xact_lock ${fmt.list(r.rates[1]!)}`);
}
