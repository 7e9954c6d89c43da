/** Transaction advisory locks (xactLock / tryXactLock) on node-postgres clients, one transaction per hold. */
import { tryXactLock, xactLock } from '../../../src/index.js';
import { driver, SESSION_SCOPED, type KindAdapter, statementGuardMs, transactionHold, transactionPool } from './kind.js';

export const xactPg: KindAdapter = {
  kind: 'xact-pg',
  turn: 'kept',
  family: 'xact',
  modes: ['exclusive', 'shared'],
  supports: { try: true, abort: true, renew: false },
  tokens: true,
  ...SESSION_SCOPED,
  closeEndsConnection: true,
  open: async (ctx) => {
    const pool = transactionPool(ctx.url, statementGuardMs(ctx.keepaliveMs));
    /** The clients of transactions still open: a close ends them (pool.end() waits for every checked-out client). */
    const open = new Set<() => void>();
    let closed = false;
    return {
      acquire: async ({ name, mode, timeoutMs, signal, started }) => {
        const client = await driver(() => pool.connect());
        // A connect that lands after close() (it was stuck behind a blackhole) must not keep pool.end() waiting.
        if (closed) {
          client.release(true);
          return driver(() => Promise.reject(new Error('the actor closed while this call connected')));
        }
        let done = false;
        const finish = (broken: boolean) => {
          if (done) return;
          done = true;
          open.delete(abandon);
          client.release(broken);
        };
        const abandon = () => finish(true);
        open.add(abandon);
        try {
          await driver(() => client.query('BEGIN'));
          const opts = { mode, signal, fencing: mode === 'exclusive' };
          started();
          const result = timeoutMs === null ? await tryXactLock(client, name, opts) : await xactLock(client, name, { ...opts, timeoutMs });
          if (!result) {
            await driver(() => client.query('ROLLBACK'));
            finish(false);
            return null;
          }
          return transactionHold(result.token, {
            ping: () => client.query('SELECT 1'),
            commit: async () => {
              try {
                await client.query('COMMIT');
                finish(false);
              } catch (err) {
                finish(true);
                throw err;
              }
            },
            rollback: async () => finish(true),
            write: (write) => write({ pg: client }),
          });
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          finish(true);
          throw err;
        }
      },
      close: async () => {
        closed = true;
        for (const abandon of open) abandon();
        await pool.end();
      },
    };
  },
};
