/**
 * pgfence run: holds a lock while a child command runs. The child inherits stdio and gets
 * PGFENCE_LOCK / PGFENCE_KEY / PGFENCE_TOKEN; signals sent to pgfence are forwarded to it; if the
 * lock is lost the child is stopped (SIGTERM, then SIGKILL) and pgfence exits 70.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { constants, hostname } from 'node:os';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { type LockHandle, LockLostError, LockTimeoutError, LockUnavailableError, PgfenceError, setLongTimeout, TIMED_OUT, within } from '../core/index.js';
import { lockKey } from '../keys.js';
import { createLocker, type Locker } from '../locker.js';
import { withApplicationName } from '../session/index.js';
import { booleanFlag, formatMs, numberFlag, stringFlag, UsageError, type ParsedArgs } from './args.js';
import { runCommand, type CommandSpec } from './command.js';
import { databaseFlag, databaseHelp, databaseUrl } from './database.js';
import { EXIT } from './exit-codes.js';
import { clip, errorText } from './format.js';

const DEFAULT_WAIT_MS = 0;
const DEFAULT_LEASE_TTL_MS = 30_000;
const DEFAULT_KILL_AFTER_MS = 10_000;
/** Signals pgfence passes on to the child (it keeps running itself until the child exits). */
const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'] as const;

const spec: CommandSpec = {
  name: 'run',
  synopsis: 'pgfence run <name> [--wait <duration>] [--ttl <duration>] [--lease [--at-least <duration>]] [options] -- <command> [args...]',
  help: `Runs <command> while holding the lock <name>, so that at most one copy runs across every machine
sharing the database (e.g. a cron job scheduled on several hosts). The command is run directly
(no shell) with the terminal's stdin/stdout/stderr. Its environment gets:
  PGFENCE_LOCK   the lock name
  PGFENCE_KEY    its int64 advisory-lock key
  PGFENCE_TOKEN  the fencing token (decimal; increases with every grant of the name): pass it to
                 fenced writes so a holder that lost the lock cannot overwrite a newer one's work

By default the lock is a session advisory lock (exclusive, with a fencing token), held for as long
as the command runs. With --lease it is a table-backed lease, renewed automatically while the
command runs. Either way pgfence needs its schema for the token (run \`pgfence migrate\` once);
without it, pgfence refuses to run the command (exit 78) rather than hand out no token silently;
pass --no-fencing to run with an advisory lock and no token (PGFENCE_TOKEN is then unset).

options:
  --wait <duration>        how long to wait for a busy lock (default ${formatMs(DEFAULT_WAIT_MS)}: a single try, so a job
                           that is already running elsewhere is skipped at once; "forever" waits without bound)
  --ttl <duration>         with --lease: the lease's TTL (default ${formatMs(DEFAULT_LEASE_TTL_MS)}, at least 100ms; renewed every
                           TTL/3); without: the maximum hold of the advisory lock (default: no limit):
                           past it the lock is released and the command stopped as if the lock were lost
  --lease                  take a lease instead of an advisory lock
  --at-least <duration>    with --lease: keep the lease at least this long after it was taken (database
                           clock), even when the command finishes sooner (or this process dies), so that
                           the same job fired a little later on another host (clock skew, a late timer)
                           is skipped, not rerun.
                           Make it longer than the skew between hosts and shorter than the schedule period
  --kill-after <duration>  after a lost lock, SIGKILL the command if it has not exited this long after
                           SIGTERM (default ${formatMs(DEFAULT_KILL_AFTER_MS)}; 0 = at once)
  --no-fencing             advisory lock without a fencing token (works without pgfence's schema)
  --namespace <ns>         the namespace of the lock name (as in createLocker({ namespace }))
${databaseHelp(27)}
  -h, --help               this help
Durations: 500ms, 30s, 1.5s, 2m, 1h, or a plain number of milliseconds.

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to pgfence are passed to the
command; pgfence keeps the lock until the command exits. (A signal that arrives while pgfence is
still waiting for the lock ends the wait: the command is not run, exit 128 + the signal number.)

exit status:
  the command's own exit status (128 + the signal number if it was killed by a signal)
  64   bad command line (unknown option, bad duration, no database URL, no command after --)
  69   the database could not be reached; the command was not run
  70   the lock was lost while the command ran (session killed, TTL or lease expired):
       the command was stopped with SIGTERM (then SIGKILL after --kill-after)
  75   the lock stayed busy for --wait; the command was not run
  78   pgfence's schema is missing (run \`pgfence migrate\`, or pass --no-fencing)
  126  the command could not be executed (permission denied)
  127  the command was not found
  1    any other error before the command ran

examples:
  pgfence run nightly-report --wait 0 -- node scripts/report.js --since yesterday
  # in the same crontab on every host: runs once per schedule, even if a host's clock is 20s late
  pgfence run nightly-report --lease --at-least 5m -- node scripts/report.js
`,
  flags: {
    ...databaseFlag,
    wait: { type: 'duration', allowInfinity: true },
    ttl: { type: 'duration', min: 1 },
    lease: { type: 'boolean' },
    'at-least': { type: 'duration' },
    'kill-after': { type: 'duration' },
    'no-fencing': { type: 'boolean' },
    namespace: { type: 'string' },
  },
};

interface RunOptions {
  name: string;
  namespace: string | undefined;
  key: bigint;
  command: string[];
  waitMs: number;
  ttlMs: number | undefined;
  lease: boolean;
  /** With lease: the at-least-for hold (LeaseOptions.minHoldMs). */
  minHoldMs: number;
  fencing: boolean;
  killAfterMs: number;
  url: string;
}

export async function run(argv: string[]): Promise<number> {
  return runCommand(spec, argv, async (args) => runLocked(options(args)));
}

function options(args: ParsedArgs): RunOptions {
  const [name, ...extra] = args.positionals;
  if (name === undefined) throw new UsageError('missing the lock name');
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}" (put the command after --)`);
  if (args.rest === null) throw new UsageError('missing the command: put it after --, e.g. pgfence run <name> -- <command> [args...]');
  if (args.rest.length === 0 || args.rest[0] === '') throw new UsageError('missing the command after --');
  const lease = booleanFlag(args, 'lease');
  const fencing = !booleanFlag(args, 'no-fencing');
  if (lease && !fencing) throw new UsageError('--no-fencing: a lease always carries a fencing token; drop --no-fencing or --lease');
  const namespace = stringFlag(args, 'namespace');
  let key: bigint;
  try {
    key = namespace === undefined ? lockKey(name) : lockKey(name, { namespace });
  } catch (err) {
    throw new UsageError(`bad lock name: ${(err as Error).message}`);
  }
  const minHoldMs = numberFlag(args, 'at-least');
  if (minHoldMs !== undefined && !lease) throw new UsageError('--at-least holds a lease: add --lease');
  let ttlMs = numberFlag(args, 'ttl');
  if (lease) {
    ttlMs ??= DEFAULT_LEASE_TTL_MS;
    if (ttlMs < 100) throw new UsageError(`--ttl: a lease's TTL must be at least 100ms, got ${formatMs(ttlMs)}`);
  }
  return {
    name,
    namespace,
    key,
    command: args.rest,
    waitMs: numberFlag(args, 'wait') ?? DEFAULT_WAIT_MS,
    ttlMs,
    lease,
    minHoldMs: Math.ceil(minHoldMs ?? 0),
    fencing,
    killAfterMs: numberFlag(args, 'kill-after') ?? DEFAULT_KILL_AFTER_MS,
    url: databaseUrl(args),
  };
}

function say(message: string): void {
  process.stderr.write(`pgfence run: ${message}\n`);
}

function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}

/** The command for messages: its words, quoted where needed, shortened. */
function describeCommand(command: string[]): string {
  return clip(command.map((w) => (/^[\w@%+=:,./-]+$/.test(w) ? w : JSON.stringify(w))).join(' '), 100);
}

async function runLocked(o: RunOptions): Promise<number> {
  const lockText = `"${o.name}"${o.namespace === undefined ? '' : ` (namespace "${o.namespace}")`}`;
  const commandText = describeCommand(o.command);
  const locker = createLocker({
    connectionString: withApplicationName(o.url, `pgfence run ${o.name}`),
    namespace: o.namespace,
    maxSessions: 1,
  });

  // Signals: while waiting they end the wait; once the child runs they are passed on to it.
  let child: ChildProcess | null = null;
  let childExited = false;
  let interrupted: NodeJS.Signals | null = null;
  const waiting = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    if (child !== null) {
      if (!childExited) child.kill(signal);
      return;
    }
    interrupted ??= signal;
    waiting.abort(new Error(`interrupted by ${signal}`));
  };
  for (const s of FORWARDED) process.on(s, onSignal);

  let handle: LockHandle | null = null;
  try {
    try {
      handle = await acquire(locker, o, waiting.signal);
    } catch (err) {
      if (interrupted !== null) {
        say(`interrupted by ${interrupted} while waiting for lock ${lockText}; not running ${commandText}`);
        return signalExitCode(interrupted);
      }
      if (err instanceof LockTimeoutError) handle = null;
      else return acquireFailure(err, o);
    }
    if (handle === null) {
      say(`lock ${lockText} is busy (held elsewhere${o.waitMs > 0 ? `; waited ${formatMs(o.waitMs)}` : ''}); not running ${commandText}`);
      return EXIT.BUSY;
    }
    if (interrupted !== null) {
      say(`interrupted by ${interrupted}; not running ${commandText}`);
      return signalExitCode(interrupted);
    }
    if (handle.signal.aborted) {
      say(`lock ${lockText} was lost before ${commandText} started: ${lossText(handle.signal.reason)}`);
      return EXIT.LOCK_LOST;
    }

    const env: NodeJS.ProcessEnv = { ...process.env, PGFENCE_LOCK: o.name, PGFENCE_KEY: o.key.toString() };
    if (handle.token !== null) env.PGFENCE_TOKEN = handle.token.toString();
    else delete env.PGFENCE_TOKEN;
    const proc = spawn(o.command[0]!, o.command.slice(1), { stdio: 'inherit', env });
    child = proc;

    let lost = false;
    // A long timer: --kill-after may pass Node's ~24.8-day limit for one (Node would fire it after 1 ms).
    let cancelKill: (() => void) | undefined;
    const heldHandle = handle;
    const onLost = () => {
      if (childExited || proc.pid === undefined) return;
      lost = true;
      say(
        `lock ${lockText} was lost: ${lossText(heldHandle.signal.reason)}; stopping ${commandText} ` +
          `(SIGTERM${o.killAfterMs > 0 ? `, then SIGKILL after ${formatMs(o.killAfterMs)}` : ' and SIGKILL'})`,
      );
      proc.kill('SIGTERM');
      cancelKill = setLongTimeout(() => {
        if (childExited) return;
        if (o.killAfterMs > 0) say(`${commandText} did not exit within ${formatMs(o.killAfterMs)} of SIGTERM; sending SIGKILL`);
        proc.kill('SIGKILL');
      }, o.killAfterMs);
    };
    handle.signal.addEventListener('abort', onLost, { once: true });

    const outcome = await new Promise<{ error: NodeJS.ErrnoException } | { code: number | null; signal: NodeJS.Signals | null }>(
      (resolve) => {
        proc.on('error', (error: NodeJS.ErrnoException) => {
          // Before 'spawn' this is a failure to start; later ones (a failed kill) change nothing.
          if (proc.pid === undefined) resolve({ error });
        });
        proc.once('exit', (code, signal) => resolve({ code, signal }));
      },
    );
    childExited = true;
    cancelKill?.();
    handle.signal.removeEventListener('abort', onLost);

    if ('error' in outcome) {
      const notFound = outcome.error.code === 'ENOENT' || (outcome.error.code === 'EACCES' && !existsOnPath(o.command[0]!));
      say(`cannot run ${commandText}: ${notFound ? 'command not found' : errorText(outcome.error)}`);
      return notFound ? EXIT.NOT_FOUND : EXIT.CANNOT_EXECUTE;
    }
    if (lost) {
      const how = outcome.signal ? `killed by ${outcome.signal}` : `exited with status ${outcome.code}`;
      say(`${commandText} ${how} after lock ${lockText} was lost; exit status ${EXIT.LOCK_LOST}`);
      return EXIT.LOCK_LOST;
    }
    return outcome.signal ? signalExitCode(outcome.signal) : (outcome.code ?? EXIT.FAILURE);
  } finally {
    await releaseAndClose(locker, handle);
    for (const s of FORWARDED) process.removeListener(s, onSignal);
  }
}

/**
 * Whether a command names an existing file, directly or in a PATH directory. execvp reports EACCES,
 * not ENOENT, for a missing command when some PATH directory is unreadable: that is still "not found".
 */
function existsOnPath(cmd: string): boolean {
  if (cmd.includes('/')) return existsSync(cmd);
  return (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, cmd)));
}

async function acquire(locker: Locker, o: RunOptions, signal: AbortSignal): Promise<LockHandle | null> {
  if (o.lease) {
    const opts = { ttlMs: o.ttlMs, minHoldMs: o.minHoldMs, signal, owner: `pgfence run on ${hostname()} pid ${process.pid}` };
    return o.waitMs === 0 ? locker.tryLease(o.name, opts) : locker.lease(o.name, { ...opts, timeoutMs: o.waitMs });
  }
  const opts = { fencing: o.fencing, ttlMs: o.ttlMs, signal };
  return o.waitMs === 0 ? locker.tryAcquire(o.name, opts) : locker.acquire(o.name, { ...opts, timeoutMs: o.waitMs });
}

function acquireFailure(err: unknown, o: RunOptions): number {
  if (err instanceof PgfenceError && err.code === 'PGFENCE_NOT_MIGRATED') {
    say(
      o.lease
        ? "leases need pgfence's schema, which this database does not have: run `pgfence migrate` first"
        : "pgfence's schema is missing from this database, and the fencing token (PGFENCE_TOKEN) needs it: " +
            'run `pgfence migrate` first, or pass --no-fencing to run without a token',
    );
    return EXIT.NOT_MIGRATED;
  }
  if (err instanceof LockUnavailableError) {
    say(`cannot reach the database: ${errorText(err)}`);
    return EXIT.UNAVAILABLE;
  }
  say(errorText(err));
  return EXIT.FAILURE;
}

function lossText(reason: unknown): string {
  if (reason instanceof LockLostError) {
    const why: Record<string, string> = {
      'session-lost': 'its database session ended',
      'ttl-expired': 'its --ttl ran out',
      'lease-expired': 'the lease expired before it could be renewed',
      'lease-stolen': 'the lease was taken over',
      closed: 'the locker was closed',
    };
    return why[reason.reason] ?? reason.reason;
  }
  return errorText(reason);
}

/** Gives the lock back and ends every connection; bounded, so a dead database cannot hang the exit. */
async function releaseAndClose(locker: Locker, handle: LockHandle | null): Promise<void> {
  const done = (async () => {
    await handle?.release().catch(() => false); // never rejects; the catch only guards the exit
    // The command is exiting with the child's status: a database that fails now has nothing left to tell it,
    // and the server frees what the ended connections held.
    await locker.close().catch(() => {});
  })();
  if ((await within(done, 10_000)) === TIMED_OUT) {
    say('could not close the database connections within 10s; exiting anyway');
    setTimeout(() => process.exit(), 1000).unref();
  }
}
