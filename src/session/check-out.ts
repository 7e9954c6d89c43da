import type pg from 'pg';
import { LockUnavailableError, setLongTimeout } from '../core/index.js';

/** A checked-out pool connection, and how to give it back (`failed`: destroy it rather than reuse it). */
export interface CheckedOut {
  readonly client: pg.PoolClient;
  release(failed?: Error | boolean): void;
}

/** What a pool hands over: a client, and how to give it back. */
type Answer = (err: Error | undefined | null, client?: pg.PoolClient, done?: (failed?: Error | boolean) => void) => void;

/**
 * pool.connect() with `onError` listening from the moment of checkout (the pool drops its own listener
 * then): a connection that ends under its first statement, or a shutdown message read in the chunk that
 * made it ready, is emitted as 'error' before a promise's continuation could add a listener, and unheard
 * that is an uncaught exception. `onError` stays until release.
 *
 * Bounded by `boundMs` whatever the pool does: a pool of the caller's without connectionTimeoutMillis
 * whose connections are all out waits for one without end, and a pool-like object may never answer at
 * all. Past the bound it rejects with LockUnavailableError; a connection that arrives later goes
 * straight back to the pool, unused. node-postgres's callback form is used, and the promise a pool-like
 * object returns instead is heeded too (whichever answers first).
 */
export function checkOut(pool: pg.Pool, onError: (err: Error) => void = () => {}, boundMs = Infinity): Promise<CheckedOut> {
  return new Promise((resolve, reject) => {
    let answered = false;
    let late = false;
    const stopTimer = setLongTimeout(() => {
      late = true;
      reject(
        new LockUnavailableError(
          `the pool gave no connection within ${Math.round(boundMs)} ms: its connections are all in use, or it cannot reach PostgreSQL ` +
            '(a pool of your own: give it connectionTimeoutMillis, and room for the locker beside your own clients)',
        ),
      );
    }, boundMs);
    const answer: Answer = (err, client, done) => {
      if (answered) return; // a pool-like object that answers both ways: the first answer counts
      answered = true;
      if (late) {
        if (client) done?.(); // nobody waits for it any more: back to the pool, unused
        return;
      }
      stopTimer();
      if (err || !client || !done) return reject(err ?? new Error('the pool gave no client'));
      client.on('error', onError);
      resolve({
        client,
        release: (failed) => {
          client.removeListener('error', onError);
          done(failed);
        },
      });
    };
    let returned: unknown;
    try {
      returned = (pool.connect as (cb: Answer) => unknown)(answer);
    } catch (err) {
      return answer(err instanceof Error ? err : new Error(String(err)));
    }
    if (typeof (returned as PromiseLike<pg.PoolClient> | undefined)?.then === 'function') {
      (returned as PromiseLike<pg.PoolClient>).then(
        (client) => answer(undefined, client, (failed) => client.release(failed)),
        (err: unknown) => answer(err instanceof Error ? err : new Error(String(err))),
      );
    }
  });
}

/** One statement on a connection checked out of `pool` (bounded as checkOut is), given back after it, as pool.query does. */
export async function queryPool<R extends pg.QueryResultRow>(pool: pg.Pool, query: pg.QueryConfig, boundMs: number): Promise<pg.QueryResult<R>> {
  const { client, release } = await checkOut(pool, undefined, boundMs);
  try {
    const result = await client.query<R>(query);
    release();
    return result;
  } catch (err) {
    release(err instanceof Error ? err : true); // as pool.query does: a connection whose statement failed is not reused
    throw err;
  }
}
