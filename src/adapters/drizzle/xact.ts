import type { XactExecutor } from '../../advisory/index.js';
import { type LibraryTransaction, libraryXactExecutor, libraryXactExecutorInSavepoints } from '../shared/index.js';
import { dialectOf, hasEntityKind, nodePostgresClientOf } from './internals.js';
import { type DrizzleTransaction, drizzleSqlExecutor } from './sql-executor.js';

/**
 * A drizzle transaction as xactLock talks to it.
 *
 * - Identity (which transaction holds which keys): the tx object, new per transaction and per savepoint
 *   (`tx.transaction` inside it), on both drivers. A name taken twice through one tx is refused with
 *   NestedLockError. A savepoint is a tx of its own: a name its enclosing transaction holds is taken
 *   again there (PostgreSQL's lock is re-entrant), and a name taken in a savepoint that rolled back (which
 *   released it) can be taken again. (postgres.js gives the levels nothing in common to key them by; on
 *   node-postgres the connection would be, but keyed by it a retry after a savepoint's rollback would be
 *   refused as nested.)
 * - Database: drizzle()'s dialect, one per drizzle instance and shared by its transactions.
 * - Status without I/O: a PgTransaction is in a transaction; a drizzle database is not (a pool would run
 *   each statement on any connection, in autocommit).
 * - postgres.js rolls back a transaction in which any statement failed, even one caught: the waits
 *   run in drizzle savepoints (see shared/savepoint-scripts.ts).
 * - When PostgreSQL stops answering, the transaction must take nothing more. postgres.js queues a failing
 *   statement right behind the unanswered one; node-postgres would only queue it by a deprecated path
 *   (gone in pg 9), so there the connection is ended, as xactLock does on a node-postgres client.
 */
export function drizzleXactExecutor(tx: DrizzleTransaction): XactExecutor {
  const sql = drizzleSqlExecutor(tx, 'tx', 'a drizzle transaction (the tx of db.transaction(async (tx) => ...))');
  const inTransaction = hasEntityKind(tx, 'PgTransaction');
  const session = (tx as { _?: { session?: object } })._?.session ?? tx;
  const postgresJs = hasEntityKind(session, 'PostgresJsSession');
  const pgClient = nodePostgresClientOf(session);
  const t: LibraryTransaction = {
    sql,
    identity: tx,
    database: dialectOf(tx) ?? tx,
    perTransaction: true,
    status: () => (inTransaction ? 'active' : 'idle'),
    rollbackAdvice: pgClient
      ? 'let the error leave the db.transaction() callback (drizzle’s ROLLBACK then fails as well, and a pool drops the connection)'
      : 'let the error leave the db.transaction() callback so drizzle rolls it back',
    ...(pgClient ? { endConnection: () => pgClient.end() } : {}),
  };
  if (!postgresJs) return libraryXactExecutor(t);
  return libraryXactExecutorInSavepoints(t, (script) => tx.transaction((savepoint) => drizzleSqlExecutor(savepoint).script(script)));
}
