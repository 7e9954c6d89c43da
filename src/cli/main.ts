#!/usr/bin/env node
/**
 * The pgfence command. Each subcommand lives in its own module and exports `run(argv): Promise<number>`
 * (the exit code); this file answers the global options (before the command, as git and gh take
 * them; read by parseGlobalArgs in args.ts), --version and help, and dispatches.
 */
import { readFileSync } from 'node:fs';
import { parseGlobalArgs, UsageError, type GlobalArgs } from './args.js';
import { EXIT } from './exit-codes.js';
import { didYouMean } from './suggest.js';

const commands: Record<string, { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number> }> }> = {
  migrate: { summary: "apply pgfence's schema (migrations/ and sql/)", load: () => import('./migrate.js') },
  status: { summary: 'held and waiting locks and leases, with names', load: () => import('./status.js') },
  run: { summary: 'run a command while holding a lock', load: () => import('./run.js') },
  demo: { summary: 'the fencing story, for real (embedded PostgreSQL without a database)', load: () => import('./demo.js') },
  bench: { summary: 'a quick benchmark against your database', load: () => import('./bench.js') },
  help: { summary: 'help on a command: pgfence help <command>', load: async () => ({ run: help }) },
};

const GLOBAL_OPTIONS: [string, string][] = [
  ['--database-url <url>', 'the database, for any command (see below)'],
  ['-V, --version', "pgfence's version"],
  ['-h, --help', 'this help'],
];

function usage(): string {
  const width = Math.max(...Object.keys(commands).map((n) => n.length), ...GLOBAL_OPTIONS.map(([o]) => o.length)) + 2;
  const commandLines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}${c.summary}`);
  const optionLines = GLOBAL_OPTIONS.map(([o, text]) => `  ${o.padEnd(width)}${text}`);
  return (
    `usage: pgfence [--database-url <url>] <command> [options]\n` +
    `       pgfence help <command> | --version\n\n` +
    `commands:\n${commandLines.join('\n')}\n\n` +
    `global options (before the command; --database-url also after it):\n${optionLines.join('\n')}\n\n` +
    `Database: --database-url (a postgres:// URL or keyword/value settings such as "host=db dbname=app"),\n` +
    `else DATABASE_URL, else PGHOST, PGPORT, PGUSER, PGDATABASE and PGPASSWORD as for psql.\n` +
    `Run 'pgfence help <command>' (or pgfence <command> --help) for a command's options.\n`
  );
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** A usage mistake: the message on stderr, then the full usage (`full`) or where to find it. */
function usageError(message: string, full = false): number {
  process.stderr.write(`pgfence: ${message}\n${full ? `\n${usage()}` : "Run 'pgfence --help' for the commands and global options.\n"}`);
  return EXIT.USAGE;
}

async function help(argv: string[]): Promise<number> {
  const [name, ...extra] = argv;
  if (name === undefined || name === '--help' || name === '-h') {
    process.stdout.write(usage());
    return EXIT.OK;
  }
  if (extra.length > 0) return usageError(`help takes one command, got "${argv.join(' ')}"`);
  if (name === 'help' || !Object.hasOwn(commands, name)) {
    return name === 'help' ? help([]) : usageError(`unknown command "${name}"${didYouMean(name, Object.keys(commands), (c) => `"${c}"`)}`);
  }
  return (await commands[name]!.load()).run(['--help']);
}

async function main(argv: string[]): Promise<number> {
  let global: GlobalArgs;
  try {
    global = parseGlobalArgs(argv);
  } catch (err) {
    if (err instanceof UsageError) return usageError(err.message);
    throw err;
  }
  if (global.kind === 'version') {
    process.stdout.write(`pgfence ${version()}\n`);
    return EXIT.OK;
  }
  if (global.kind === 'help') return help([]);
  const { command: name, forward, rest } = global;
  if (name === undefined) return usageError('missing the command', true);
  if (!Object.hasOwn(commands, name)) {
    return usageError(`unknown command "${name}"${didYouMean(name, Object.keys(commands), (c) => `"${c}"`)}`);
  }
  if (name === 'help') return help(rest);
  // The global options go before the command's own (and before a `--` ending them).
  return (await commands[name]!.load()).run([...forward, ...rest]);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`pgfence: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
