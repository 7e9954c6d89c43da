/** Where the database is: --database-url, else DATABASE_URL. Shared by every subcommand. */

import type { FlagSpec, ParsedArgs } from './args.js';
import { UsageError, stringFlag } from './args.js';

export const databaseFlag: Record<string, FlagSpec> = { 'database-url': { type: 'string' } };

export const databaseHelp = '  --database-url <url>  PostgreSQL URL (default: the DATABASE_URL environment variable)';

export function databaseUrl(args: ParsedArgs, env: NodeJS.ProcessEnv = process.env): string {
  const url = stringFlag(args, 'database-url') ?? (env.DATABASE_URL?.trim() ? env.DATABASE_URL : undefined);
  if (url === undefined) throw new UsageError('no database: pass --database-url <url> or set DATABASE_URL');
  if (url.trim() === '') throw new UsageError('--database-url must not be empty');
  // node-postgres reads URLs (and socket paths); anything else would quietly become some other host.
  if (!url.startsWith('/')) {
    try {
      new URL(url);
    } catch {
      const from = stringFlag(args, 'database-url') === undefined ? 'DATABASE_URL' : '--database-url';
      throw new UsageError(`${from}: expected a URL such as postgres://user@host:5432/database, got "${redactUrl(url)}"`);
    }
  }
  return url;
}

/**
 * The URL with an application_name (shown by `pgfence status` and pg_stat_activity) unless it
 * already has one; connection strings that are not URLs are left as they are.
 */
export function withApplicationName(url: string, applicationName: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  if (u.searchParams.has('application_name')) return url;
  // PostgreSQL keeps 63 bytes of it.
  let name = applicationName;
  while (Buffer.byteLength(name) > 63) name = name.slice(0, -1);
  u.searchParams.set('application_name', name);
  return u.toString();
}

/** The URL without its password, for messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url.replace(/password=\S+/gi, 'password=***');
  }
}
