/**
 * Connections per locker, state by state (DESIGN "Connections"), counted in pg_stat_activity by
 * application_name, next to a plain pg.Pool doing the same: session locks on a checked-out client,
 * leases as statements through the pool, a wait blocked in pg_advisory_lock. Both close what they do
 * not use after the same idle time (pgfence's idleTimeoutMs, the pool's idleTimeoutMillis).
 */

import { openPool } from '../../session/index.js';
import type { BenchContext } from '../context.js';
import { sleep } from '../timing.js';

const KEEPALIVE_MS = 100;
const IDLE_MS = 500;
/** How long a count may take to settle (the figure is what it is then). */
const SETTLE_MS = 20 * KEEPALIVE_MS;

export async function footprint(ctx: BenchContext): Promise<void> {
  const admin = await ctx.client('m11admin');
  const other = ctx.locker('m11other');
  const backends = async (label: string) =>
    (await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [`${ctx.runId}_${label}`])).rows[0]!.n;
  /** The count once it is `target`, or what it is after SETTLE_MS. */
  const settled = async (label: string, target: number) => {
    const end = performance.now() + SETTLE_MS;
    let n = await backends(label);
    while (n !== target && performance.now() < end) {
      await sleep(KEEPALIVE_MS / 4);
      n = await backends(label);
    }
    return n;
  };
  const blocked = async (label: string) => {
    const app = `${ctx.runId}_${label}`;
    const sql = `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`;
    while ((await admin.query(sql, [app])).rowCount === 0) await sleep(5);
  };
  const mine: number[] = [];
  const plain: number[] = [];

  // pgfence.
  const p = 'm11';
  const locker = ctx.locker(p, { keepaliveMs: KEEPALIVE_MS, idleTimeoutMs: IDLE_MS });
  mine.push(await backends(p));
  await (await locker.acquire(ctx.name('fp', 'one'))).release();
  mine.push(await backends(p));
  let busy = await other.acquire(ctx.name('fp', 'busy'));
  const waiting = locker.acquire(ctx.name('fp', 'busy'));
  await blocked(p);
  mine.push(await backends(p));
  await busy.release();
  await (await waiting).release();
  mine.push(await settled(p, 1));
  const lease = await locker.lease(ctx.name('fp', 'lease'), { ttlMs: 30_000 });
  mine.push(await settled(p, 1));
  const lock = await locker.acquire(ctx.name('fp', 'lock'));
  const permit = await locker.semaphore(ctx.name('fp', 'sem'), { permits: 2 }).acquire();
  const election = locker.leader(ctx.name('fp', 'leader'), { ttlMs: 30_000 });
  await election.whenElected();
  mine.push(await settled(p, 1));
  const leading = other.leader(ctx.name('fp', 'other-leader'), { ttlMs: 30_000 });
  await leading.whenElected();
  const candidate = locker.leader(ctx.name('fp', 'other-leader'), { ttlMs: 30_000 });
  while (locker.stats().waiting === 0) await sleep(5);
  mine.push(await settled(p, 1));
  await candidate.resign();
  await leading.resign();
  await election.resign();
  for (const h of [lease, lock, permit]) await h.release();
  mine.push(await settled(p, 0));

  // A plain pg.Pool doing the same.
  const b = 'm11pg';
  const pool = openPool(ctx.urlFor(b), { max: 10, idleTimeoutMillis: IDLE_MS });
  pool.on('error', () => {});
  ctx.onClose(() => pool.end());
  const key = (name: string) => ctx.name('fp-pg', name);
  const lockSql = 'SELECT pg_advisory_lock(hashtextextended($1, 0))';
  const unlockSql = 'SELECT pg_advisory_unlock(hashtextextended($1, 0))';
  const leaseSql = 'SELECT token FROM pgfence.lease_acquire(hashtextextended($1, 0), $1, $2, 30000, NULL) WHERE granted';
  const unleaseSql = 'UPDATE pgfence.leases SET released_at = clock_timestamp() WHERE key = hashtextextended($1, 0)';
  plain.push(await backends(b));
  let c = await pool.connect();
  await c.query(lockSql, [key('one')]);
  await c.query(unlockSql, [key('one')]);
  c.release();
  plain.push(await backends(b));
  busy = await other.acquire(ctx.name('fp', 'busy-pg'));
  c = await pool.connect();
  const blockedLock = c.query('SELECT pg_advisory_lock($1::int8)', [String(busy.key)]);
  await blocked(b);
  plain.push(await backends(b));
  await busy.release();
  await blockedLock;
  await c.query('SELECT pg_advisory_unlock($1::int8)', [String(busy.key)]);
  c.release();
  plain.push(await backends(b));
  await pool.query(leaseSql, [key('lease'), 'bench']);
  plain.push(await backends(b));
  // A lock and a permit (a slot lock) on a checked-out client; the lease and the leader's lease through the pool.
  c = await pool.connect();
  await c.query(lockSql, [key('lock')]);
  await c.query(lockSql, [key('sem:0')]);
  await pool.query(leaseSql, [key('leader'), 'bench']);
  plain.push(await backends(b));
  // A candidate polling for another's lease (the one this pool holds) through the pool.
  await pool.query(leaseSql, [key('leader'), 'candidate']);
  plain.push(await backends(b));
  await c.query(unlockSql, [key('lock')]);
  await c.query(unlockSql, [key('sem:0')]);
  c.release();
  for (const n of ['lease', 'leader']) await pool.query(unleaseSql, [key(n)]);
  plain.push(await settled(b, 0));

  const moments = [
    'after createLocker / new Pool',
    'after one uncontended acquire+release',
    'waiting for a busy lock',
    'after the wait (within two keepalive periods)',
    'holding one lease',
    'holding a lock, a lease, a permit and leadership',
    'a leader candidate waiting behind another leader',
    `after everything was released (idle ${IDLE_MS} ms)`,
  ];
  for (const [i, moment] of moments.entries()) {
    ctx.row({ measurement: `11. connections: ${moment}`, pgfence: String(mine[i]), baseline: String(plain[i]) });
  }
  ctx.note(`11. keepaliveMs ${KEEPALIVE_MS}, idleTimeoutMs ${IDLE_MS} (the pool's idleTimeoutMillis alike); counted in pg_stat_activity`);
}
