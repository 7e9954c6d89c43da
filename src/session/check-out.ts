import type pg from 'pg';

/** A checked-out pool connection, and how to give it back (`failed`: destroy it rather than reuse it). */
export interface CheckedOut {
  readonly client: pg.PoolClient;
  release(failed?: Error | boolean): void;
}

/**
 * pool.connect() with `onError` listening from the moment of checkout (the pool drops its own listener
 * then): a connection that ends under its first statement, or a shutdown message read in the chunk that
 * made it ready, is emitted as 'error' before a promise's continuation could add a listener, and unheard
 * that is an uncaught exception. `onError` stays until release.
 */
export function checkOut(pool: pg.Pool, onError: (err: Error) => void = () => {}): Promise<CheckedOut> {
  return new Promise((resolve, reject) => {
    pool.connect((err, client, done) => {
      if (err || !client) return reject(err ?? new Error('no client'));
      client.on('error', onError);
      resolve({
        client,
        release: (failed) => {
          client.removeListener('error', onError);
          done(failed);
        },
      });
    });
  });
}
