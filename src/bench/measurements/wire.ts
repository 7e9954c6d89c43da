/**
 * What each operation puts on the wire, counted by a TCP proxy between the clients and the server
 * (wire-proxy.ts): round trips (a flight of client messages after the server has spoken), protocol
 * messages, and Parse messages (a statement the server parses anew) per operation, next to the bare
 * client doing the same work. Background traffic of pgfence's own (keepalive, the name registry, a
 * LISTEN connection) counts too, spread over the operations.
 */

import type pg from 'pg';
import { xactLock } from '../../advisory/index.js';
import { lockKey } from '../../keys.js';
import { createLocker } from '../../locker.js';
import { bareCycle, SQL, type BenchContext } from '../context.js';
import { fmt } from '../stats.js';
import { WireProxy, type WireCounts } from '../wire-proxy.js';
import { loadPostgresJs } from '../peers.js';

const CALLERS = 64;

interface Op {
  label: string;
  /** Prepares both sides (connections through the proxy); counting starts after `warm` cycles. */
  setup(url: string): Promise<{ pgfence: (i: number) => Promise<unknown>; baseline: (i: number) => Promise<unknown>; baselineLabel: string }>;
  cycles?: number;
  /** Operations per cycle (a cycle of 64 callers is 64 operations). */
  perCycle?: number;
}

export async function wire(ctx: BenchContext): Promise<void> {
  const opened = await WireProxy.open(ctx.url);
  if (!opened) {
    ctx.row({ measurement: '9. round trips per operation', pgfence: 'skipped: the database is no single-host URL' });
    return;
  }
  const { proxy, url } = opened;
  ctx.onClose(() => proxy.close());
  const locker = (label: string, opts = {}) => ctx.locker(label, opts, withName(url, `${ctx.runId}_${label}`));
  const client = (label: string) => ctx.client(label, withName(url, `${ctx.runId}_${label}`));
  const n = ctx.cfg.quick ? 20 : 200;

  const ops: Op[] = [
    {
      label: 'uncontended acquire+release',
      async setup() {
        const l = locker('m9a');
        const c = await client('m9ab');
        const key = lockKey(ctx.name('wire-baseline')).toString();
        return { pgfence: async () => (await l.acquire(ctx.name('wire'))).release(), baseline: () => bareCycle(c, key), baselineLabel: 'try_lock + unlock' };
      },
    },
    {
      label: '... a new name each cycle',
      async setup() {
        const l = locker('m9b');
        const c = await client('m9bb');
        const base = lockKey(ctx.name('wire-fresh-baseline'));
        return {
          pgfence: async (i) => (await l.acquire(ctx.name('wire-fresh', i))).release(),
          baseline: (i) => bareCycle(c, BigInt.asIntN(64, base + BigInt(i)).toString()),
          baselineLabel: 'try_lock + unlock',
        };
      },
    },
    {
      label: 'fenced acquire+release',
      async setup() {
        const l = locker('m9c');
        const c = await commitClient(await client('m9cb'));
        return { pgfence: async () => (await l.acquire(ctx.name('wire-fenced'), { fencing: true })).release(), baseline: c, baselineLabel: 'one durable commit' };
      },
    },
    {
      label: 'lease acquire+release',
      async setup() {
        const l = locker('m9d');
        const c = await commitClient(await client('m9db'));
        return { pgfence: async () => (await l.lease(ctx.name('wire-lease'), { ttlMs: 10_000, renew: false })).release(), baseline: c, baselineLabel: 'one durable commit' };
      },
    },
    {
      label: 'xactLock transaction',
      async setup() {
        const mine = await client('m9e');
        const bare = await client('m9eb');
        const key = lockKey(ctx.name('wire-xact-baseline')).toString();
        const tx = async (c: pg.Client, lock: () => Promise<unknown>) => {
          await c.query('BEGIN');
          await lock();
          await c.query('COMMIT');
        };
        return {
          pgfence: () => tx(mine, () => xactLock(mine, ctx.name('wire-xact'))),
          baseline: () => tx(bare, () => bare.query({ ...SQL.xactLock, values: [key] })),
          baselineLabel: 'BEGIN, pg_advisory_xact_lock, COMMIT',
        };
      },
    },
    {
      label: 'contended grant, 2 lockers taking turns',
      cycles: n / 2,
      async setup() {
        const ls = [locker('m9f0', { maxSessions: 1 }), locker('m9f1', { maxSessions: 1 })];
        const cs = [await client('m9fb0'), await client('m9fb1')];
        const name = ctx.name('wire-contended');
        const key = lockKey(ctx.name('wire-contended-baseline')).toString();
        await Promise.all(ls.map(async (l) => (await l.acquire(ctx.name('wire-contended-warm'))).release()));
        // One cycle = both take a turn: the two loops overlap, so every grant but the first is contended.
        return {
          pgfence: () => Promise.all(ls.map(async (l) => (await l.acquire(name)).release())),
          baseline: () =>
            Promise.all(
              cs.map(async (c) => {
                await c.query({ ...SQL.lock, values: [key] });
                await c.query({ ...SQL.unlock, values: [key] });
              }),
            ),
          baselineLabel: '2 blocking connections',
        };
      },
    },
    {
      label: `${CALLERS} callers on distinct keys, per caller`,
      cycles: n / 4,
      perCycle: CALLERS,
      async setup(proxied) {
        const l = locker('m9g', { maxSessions: 2 });
        const keys = Array.from({ length: CALLERS }, (_, w) => lockKey(ctx.name('wire-callers-baseline', w)).toString());
        const sql = await postgresJs(proxied, ctx);
        const all = (f: (w: number) => Promise<unknown>) => Promise.all(Array.from({ length: CALLERS }, (_, w) => f(w)));
        return {
          pgfence: () => all(async (w) => (await l.acquire(ctx.name('wire-callers', w))).release()),
          baseline: sql
            ? () => all(async (w) => {
                await sql`SELECT pg_try_advisory_lock(${keys[w]!}::int8) AS ok`;
                await sql`SELECT pg_advisory_unlock(${keys[w]!}::int8) AS ok`;
              })
            : async () => {},
          baselineLabel: sql ? 'postgres.js pipelined' : 'postgres.js not installed',
        };
      },
    },
    {
      label: 'fresh locker: connect, acquire+release, close',
      cycles: Math.max(5, n / 20),
      async setup() {
        const key = lockKey(ctx.name('wire-first-baseline')).toString();
        return {
          pgfence: async (i) => {
            const l = createLocker({ connectionString: withName(url, `${ctx.runId}_m9h`) });
            try {
              await (await l.acquire(ctx.name('wire-first', i))).release();
            } finally {
              await l.close();
            }
          },
          baseline: async () => {
            const c = await client('m9hb');
            await bareCycle(c, key);
            await c.end();
          },
          baselineLabel: 'new connection: try_lock + unlock',
        };
      },
    },
  ];

  for (const op of ops) {
    const { pgfence, baseline, baselineLabel } = await op.setup(url);
    const cycles = op.cycles ?? n;
    const count = async (cycle: (i: number) => Promise<unknown>, perCycle: number) => {
      for (let i = 0; i < 10; i++) await cycle(-1 - i); // warm: connected, statements prepared
      proxy.start();
      for (let i = 0; i < cycles; i++) await cycle(i);
      return per(proxy.take(), cycles * perCycle);
    };
    const grants = op.perCycle ?? (op.label.startsWith('contended') ? 2 : 1);
    const mine = await count(pgfence, grants);
    const bare = await count(baseline, grants);
    ctx.row({ measurement: `9. round trips per op: ${op.label}`, pgfence: fmt.count(mine.roundTrips), baseline: `${fmt.count(bare.roundTrips)} (${baselineLabel})`, ratio: fmt.ratio(mine.roundTrips / bare.roundTrips) });
    ctx.row({ measurement: '9. ... protocol messages (of them Parse)', pgfence: `${fmt.count(mine.messages)} (${fmt.count(mine.parse)})`, baseline: `${fmt.count(bare.messages)} (${fmt.count(bare.parse)})` });
    if (op.label.startsWith('lease')) {
      ctx.row({ measurement: '9. ... Parse messages per lease cycle', pgfence: fmt.count(mine.parse), baseline: fmt.count(bare.parse), target: '= 0', met: mine.parse === 0 });
    }
    ctx.note(`9. ${op.label}, messages by type over ${cycles * grants} ops: pgfence ${types(mine.counts)}; baseline ${types(bare.counts)}`);
  }
  await (await ctx.client('m9drop')).query('DROP TABLE IF EXISTS pgfence_bench_wire');
}

/** postgres.js on one connection, or null when it is not installed. */
async function postgresJs(url: string, ctx: BenchContext) {
  let postgres: Awaited<ReturnType<typeof loadPostgresJs>>;
  try {
    postgres = await loadPostgresJs();
  } catch {
    return null;
  }
  const sql = postgres(withName(url, `${ctx.runId}_m9gb`), { max: 1, prepare: true, onnotice: () => {} });
  ctx.onClose(() => sql.end({ timeout: 1 }));
  return sql;
}

function per(c: WireCounts, ops: number) {
  return { roundTrips: c.roundTrips / ops, messages: c.messages / ops, parse: (c.byType.P ?? 0) / ops, counts: c };
}

const types = (c: WireCounts) =>
  Object.entries(c.byType)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([t, k]) => `${t}=${k}`)
    .join(' ') || 'none';

function withName(url: string, applicationName: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', applicationName.slice(0, 63));
  return u.toString();
}

/** A bare client doing one durable commit per cycle (the floor of measurement 5). */
async function commitClient(c: pg.Client): Promise<() => Promise<unknown>> {
  await c.query('CREATE TABLE IF NOT EXISTS pgfence_bench_wire (id int PRIMARY KEY, n bigint NOT NULL)');
  return () => c.query({ name: 'bench_wire_commit', text: 'INSERT INTO pgfence_bench_wire VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = pgfence_bench_wire.n + 1' });
}
