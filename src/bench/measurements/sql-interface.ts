/**
 * The SQL interface from another language's point of view: pgbench (a C client, one connection per
 * side) running a fenced lock cycle (try_lock_fenced + unlock) and a lease cycle (try_lease +
 * release_lease), next to a plain pg_try_advisory_lock + pg_advisory_unlock cycle and one durable
 * commit. Every side runs as its own pgbench process per round, rounds interleaved in a rotating order.
 * Each script fails a statement (which fails the run) when an outcome is not the expected one.
 */

import { lockKey } from '../../keys.js';
import { type BenchContext, SQL, useCommitTable } from '../context.js';
import { pgbenchRate, pgbenchScripts, pgbenchVersion } from '../pgbench.js';
import { rateRow } from '../report.js';
import { fmt, median, pairedRatios } from '../stats.js';
import { interleavedSamples, planRounds } from '../timing.js';

// `... WHERE ok \gset` returns no row when ok is false: pgbench counts that run as failed.
const SCRIPTS = {
  plain: `SELECT ok FROM pg_try_advisory_lock(:key) AS ok WHERE ok \\gset
SELECT ok FROM pg_advisory_unlock(:key) AS ok WHERE ok \\gset
`,
  fenced: `SELECT token FROM pgfence.try_lock_fenced(:key) AS token WHERE token IS NOT NULL \\gset
SELECT ok FROM pgfence.unlock(:key) AS ok WHERE ok \\gset
`,
  lease: `SELECT token FROM pgfence.try_lease(:key, 10000) WHERE granted \\gset
SELECT ok FROM pgfence.release_lease(:key, :token) AS ok WHERE ok \\gset
`,
  commit: `${SQL.durableCommit.text};\n`,
};
type Side = keyof typeof SCRIPTS;
const SIDES: Side[] = ['plain', 'fenced', 'lease', 'commit'];

export async function sqlInterface(ctx: BenchContext): Promise<void> {
  const version = pgbenchVersion();
  if (version === null) {
    ctx.row({ measurement: '10. SQL interface from pgbench', pgfence: 'skipped: pgbench is not installed (PostgreSQL client tools)' });
    return;
  }
  await useCommitTable(ctx, await ctx.client('m10'));
  const scripts = pgbenchScripts(SCRIPTS);
  ctx.onClose(async () => scripts.remove());
  const url = ctx.urlFor('m10_pgbench');
  const keys: Record<Side, string> = { plain: '', fenced: '', lease: '', commit: '' };
  for (const side of SIDES) keys[side] = lockKey(ctx.name('sql', side)).toString();
  const rate = (side: Side, runs: number) => pgbenchRate(url, scripts.files[side], runs, { key: keys[side] });

  // Warm-up: a rate per side, to size the rounds so that the slowest completes enough cycles.
  const warmRuns = ctx.cfg.quick ? 50 : 300;
  const warm: number[] = [];
  for (const side of SIDES) warm.push(await rate(side, warmRuns));
  const { roundMs, rounds } = planRounds(ctx.cfg, Math.min(...warm), SIDES.length);
  const runs = warm.map((r) => Math.max(ctx.cfg.minCyclesPerWorker, Math.ceil((r * roundMs) / 1000)));
  const { values } = await interleavedSamples(
    rounds,
    SIDES.map((side, i) => () => rate(side, runs[i]!)),
  );
  // No CPU column: both sides run in pgbench (C, its own process), not in this one.
  const [plain, fenced, lease, commit] = values as [number[], number[], number[], number[]];

  const row = (measurement: string, mine: number[], base: number[]) => rateRow(ctx, measurement, median(mine), median(base), pairedRatios(mine, base));
  row('10. SQL try_lock_fenced+unlock vs pg_try_advisory_lock+unlock', fenced, plain);
  row('10. SQL try_lease+release_lease vs pg_try_advisory_lock+unlock', lease, plain);
  row('10. SQL try_lock_fenced+unlock vs one durable commit', fenced, commit);
  row('10. SQL try_lease+release_lease vs one durable commit', lease, commit);
  ctx.note(
    `10. ${version}, one connection per side, ${rounds} rounds of about ${Math.round(roundMs)} ms per side; cycles/s per round: ` +
      `plain ${fmt.list(plain)}; fenced ${fmt.list(fenced)}; lease ${fmt.list(lease)}; commit ${fmt.list(commit)}`,
  );
}
