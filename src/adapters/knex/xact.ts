/**
 * A Knex transaction as xactLock talks to it (the shared seam's executor, see shared/transaction.ts):
 *
 * - Identity: Knex makes a new transaction object per transaction, and per savepoint (trx.transaction());
 *   the outermost one stands for them all, so a name the transaction holds is nested in its savepoints.
 * - Database: the Knex instance's config object, which every transaction's client shares (a transaction
 *   has a client of its own, a copy made with the same config).
 * - Status without I/O: `isTransaction`, and `isCompleted()` (committed, rolled back, or its outer
 *   transaction finished: Knex refuses its statements).
 * - No answer from PostgreSQL: the transaction's connection is ended (see discardConnection).
 */
import type { Knex } from 'knex';
import type { XactExecutor } from '../../advisory/index.js';
import { libraryXactExecutor } from '../shared/index.js';
import type { AnyKnex } from './raw.js';
import { knexSqlExecutor } from './sql-executor.js';

export function knexXactExecutor(trx: AnyKnex): XactExecutor {
  const sql = knexSqlExecutor(trx, 'trx', 'a Knex transaction');
  const t = trx as unknown as Partial<Knex.Transaction>;
  return libraryXactExecutor({
    sql,
    identity: outermost(t),
    database: trx.client.config as object,
    perTransaction: true,
    status: () => (t.isTransaction === true && typeof t.isCompleted === 'function' && !t.isCompleted() ? 'active' : 'idle'),
    rollbackAdvice: "knex.transaction() rejects (Knex's ROLLBACK fails on the ended connection, and its pool discards it)",
    endConnection: () => discardConnection(trx),
  });
}

/**
 * When PostgreSQL does not answer, the shared executor dooms the transaction with a statement queued
 * behind the unanswered one. Knex does not queue a transaction's statements itself: that statement, and
 * whatever the caller sends after it, would pile up in node-postgres' own queue, which pg 9 removes (pg 8
 * warns about it). So the transaction's connection is ended instead, as pgfence does with a node-postgres
 * client: every later statement fails at once (Knex's ROLLBACK too, so knex.transaction() rejects with
 * node-postgres' "not queryable" error), the server rolls the transaction back when it sees the
 * connection go, and Knex's pool drops the connection instead of reusing it.
 */
async function discardConnection(trx: AnyKnex): Promise<void> {
  const client = trx.client as { acquireConnection(): Promise<KnexConnection> };
  // A transaction's client hands back the transaction's own connection; the pg Client is ended before the
  // caller hears of the failure (this runs one microtask later, the rejection reaches the caller after more).
  const connection = await client.acquireConnection();
  connection.__knex__disposed = 'pgfence: PostgreSQL did not answer a transaction lock statement in time';
  await connection.end();
}

/** The node-postgres Client under a Knex transaction, with the flag Knex's pool reads to drop a connection. */
interface KnexConnection {
  __knex__disposed?: unknown;
  end(): Promise<void>;
}

function outermost(trx: Partial<Knex.Transaction>): object {
  let t = trx;
  while (t.parentTransaction) t = t.parentTransaction;
  return t;
}
