/**
 * Fenced locks and leases against the floor of one durable commit: a one-row upsert with
 * synchronous_commit on, on a bare pinned client, measured side by side. A fenced acquire issues its
 * token in the grant's statement (about one commit plus the unlock's round trip); a lease cycle takes
 * and releases (target: at most 2.2 commits' time). WAL written per cycle, from the server's insert
 * position around a run of cycles (anything else writing to the same server counts too).
 */

import type pg from 'pg';
import { type BenchContext, SQL, useCommitTable } from '../context.js';
import { rateRow } from '../report.js';
import { fmt, pairedRatios } from '../stats.js';
import { compareThroughput } from '../timing.js';

export async function durable(ctx: BenchContext): Promise<void> {
  const locker = ctx.locker('m5');
  const client = await ctx.client('m5b');
  await useCommitTable(ctx, client);
  const floor = async () => client.query(SQL.durableCommit);
  const fenced = async () => {
    const h = await locker.acquire(ctx.name('fenced'), { fencing: true });
    if (h.token === null) throw new Error('a fenced acquire without a token');
    await h.release();
  };
  const lease = async () => (await locker.lease(ctx.name('lease'), { ttlMs: 10_000, renew: false })).release();

  const r = await compareThroughput(ctx.cfg, [
    { label: 'floor', workers: 1, cycle: floor },
    { label: 'fenced', workers: 1, cycle: fenced },
    { label: 'lease', workers: 1, cycle: lease },
  ]);
  // Cycle time in durable commits, per round: floor rate / cycle rate.
  const fencedCommits = pairedRatios(r.rates[0]!, r.rates[1]!);
  const leaseCommits = pairedRatios(r.rates[0]!, r.rates[2]!);
  rateRow(ctx, '5. fenced acquire+release vs one durable commit', r.medians[1]!, r.medians[0]!, pairedRatios(r.rates[1]!, r.rates[0]!), undefined, { pgfence: r.cpu[1]!, baseline: r.cpu[0]! });
  // A fenced cycle: the grant with its token (one durable commit) and the unlock (one round trip).
  const commitMs = 1000 / r.medians[0]!;
  const allowed = 1 + ctx.rttMs / commitMs;
  ctx.row({
    measurement: '5. ... fenced cycle, in durable commits',
    pgfence: fmt.count(fencedCommits.median),
    baseline: '1.00',
    range: rangeText(fencedCommits),
    target: `<= ${allowed.toFixed(2)} (1 + a round trip)`,
    met: fencedCommits.median <= allowed,
  });
  rateRow(ctx, '5. lease acquire+release vs one durable commit', r.medians[2]!, r.medians[0]!, pairedRatios(r.rates[2]!, r.rates[0]!), undefined, { pgfence: r.cpu[2]!, baseline: r.cpu[0]! });
  ctx.row({
    measurement: '5. ... lease cycle, in durable commits',
    pgfence: fmt.count(leaseCommits.median),
    baseline: '1.00',
    range: rangeText(leaseCommits),
    target: '<= 2.20',
    met: leaseCommits.median <= 2.2,
  });
  ctx.note(`5. cycles/s per round: floor ${fmt.list(r.rates[0]!)}; fenced ${fmt.list(r.rates[1]!)}; lease ${fmt.list(r.rates[2]!)}`);

  const cycles = ctx.cfg.quick ? 50 : 500;
  const wal = async (cycle: () => Promise<unknown>) => (await walBytes(client, cycles, cycle)) / cycles;
  const [floorWal, fencedWal, leaseWal] = [await wal(floor), await wal(fenced), await wal(lease)];
  ctx.row({ measurement: '5. WAL bytes per fenced cycle (vs one commit)', pgfence: fmt.bytes(fencedWal), baseline: fmt.bytes(floorWal), ratio: fmt.ratio(fencedWal / floorWal) });
  ctx.row({ measurement: '5. WAL bytes per lease cycle (vs one commit)', pgfence: fmt.bytes(leaseWal), baseline: fmt.bytes(floorWal), ratio: fmt.ratio(leaseWal / floorWal) });
}

const rangeText = (s: { min: number; max: number; n: number }) => (s.n > 1 ? `${fmt.count(s.min)}..${fmt.count(s.max)}` : '');

/** WAL inserted on the server while `cycles` cycles run one after another. */
async function walBytes(client: pg.Client, cycles: number, cycle: () => Promise<unknown>): Promise<number> {
  const lsn = async () => (await client.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]!.lsn;
  const from = await lsn();
  for (let i = 0; i < cycles; i++) await cycle();
  const to = await lsn();
  const { rows } = await client.query<{ bytes: string }>('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::text AS bytes', [to, from]);
  return Number(rows[0]!.bytes);
}
