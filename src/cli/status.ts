/**
 * pgfence status: held and waiting advisory locks across the database (with names from pgfence's
 * registry) and the leases held now. Reads through a one-connection pool of its own: it holds no
 * session locks and never shows up as a holder itself.
 */

import pg from 'pg';
import { checkOut, clientLike, detectPinning, openPool, type Pinning, withApplicationName } from '../session/index.js';
import { inspectDatabase, type LockEntry, type LockReport } from '../observe/index.js';
import { booleanFlag, formatMs, numberFlag, type ParsedArgs } from './args.js';
import { noPositionals, runCommand, type CommandSpec } from './command.js';
import { databaseFlag, databaseHelp, databaseUrl } from './database.js';
import { EXIT } from './exit-codes.js';
import { pgSqlExecutor, sleep, table, toJson } from '../core/index.js';
import { ago, clip, errorText, shortDuration } from './format.js';

const DEFAULT_INTERVAL_MS = 2000;

const spec: CommandSpec = {
  name: 'status',
  synopsis: 'pgfence status [--watch [interval]] [--json] [--database-url <url>]',
  help: `Lists the advisory locks held and awaited across the whole database (every backend, not only
pgfence's), with their names from pgfence's registry, and the leases held now with their time left.
Without pgfence's schema, locks are listed by key (run \`pgfence migrate\` for names and leases).

options:
  --watch [interval]    refresh every interval (default ${formatMs(DEFAULT_INTERVAL_MS)}; e.g. 500ms, 5s, 1m) until Ctrl-C;
                        redraws in place on a terminal, else prints a separator and the new table
  --json                print the report as JSON (bigints as strings, dates as ISO strings);
                        with --watch, one JSON document per line per interval
${databaseHelp(24)}
  -h, --help            this help

columns: LOCK is the name (or "key <int64>" when unknown); STATE is held, waiting (blocked: in
PostgreSQL's own queue) or waiting (announced: a pgfence waiter listening for the release);
SINCE is when the hold or wait began, ">=" marking a lower bound (the holder's transaction or
connection start, when the grant itself is not known). LEFT is a lease's time to expiry.

exit status: 0 done (also when --watch is ended by Ctrl-C); 1 the database could not be read;
64 bad command line.
`,
  flags: {
    ...databaseFlag,
    watch: { type: 'optional-duration', min: 100 },
    json: { type: 'boolean' },
  },
};

export async function run(argv: string[]): Promise<number> {
  return runCommand(spec, argv, async (args) => {
    noPositionals(args);
    const url = databaseUrl(args);
    const pool = openPool(withApplicationName(url, 'pgfence status'), {
      max: 1,
      connectionTimeoutMillis: 10_000,
      query_timeout: 15_000,
    });
    // An idle connection failing between refreshes must not crash the process.
    pool.on('error', () => {});
    try {
      const connection = await connectionKind(pool);
      return args.flags.watch === undefined ? await once(pool, args, connection) : await watch(pool, args, connection);
    } finally {
      await pool.end().catch(() => {}); // what was to be shown has been shown (or its error thrown)
    }
  });
}

/** Whether status reads through a pooler (checked once): pids and application names then are the pooler's server connections. */
async function connectionKind(pool: pg.Pool): Promise<Pinning> {
  const { client, release } = await checkOut(pool);
  try {
    return await detectPinning(client, () => clientLike(pool, 10_000));
  } finally {
    release();
  }
}

async function once(pool: pg.Pool, args: ParsedArgs, connection: Pinning): Promise<number> {
  const report = { ...(await inspectDatabase(pgSqlExecutor(pool))), connection };
  process.stdout.write(booleanFlag(args, 'json') ? `${toJson(report, 2)}\n` : `${renderReport(report)}\n`);
  return EXIT.OK;
}

async function watch(pool: pg.Pool, args: ParsedArgs, connection: Pinning): Promise<number> {
  const intervalMs = numberFlag(args, 'watch') ?? DEFAULT_INTERVAL_MS;
  const json = booleanFlag(args, 'json');
  const tty = process.stdout.isTTY === true && !json;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const s of signals) process.on(s, onSignal);
  try {
    let first = true;
    while (!stop.signal.aborted) {
      let text: string;
      try {
        const report = { ...(await inspectDatabase(pgSqlExecutor(pool))), connection };
        text = json ? toJson(report) : renderReport(report);
        if (!json) text = `pgfence status, every ${formatMs(intervalMs)}, at ${report.at.toISOString()} (Ctrl-C to quit)\n\n${text}`;
      } catch (err) {
        text = json ? toJson({ at: new Date(), error: errorText(err) }) : `pgfence status: ${errorText(err)} (retrying every ${formatMs(intervalMs)})`;
      }
      if (stop.signal.aborted) break;
      if (json) process.stdout.write(`${text}\n`);
      else if (tty) {
        // Cursor home, each line cleared to its end, then everything below cleared: no flicker.
        process.stdout.write(`\x1b[H${first ? '\x1b[2J' : ''}${text.split('\n').join('\x1b[K\n')}\x1b[K\n\x1b[J`);
      } else {
        process.stdout.write(`${first ? '' : '\n'}${'-'.repeat(72)}\n${text}\n`);
      }
      first = false;
      await sleep(intervalMs, stop.signal);
    }
  } finally {
    for (const s of signals) process.removeListener(s, onSignal);
  }
  return EXIT.OK;
}

const LOWER_BOUND = new Set<LockEntry['sinceIs']>(['transaction', 'session']);

function lockLabel(name: string | null, namespace: string | null, key: bigint): string {
  if (name === null) return `key ${key}`;
  return clip(namespace ? `${name} (namespace ${namespace})` : name, 60);
}

/** The report as text: a locks table, a leases table, and notes. */
/** One line on what a failover would lose (README, "High availability"). */
function replicationLine(r: LockReport['replication']): string {
  if (r.standby) return 'replication: this server is a standby (in recovery): pgfence cannot lock or issue tokens here';
  const standbys = r.standbys.map((s) => `${s.name || '?'} ${s.state ?? '?'}/${s.syncState ?? '?'}`).join(', ');
  const timeline = `timeline ${r.timeline}`;
  if (r.synchronous) return `replication: synchronous (${standbys}), ${timeline}: a failover keeps every committed token and lease`;
  if (r.synchronousStandbyNames.trim() !== '') {
    return `replication: synchronous_standby_names is set but no synchronous standby is streaming (${standbys || 'none'}), ${timeline}: commits wait, grants time out`;
  }
  if (r.standbys.length === 0) return `replication: no standby streaming, ${timeline}`;
  return (
    `replication: asynchronous (${standbys}), ${timeline}: a failover can lose the last ` +
    'lease rows (a second holder may get in; fencing still refuses its stale writes)'
  );
}

function renderReport(report: LockReport): string {
  const now = report.at.getTime();
  const held = report.locks.filter((l) => l.state === 'held').length;
  const out: string[] = [];
  if (report.connection === 'transaction-pooled') {
    out.push('connection: through a transaction pooler (PgBouncer?): session locks are refused there; PIDs are its server connections');
  } else if (report.connection === 'session-pooled') {
    out.push('connection: through a session pooler (one server connection per client)');
  }
  out.push(`advisory locks: ${held} held, ${report.locks.length - held} waiting`);
  if (report.locks.length > 0) {
    const rows = report.locks.map((l) => [
      lockLabel(l.name, l.namespace, l.key),
      l.mode ?? '-',
      l.state === 'held' ? 'held' : `waiting (${l.waitKind ?? 'blocked'})`,
      String(l.pid),
      clip(l.applicationName || '-', 28),
      l.since ? ago(now - l.since.getTime(), LOWER_BOUND.has(l.sinceIs)) : '-',
    ]);
    out.push(table(['LOCK', 'MODE', 'STATE', 'PID', 'APPLICATION', 'SINCE'], rows, { alignRight: [3] }));
    if (report.locks.some((l) => l.since && LOWER_BOUND.has(l.sinceIs))) {
      out.push('(">=": a lower bound, from the holder\'s transaction or connection start)');
    }
  }
  out.push('', replicationLine(report.replication));
  out.push('');
  if (!report.schema) {
    out.push("pgfence's schema is not in this database: locks are listed by key, and leases are not shown.");
    out.push('Run `pgfence migrate` for lock names and leases.');
    return out.join('\n');
  }
  out.push(`leases: ${report.leases.length} held`);
  if (report.leases.length > 0) {
    const rows = report.leases.map((l) => [
      lockLabel(l.name, null, l.key),
      clip(l.owner, 40),
      l.token.toString(),
      shortDuration(l.remainingMs),
    ]);
    out.push(table(['LEASE', 'OWNER', 'TOKEN', 'LEFT'], rows, { alignRight: [2, 3] }));
  }
  return out.join('\n');
}
