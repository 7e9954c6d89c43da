/**
 * How soon another connection sees a just-granted lock's name in pgfence's registry (what inspect()
 * and `pgfence status` of another process read). The registry writes in the background, batched,
 * never on the acquire's path; DESIGN: visible within about 50 ms. The other side polls with a bare
 * pinned client.
 */

import { performance } from 'node:perf_hooks';
import { lockKey } from '../../keys.js';
import type { BenchContext } from '../context.js';
import { fmt, percentile } from '../stats.js';
import { sleep } from '../timing.js';

const SEEN = { name: 'bench_name_seen', text: 'SELECT 1 FROM pgfence.lock_names WHERE key = $1::int8' };

export async function names(ctx: BenchContext): Promise<void> {
  const locker = ctx.locker('m8');
  const client = await ctx.client('m8b');
  await (await locker.acquire(ctx.name('names', 'warm-up'))).release();
  const samples: number[] = [];
  for (let i = 0; i < (ctx.cfg.quick ? 5 : 40); i++) {
    const name = ctx.name('names', i);
    const key = lockKey(name).toString();
    const h = await locker.acquire(name);
    const grantedAt = performance.now();
    while ((await client.query({ ...SEEN, values: [key] })).rowCount === 0) {
      if (performance.now() - grantedAt > 5000) throw new Error(`name ${name} not visible after 5 s`);
    }
    samples.push(performance.now() - grantedAt);
    await h.release();
    await sleep(20); // each name starts its own batch
  }
  const p50 = percentile(samples, 50);
  ctx.row({ measurement: '8. name visible to others after grant, p50', pgfence: fmt.ms(p50), target: '<= 50 ms', met: p50 <= 50 });
  ctx.row({ measurement: '8. ... p95, max', pgfence: `${fmt.ms(percentile(samples, 95))}, ${fmt.ms(Math.max(...samples))}` });
  ctx.note(`8. grant -> name visible to another connection (ms): ${fmt.list(samples, 1)}`);
}
