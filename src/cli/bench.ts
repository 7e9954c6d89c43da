/**
 * pgfence bench: the repository's benchmark (src/bench/), against the operator's database. Every
 * figure sits next to a baseline doing the same work in the same run; `npm run bench` runs this too.
 */

import { benchConfig, MEASUREMENTS, runBench, selectMeasurements } from '../bench/index.js';
import { booleanFlag, numberFlag, stringFlag, UsageError } from './args.js';
import { noPositionals, runCommand, type CommandSpec } from './command.js';
import { databaseFlag, databaseHelp, databaseUrl } from './database.js';
import { EXIT } from './exit-codes.js';

const list = MEASUREMENTS.map((m) => `  ${String(m.n).padStart(2)} ${m.id.padEnd(12)}${m.title}${m.schema ? " (needs pgfence's schema)" : ''}`).join('\n');

const spec: CommandSpec = {
  name: 'bench',
  synopsis: 'pgfence bench [--quick] [--only <list>] [--seconds N] [--workers N] [--migrate] [--database-url <url>]',
  help: `Measures pgfence against your database, each figure next to a baseline doing the same work in
the same run (bare pg, postgres.js pipelined, blocking connections, one durable commit; Redis
through ioredis when REDIS_URL or 127.0.0.1:6379 answers): rounds alternate between the sides, and
the ratio is the median of the per-round ratios, with their min..max, so drift in the machine's load
cancels out. Each row shows its target and whether it is met. The full run takes a few minutes and
opens up to about 30 connections; --quick takes well under a minute.

measurements:
${list}

options:
  --quick               a short run (a smoke test: the figures are rough)
  --only <list>         these measurements only: numbers or names, comma-separated
  --seconds N           measuring time of each throughput comparison, 2 to 600
  --workers N           contending workers in the hand-off, 2 to 16 (default 8)
  --migrate             create or update pgfence's schema first (as pgfence migrate)
${databaseHelp(24)}
  -h, --help            this help

Names and keys are unique to each run; measurements 5 and 9 create and drop small tables of their
own (pgfence_bench_*). Without pgfence's schema, the measurements that need it are skipped.

exit status: 0 done (missed targets are reported in the table); 1 a measurement failed (e.g. the
database could not be reached); 64 bad command line.
`,
  flags: {
    ...databaseFlag,
    quick: { type: 'boolean' },
    only: { type: 'string' },
    seconds: { type: 'number', min: 2, max: 600 },
    workers: { type: 'number', min: 2, max: 16, integer: true },
    migrate: { type: 'boolean' },
  },
};

export async function run(argv: string[]): Promise<number> {
  return runCommand(spec, argv, async (args) => {
    noPositionals(args);
    const only = stringFlag(args, 'only');
    const measurements = selectMeasurements(only);
    if (measurements === null) throw new UsageError(`--only: expected measurement numbers or names (${MEASUREMENTS.map((m) => m.id).join(', ')}), got "${only}"`);
    const url = databaseUrl(args);
    const cfg = benchConfig({ quick: booleanFlag(args, 'quick'), seconds: numberFlag(args, 'seconds'), workers: numberFlag(args, 'workers') });
    const crashed = await runBench({
      url,
      cfg,
      measurements,
      migrate: booleanFlag(args, 'migrate'),
      out: (text) => process.stdout.write(text),
      progress: (text) => process.stderr.write(text),
    });
    return crashed > 0 ? EXIT.FAILURE : EXIT.OK;
  });
}
