/** pgfence migrate: applies pgfence's schema (migrations/ and sql/) and says what it applied. */

import { migrate } from '../migrate/index.js';
import { redactUrl } from '../session/index.js';
import { runCommand, noPositionals, type CommandSpec } from './command.js';
import { databaseFlag, databaseHelp, databaseUrl } from './database.js';
import { EXIT } from './exit-codes.js';
import { errorText } from './format.js';

const spec: CommandSpec = {
  name: 'migrate',
  synopsis: 'pgfence migrate [--database-url <url>]',
  help: `Brings pgfence's schema up to date: applies pending migrations/ in order and re-applies changed
sql/ definitions. Safe to run from several places at once (runs are serialised by an advisory lock).

options:
${databaseHelp(24)}
  -h, --help            this help

exit status: 0 applied or up to date; 1 the migration failed (message and code on stderr);
64 bad command line.
`,
  flags: { ...databaseFlag },
};

export async function run(argv: string[]): Promise<number> {
  return runCommand(spec, argv, async (args) => {
    noPositionals(args);
    const url = databaseUrl(args);
    let applied: string[];
    try {
      ({ applied } = await migrate({ connectionString: url }));
    } catch (err) {
      process.stderr.write(`pgfence migrate: failed on ${redactUrl(url)}: ${errorText(err)}\n`);
      return EXIT.FAILURE;
    }
    if (applied.length === 0) {
      process.stdout.write("pgfence's schema is up to date (nothing to apply)\n");
    } else {
      for (const file of applied) process.stdout.write(`applied ${file}\n`);
      process.stdout.write(`pgfence's schema is up to date (${applied.length} applied)\n`);
    }
    return EXIT.OK;
  });
}
