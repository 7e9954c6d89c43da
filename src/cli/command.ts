/**
 * The frame every subcommand shares: --help (stdout, exit 0), argument parsing, usage errors
 * (stderr with the usage line, exit 64), and any other error as its message and code (exit 1).
 */

import { parseArgs, UsageError, type FlagSpec, type ParsedArgs } from './args.js';
import { EXIT } from './exit-codes.js';
import { errorText } from './format.js';

export interface CommandSpec {
  name: string;
  /** The one-line synopsis, e.g. "pgfence status [--watch [interval]] [--json]". */
  synopsis: string;
  /** The full --help text (after the synopsis). */
  help: string;
  flags: Record<string, FlagSpec>;
}

const helpFlag: Record<string, FlagSpec> = { help: { type: 'boolean', short: 'h' } };

export async function runCommand(spec: CommandSpec, argv: string[], body: (args: ParsedArgs) => Promise<number>): Promise<number> {
  const own = argv.indexOf('--') === -1 ? argv : argv.slice(0, argv.indexOf('--'));
  if (own.includes('--help') || own.includes('-h')) {
    process.stdout.write(`usage: ${spec.synopsis}\n\n${spec.help.trimEnd()}\n`);
    return EXIT.OK;
  }
  try {
    return await body(parseArgs(argv, { ...spec.flags, ...helpFlag }));
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`pgfence ${spec.name}: ${err.message}\nusage: ${spec.synopsis}\nRun 'pgfence ${spec.name} --help' for the options.\n`);
      return EXIT.USAGE;
    }
    process.stderr.write(`pgfence ${spec.name}: ${errorText(err)}\n`);
    return EXIT.FAILURE;
  }
}

/** No positionals expected. */
export function noPositionals(args: ParsedArgs): void {
  if (args.positionals.length > 0) throw new UsageError(`unexpected argument "${args.positionals[0]}"`);
  if (args.rest !== null) throw new UsageError('unexpected "--": this command runs no child command');
}
