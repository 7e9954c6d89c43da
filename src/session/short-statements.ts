import type pg from 'pg';
import { isPreparedStatementMissing, type SqlExecutor } from '../core/index.js';
import { checkOut, queryPool } from './check-out.js';
import type { ConnectionSource } from './connection-source.js';
import type { SessionPool } from './session-pool.js';
import { backendPidSql } from './session-sql.js';

/** A statement with a name of its own: prepared once per connection, where that is safe. */
interface NamedStatement {
  readonly name: string;
  readonly text: string;
}

/**
 * Statements that hold nothing on their connection (lease statements, the name registry, inspect): on
 * the locker's home session, so that they need no connection of their own, or through the pool behind
 * a transaction pooler (pinned sessions refused, or pinned through directConnectionString). Each goes in order with the lock operations on
 * home, as a statement of its own (named ones prepared once per session).
 */
export class ShortStatements implements Pick<SqlExecutor, 'query'> {
  constructor(
    private readonly source: ConnectionSource,
    private readonly sessions: SessionPool,
  ) {}

  run<R extends pg.QueryResultRow>(statement: NamedStatement | string, values: unknown[]): Promise<R[]> {
    // Behind a pooler (refused, or a directConnectionString for the pinned sessions): the pooler serves them, pinning nothing.
    if (this.source.refusal || this.source.pinVia === 'directConnectionString') return this.viaPool<R>(statement, values);
    let home;
    try {
      home = this.sessions.home();
    } catch (err) {
      return Promise.reject(err);
    }
    // Prepared only where one connection is one backend for sure; behind a pooler (even one that looked like a session
    // pool) unnamed, which a lone statement in its own transaction needs nothing more than.
    const text = typeof statement === 'string' ? statement : () => (this.source.pinning === 'direct' ? statement : statement.text);
    return home.statement<R>(text, values).catch((err: unknown) => {
      // The first connection found a transaction pooler: this statement (and every later one) goes through the pool.
      if (this.source.refusal || this.source.pinVia === 'directConnectionString') return this.viaPool<R>(statement, values);
      throw err;
    });
  }

  query<R>(text: string, values: unknown[] = []): Promise<R[]> {
    return this.run<pg.QueryResultRow>(text, values) as Promise<R[]>;
  }

  private async viaPool<R extends pg.QueryResultRow>(statement: NamedStatement | string, values: unknown[]): Promise<R[]> {
    const { pool, connectTimeoutMs } = this.source;
    if (typeof statement !== 'string') return runStatement<R>(pool, statement, values, connectTimeoutMs);
    return (await queryPool<R>(pool, { text: statement, values }, connectTimeoutMs)).rows;
  }
}

/**
 * Pools known to reach PostgreSQL directly (true) or through a proxy (false), or being checked.
 * Behind a transaction pooler a statement prepared on one server connection is unknown to the next,
 * so there every statement is sent unnamed (parsed each time).
 */
const direct = new WeakMap<pg.Pool, boolean | Promise<boolean>>();

/**
 * Runs a statement on `pool`: named (no Parse after its first use on a connection) when the pool's
 * connections go straight to PostgreSQL, else unnamed. A lease cycle is two such statements. Each
 * check-out waits at most `connectMs` (see checkOut).
 */
export async function runStatement<R extends pg.QueryResultRow>(pool: pg.Pool, statement: NamedStatement, values: unknown[], connectMs: number): Promise<R[]> {
  let named = direct.get(pool);
  if (named === undefined) {
    named = isDirect(pool, connectMs);
    direct.set(pool, named);
    named.then(
      (answer) => direct.set(pool, answer), // later statements go out without waiting for a promise
      () => direct.delete(pool), // unreachable now: ask again next time
    );
  }
  if (typeof named !== 'boolean') named = await named;
  if (!named) return (await queryPool<R>(pool, { text: statement.text, values }, connectMs)).rows;
  try {
    return (await queryPool<R>(pool, { name: statement.name, text: statement.text, values }, connectMs)).rows;
  } catch (err) {
    // The prepared statement is gone (DISCARD ALL or DEALLOCATE by someone else): unnamed from now on.
    if (!isPreparedStatementMissing(err)) throw err;
    direct.set(pool, false);
    return (await queryPool<R>(pool, { text: statement.text, values }, connectMs)).rows;
  }
}

/** PostgreSQL reports its backend's pid when a connection starts; a proxy reports a key of its own. */
async function isDirect(pool: pg.Pool, connectMs: number): Promise<boolean> {
  const { client, release } = await checkOut(pool, undefined, connectMs);
  try {
    const { rows } = await client.query<{ pid: number }>(backendPidSql);
    release();
    return rows[0]!.pid === (client as { processID?: number | null }).processID;
  } catch (err) {
    release(err instanceof Error ? err : true);
    throw err;
  }
}
