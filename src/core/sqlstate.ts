/**
 * The SQLSTATEs pgfence reacts to, and the questions it asks of a failed statement. Every check of
 * an error's code goes through here, so one code means one thing everywhere.
 */

export const SQLSTATE = {
  /** A transaction-scoped statement outside a transaction. */
  noActiveTransaction: '25P01',
  /** A statement in a transaction an earlier statement failed. */
  inFailedTransaction: '25P02',
  deadlockDetected: '40P01',
  /** The shared lock table is full ("out of shared memory"). */
  outOfSharedMemory: '53200',
  /** A lock wait cut short by lock_timeout (or a NOWAIT lock refused). */
  lockNotAvailable: '55P03',
  /** statement_timeout, or a cancel request. */
  queryCanceled: '57014',
  /** A prepared statement's name the server does not know (DISCARD ALL or DEALLOCATE by someone else). */
  invalidStatementName: '26000',
  undefinedTable: '42P01',
  undefinedColumn: '42703',
  undefinedFunction: '42883',
  invalidSchemaName: '3F000',
  /** pgfence's fencing trigger refused a write with an older token (sql/fencing.sql). */
  staleToken: 'PGF01',
  /** A key used up its fencing tokens (sql/fencing.sql). */
  tokensExhausted: 'PGF02',
} as const;

/** The error's SQLSTATE (or other string code), if it has one. */
export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

const SCHEMA_MISSING: ReadonlySet<string> = new Set([SQLSTATE.undefinedFunction, SQLSTATE.invalidSchemaName, SQLSTATE.undefinedTable]);

/** The statement needed part of pgfence's schema that is not there: its schema, a table or a function. */
export function isSchemaMissing(err: unknown): boolean {
  const code = sqlState(err);
  return code !== undefined && SCHEMA_MISSING.has(code);
}

/** The named prepared statement is not on the connection any more (DISCARD ALL, DEALLOCATE). */
export function isPreparedStatementMissing(err: unknown): boolean {
  return sqlState(err) === SQLSTATE.invalidStatementName;
}

/** A lock wait ended by lock_timeout: the lock is busy, the connection and transaction are fine. */
export function isLockNotAvailable(err: unknown): boolean {
  return sqlState(err) === SQLSTATE.lockNotAvailable;
}

/** The statement was cancelled (statement_timeout or a cancel request). */
export function isQueryCanceled(err: unknown): boolean {
  return sqlState(err) === SQLSTATE.queryCanceled;
}

/**
 * The end of the connection, rather than a failed statement on a live one: anything that is not a
 * server error (socket errors, "Connection terminated", timeouts), connection exceptions (08xxx),
 * operator intervention (57Pxx: shutdown, terminated backend) and FATAL or PANIC errors.
 */
export function isConnectionLost(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return true;
  const e = err as { code?: unknown; severity?: unknown };
  if (typeof e.severity !== 'string') return true;
  const code = typeof e.code === 'string' ? e.code : '';
  return code.startsWith('08') || code.startsWith('57P') || e.severity === 'FATAL' || e.severity === 'PANIC';
}
