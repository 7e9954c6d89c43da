/**
 * 64 callers on 64 distinct keys, each looping acquire+release, on one locker (maxSessions 2), next to
 * clients serving the same 64 callers: postgres.js on one connection (it pipelines: every caller's
 * statements go out back to back without waiting), one pinned bare-pg client (strictly one statement
 * at a time), and ioredis auto-pipelined against Redis (SET NX PX + a compare-and-delete script).
 * postgres.js and ioredis are dev dependencies: when they are not installed, their rows say so.
 */

import { randomUUID } from 'node:crypto';
import { lockKey } from '../../keys.js';
import { SQL, type BenchContext } from '../context.js';
import { atLeast, rateRow } from '../report.js';
import { fmt } from '../stats.js';
import { compareThroughput, type Side } from '../timing.js';
import { loadPostgresJs } from '../peers.js';

const CALLERS = 64;
const RELEASE_SCRIPT = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

export async function callers(ctx: BenchContext): Promise<void> {
  const locker = ctx.locker('m2', { maxSessions: 2 });
  const names = Array.from({ length: CALLERS }, (_, w) => ctx.name('callers', w));
  const keys = Array.from({ length: CALLERS }, (_, w) => lockKey(ctx.name('callers-baseline', w)).toString());
  await Promise.all(names.map(async (n) => (await locker.acquire(n)).release()));
  const sides: Side[] = [{ label: 'pgfence', workers: CALLERS, cycle: async (w) => (await locker.acquire(names[w]!)).release() }];

  const pipelined = await postgresJsSide(ctx, keys);
  if (typeof pipelined !== 'string') sides.push(pipelined);

  const client = await ctx.client('m2b');
  let tail: Promise<unknown> = Promise.resolve();
  const serial = <T>(f: () => Promise<T>): Promise<T> => {
    const result = tail.then(f); // pg's own queue is deprecated: callers take turns explicitly
    tail = result.catch(() => {}); // the next caller's turn comes either way; `result` reports the failure
    return result;
  };
  sides.push({
    label: 'one pg client',
    workers: CALLERS,
    cycle: async (w) => {
      const { rows } = await serial(() => client.query<{ ok: boolean }>({ ...SQL.tryLock, values: [keys[w]] }));
      if (!rows[0]!.ok) throw new Error('bare pg: a distinct-key try_lock failed');
      await serial(() => client.query({ ...SQL.unlock, values: [keys[w]] }));
    },
  });

  const redis = await redisSide(ctx);
  if (typeof redis !== 'string') sides.push(redis);

  const r = await compareThroughput(ctx.cfg, sides);
  const at = (label: string) => sides.findIndex((s) => s.label === label);
  const label = `2. ${CALLERS} callers, ${CALLERS} keys, maxSessions 2`;
  const versus = (side: string, text: string, target?: ReturnType<typeof atLeast>) => {
    const i = at(side);
    rateRow(ctx, `${label}, vs ${text}`, r.medians[0]!, r.medians[i]!, r.firstOver[i - 1]!, target, { pgfence: r.cpu[0]!, baseline: r.cpu[i]! });
    ctx.note(`2. ${side} (cycles/s per round): ${fmt.list(r.rates[i]!)}`);
  };
  if (typeof pipelined === 'string') ctx.row({ measurement: `${label}, vs postgres.js pipelined`, baseline: pipelined, target: '>= 5.00x', met: false });
  else versus('postgres.js', 'postgres.js pipelined on 1 connection', atLeast(5));
  versus('one pg client', 'one pg client, serial', atLeast(3));
  if (typeof redis === 'string') ctx.row({ measurement: `${label}, vs ioredis auto-pipelined`, baseline: redis });
  else versus('ioredis', 'ioredis auto-pipelined (Redis)', atLeast(1.2));
  ctx.note(`2. pgfence (cycles/s per round): ${fmt.list(r.rates[0]!)}`);
  ctx.note(`2. ${r.rounds} rounds of >= ${Math.round(r.roundMs)} ms and >= ${ctx.cfg.minCyclesPerWorker * CALLERS} cycles per side, order rotating`);
}

/** postgres.js with one connection, or why not. */
async function postgresJsSide(ctx: BenchContext, keys: string[]): Promise<Side | string> {
  let postgres: Awaited<ReturnType<typeof loadPostgresJs>>;
  try {
    postgres = await loadPostgresJs();
  } catch {
    return 'not installed (npm i -D postgres)';
  }
  const sql = postgres(ctx.urlFor('m2p'), { max: 1, prepare: true, onnotice: () => {} });
  ctx.onClose(() => sql.end({ timeout: 1 }));
  await sql`SELECT 1`;
  return {
    label: 'postgres.js',
    workers: CALLERS,
    cycle: async (w) => {
      const [row] = await sql`SELECT pg_try_advisory_lock(${keys[w]!}::int8) AS ok`;
      if (!row!.ok) throw new Error('postgres.js: a distinct-key try_lock failed');
      await sql`SELECT pg_advisory_unlock(${keys[w]!}::int8) AS ok`;
    },
  };
}

/** ioredis auto-pipelined against REDIS_URL (default redis://127.0.0.1:6379), or why not. */
async function redisSide(ctx: BenchContext): Promise<Side | string> {
  let Redis: typeof import('ioredis').Redis;
  try {
    Redis = (await import('ioredis')).Redis;
  } catch {
    return 'not installed (npm i -D ioredis)';
  }
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const redis = new Redis(url, { enableAutoPipelining: true, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2000 });
  redis.on('error', () => {});
  ctx.onClose(async () => redis.disconnect());
  try {
    await redis.connect();
  } catch {
    return `no Redis at ${url} (REDIS_URL)`;
  }
  const sha = (await redis.script('LOAD', RELEASE_SCRIPT)) as string;
  const token = randomUUID();
  const keys = Array.from({ length: CALLERS }, (_, w) => ctx.name('redis', w));
  return {
    label: 'ioredis',
    workers: CALLERS,
    cycle: async (w) => {
      if ((await redis.set(keys[w]!, token, 'PX', 10_000, 'NX')) !== 'OK') throw new Error('ioredis: a distinct-key SET NX failed');
      await redis.evalsha(sha, 1, keys[w]!, token);
    },
  };
}
