#!/usr/bin/env node
/**
 * The pgfence command. Each subcommand lives in its own module and exports `run(argv): Promise<number>`
 * (the exit code); this file only dispatches.
 */
const commands: Record<string, { summary: string; load: () => Promise<{ run(argv: string[]): Promise<number> }> }> = {
  migrate: { summary: "apply pgfence's schema (migrations/ and sql/)", load: () => import('./migrate.js') },
  status: { summary: 'held and waiting locks and leases, with names', load: () => import('./status.js') },
  run: { summary: 'run a command while holding a lock', load: () => import('./run.js') },
  demo: { summary: 'the fencing story, for real (embedded PostgreSQL without a database URL)', load: () => import('./demo.js') },
  bench: { summary: 'a quick benchmark against your database', load: () => import('./bench.js') },
};

export function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(8)} ${c.summary}`);
  return `usage: pgfence <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nDatabase: --database-url <url> or DATABASE_URL. Run pgfence <command> --help for its options.\n`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage());
    return name === undefined ? 64 : 0;
  }
  const command = commands[name];
  if (!command) {
    process.stderr.write(`pgfence: unknown command "${name}"\n\n${usage()}`);
    return 64;
  }
  return (await command.load()).run(rest);
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
