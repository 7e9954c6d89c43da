/**
 * Where the database is, for every subcommand, as psql finds it: --database-url (a URL or libpq
 * keyword/value settings), else DATABASE_URL, else the PG* environment (PGHOST, PGPORT, PGUSER,
 * PGDATABASE, PGPASSWORD; PGSSLMODE applies to all three).
 */

import { InvalidArgumentError } from '../core/index.js';
import { hasLibpqEnv, resolveConnectionString } from '../session/index.js';
import { type FlagSpec, type ParsedArgs, stringFlag, UsageError } from './args.js';

export const databaseFlag: Record<string, FlagSpec> = { 'database-url': { type: 'string' } };

/** The --database-url line of a command's options, its description starting at `column`. */
export function databaseHelp(column: number): string {
  const pad = ' '.repeat(column);
  return [
    `${'  --database-url <url>'.padEnd(column)}a URL or keyword/value settings (host=db dbname=app)`,
    `${pad}(default: DATABASE_URL, else PGHOST, PGPORT, PGUSER,`,
    `${pad}PGDATABASE and PGPASSWORD, as psql reads them)`,
  ].join('\n');
}

export type DatabaseSource = '--database-url' | 'DATABASE_URL' | 'the PG* environment';

/** Where the database comes from, or null when nothing names one. */
export function databaseSource(args: ParsedArgs, env: NodeJS.ProcessEnv = process.env): DatabaseSource | null {
  if (stringFlag(args, 'database-url') !== undefined) return '--database-url';
  if (env.DATABASE_URL?.trim()) return 'DATABASE_URL';
  if (hasLibpqEnv(env)) return 'the PG* environment';
  return null;
}

/** The database as one URL (keyword/value settings and the PG* environment turned into one). */
export function databaseUrl(args: ParsedArgs, env: NodeJS.ProcessEnv = process.env): string {
  const source = databaseSource(args, env);
  if (source === null) {
    throw new UsageError('no database: pass --database-url <url>, or set DATABASE_URL, or PGHOST/PGDATABASE/... as for psql');
  }
  const given = source === '--database-url' ? stringFlag(args, 'database-url')! : source === 'DATABASE_URL' ? env.DATABASE_URL! : undefined;
  if (given !== undefined && given.trim() === '') throw new UsageError(`${source} must not be empty`);
  try {
    return resolveConnectionString(given, env);
  } catch (err) {
    if (!(err instanceof InvalidArgumentError)) throw err;
    throw new UsageError(
      `${source}: expected a URL such as postgres://user@host:5432/database or settings such as "host=db dbname=app": ` +
        `${err.message.replace(/^connectionString: /, '')}`,
    );
  }
}
