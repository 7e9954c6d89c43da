import { InvalidArgumentError, isConnectionLost, LockUnavailableError, PgfenceError, sqlState, SQLSTATE, StaleTokenError, TransactionAbortedError } from '../core/index.js';
import { DEFAULT_VERSION_COLUMN, fencingColumnSql, versionColumnSql } from './column-sql.js';
import { DEFAULT_FENCING_COLUMN } from './identifiers.js';

/** The guarded statement that failed, as its caller asked for it (the spec passed validation). */
export interface GuardedCall {
  call: 'fencedUpdate' | 'fencedClaim' | 'fenced' | 'versionedUpdate' | 'versioned';
  table: string;
  column?: string;
  /** The holder's token (fenced calls; versioned ones compare a version instead). */
  token?: bigint;
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
  if (code === SQLSTATE.staleToken && c.token !== undefined) {
    const stale = new StaleTokenError(c.token, undefined, message);
    (stale as { cause?: unknown }).cause = err;
    return stale;
  }
  if (isConnectionLost(err)) return new LockUnavailableError(`${c.call} on ${table}: the connection failed: ${message}`, { cause: err });
  // An earlier statement failed the caller's transaction: nothing was written, the transaction must be rolled back.
  if (code === SQLSTATE.inFailedTransaction) return new TransactionAbortedError({ cause: err });
  const versioned = c.call === 'versionedUpdate' || c.call === 'versioned';
  const column = c.column ?? (versioned ? DEFAULT_VERSION_COLUMN : DEFAULT_FENCING_COLUMN);
  const missingColumn = code === SQLSTATE.undefinedColumn ? /column "([^"]+)"/.exec(message)?.[1] : undefined;
  if (missingColumn === column) {
    const options = c.column === undefined ? undefined : { column: c.column };
    const add = versioned ? versionColumnSql(c.table, options) : fencingColumnSql(c.table, options);
    const [helper, migration] = versioned ? ['versionColumnSql(table)', 'addVersionColumn(db, table)'] : ['fencingColumnSql(table)', 'addFencingColumn(db, table)'];
    return new PgfenceError(
      'PGFENCE_NOT_MIGRATED',
      `${c.call}: table ${table} has no ${versioned ? 'version' : 'fencing'} column "${column}": add it once with \`${add}\` ` +
        `(${helper} returns that statement; ${migration} runs it in a Kysely or Knex migration, and every other data-layer adapter offers it as its tool's migration)`,
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
