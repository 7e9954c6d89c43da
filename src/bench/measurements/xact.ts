/**
 * xactLock on a free key inside the caller's transaction (BEGIN; xactLock; COMMIT), next to the same
 * transaction with a bare pg_advisory_xact_lock, on one client each. Where pgfence's schema is
 * present, xactLock also gives way to leases (pgfence.admit_xact_lock: a subtransaction in the one
 * statement); the same cycle in a scratch database without the schema shows what it costs, side by side.
 */

import pg from 'pg';
import { xactLock } from '../../advisory/index.js';
import { lockKey } from '../../keys.js';
import { SQL, type BenchContext } from '../context.js';
import { atLeast, rateRow } from '../report.js';
import { fmt, pairedRatios } from '../stats.js';
import { compareThroughput, type Side } from '../timing.js';

export async function xact(ctx: BenchContext): Promise<void> {
  const mine = await ctx.client('m6');
  const bare = await ctx.client('m6b');
  const guarded = (await mine.query<{ g: boolean }>(`SELECT to_regprocedure('pgfence.admit_xact_lock(bigint,boolean,boolean)') IS NOT NULL AS g`)).rows[0]!.g;
  const scratch = guarded ? await scratchDatabase(ctx) : null;
  const plain = scratch ? await ctx.client('m6p', scratch.url) : null;
  const name = ctx.name('xact');
  const key = lockKey(ctx.name('xact-baseline')).toString();
  const cycle = (client: pg.Client) => async () => {
    await client.query('BEGIN');
    await xactLock(client, name);
    await client.query('COMMIT');
  };
  const sides: Side[] = [
    { label: 'xactLock', workers: 1, cycle: cycle(mine) },
    {
      label: 'bare',
      workers: 1,
      cycle: async () => {
        await bare.query('BEGIN');
        await bare.query({ ...SQL.xactLock, values: [key] });
        await bare.query('COMMIT');
      },
    },
  ];
  if (plain) sides.push({ label: 'xactLock without the schema', workers: 1, cycle: cycle(plain) });
  try {
    const r = await compareThroughput(ctx.cfg, sides);
    // Row 6 is xactLock where nothing guards it (no schema), as it always was; 6b with the lease guard.
    const u = plain ? 2 : 0; // the unguarded side
    const unguardedOver = plain ? pairedRatios(r.rates[2]!, r.rates[1]!) : r.firstOver[0]!;
    rateRow(ctx, '6. xactLock on a free key (BEGIN, lock, COMMIT)', r.medians[u]!, r.medians[1]!, unguardedOver, atLeast(0.95), { pgfence: r.cpu[u]!, baseline: r.cpu[1]! });
    if (plain) {
      rateRow(ctx, '6b. ... with the schema: guarded against leases', r.medians[0]!, r.medians[1]!, r.firstOver[0]!, undefined, { pgfence: r.cpu[0]!, baseline: r.cpu[1]! });
      rateRow(ctx, '6b. ... guarded vs unguarded (no schema)', r.medians[0]!, r.medians[2]!, r.firstOver[1]!, undefined, { pgfence: r.cpu[0]!, baseline: r.cpu[2]! });
    } else if (guarded) {
      ctx.row({ measurement: '6b. ... with the schema: guarded against leases', pgfence: 'skipped: could not create a scratch database' });
    }
    ctx.note(
      `6. transactions/s per round: xactLock ${fmt.list(r.rates[0]!)}${guarded ? ' (guarded against leases)' : ''}; bare pg_advisory_xact_lock ${fmt.list(r.rates[1]!)}` +
        (plain ? `; xactLock in a database without pgfence's schema ${fmt.list(r.rates[2]!)}` : ''),
    );
  } finally {
    await plain?.end().catch(() => {}); // tidying up: the figures are taken
    await scratch?.drop();
  }
}

/** An empty database on the same server for this run (null when the URL or the role does not allow one). */
async function scratchDatabase(ctx: BenchContext): Promise<{ url: string; drop(): Promise<void> } | null> {
  let u: URL;
  try {
    u = new URL(ctx.urlFor('m6p'));
  } catch {
    return null;
  }
  const dbName = `${ctx.runId}_noschema`.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  const admin = await ctx.client('m6admin');
  try {
    await admin.query(`CREATE DATABASE ${dbName}`);
  } catch {
    return null;
  }
  u.pathname = `/${dbName}`;
  return {
    url: u.toString(),
    drop: async () => {
      await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {}); // tidying up: a scratch database left over is harmless
    },
  };
}
