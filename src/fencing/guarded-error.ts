import { InvalidArgumentError, isConnectionLost, LockUnavailableError, PgfenceError, sqlState, SQLSTATE, StaleTokenError } from '../core/index.js';
import { fencingColumnSql } from './fencing-column.js';
import { DEFAULT_FENCING_COLUMN } from './identifiers.js';

/** The guarded statement that failed, as its caller asked for it (the spec passed validation). */
export interface GuardedCall {
  call: 'fencedUpdate' | 'fencedClaim';
  table: string;
  column?: string;
  token: bigint;
  set?: Record<string, unknown>;
  where: Record<string, unknown>;
}

/**
 * What a guarded statement's failure means to its caller, as a PgfenceError carrying the driver's error
 * as its cause: a newer token refused by the enforcing trigger (StaleTokenError); a table without its
 * fencing column (PGFENCE_NOT_MIGRATED, with the statement that adds it); a table or column that does
 * not exist (InvalidArgumentError naming the argument); a connection that failed, or any other refusal
 * (LockUnavailableError, with the SQLSTATE).
 */
export function guardedWriteError(err: unknown, c: GuardedCall): PgfenceError {
  if (err instanceof PgfenceError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const code = sqlState(err);
  const table = `"${c.table}"`;
  if (code === SQLSTATE.staleToken) {
    const stale = new StaleTokenError(c.token, undefined, message);
    (stale as { cause?: unknown }).cause = err;
    return stale;
  }
  if (isConnectionLost(err)) return new LockUnavailableError(`${c.call} on ${table}: the connection failed: ${message}`, { cause: err });
  const column = c.column ?? DEFAULT_FENCING_COLUMN;
  const missingColumn = code === SQLSTATE.undefinedColumn ? /column "([^"]+)"/.exec(message)?.[1] : undefined;
  if (missingColumn === column) {
    const add = fencingColumnSql(c.table, c.column === undefined ? undefined : { column: c.column });
    return new PgfenceError(
      'PGFENCE_NOT_MIGRATED',
      `${c.call}: table ${table} has no fencing column "${column}": add it once with \`${add}\` ` +
        '(fencingColumnSql(table) returns that statement; addFencingColumn(db, table) runs it in a Kysely migration)',
      { cause: err },
    );
  }
  if (code === SQLSTATE.undefinedTable) return new InvalidArgumentError('table', `${c.call}: no table ${table} in the database (${message})`, { cause: err });
  if (missingColumn !== undefined) {
    const argument = c.set && missingColumn in c.set ? `set.${missingColumn}` : missingColumn in c.where ? `where.${missingColumn}` : 'table';
    return new InvalidArgumentError(argument, `${c.call}: table ${table} has no column "${missingColumn}" (${message})`, { cause: err });
  }
  return new LockUnavailableError(`${c.call} on ${table} failed${code ? ` (SQLSTATE ${code})` : ''}: ${message}`, { cause: err });
}
