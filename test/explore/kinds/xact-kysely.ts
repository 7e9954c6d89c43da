/** Transaction advisory locks through pgfence/kysely, in Kysely controlled transactions, one per hold. */
import { Kysely, PostgresDialect, sql } from 'kysely';
import type pg from 'pg';
import * as kyselyLocks from '../../../src/adapters/kysely/index.js';
import { driver, SESSION_SCOPED, type KindAdapter, statementGuardMs, transactionHold, transactionPool } from './kind.js';

export const xactKysely: KindAdapter = {
  kind: 'xact-kysely',
  turn: 'kept',
  family: 'xact',
  modes: ['exclusive', 'shared'],
  supports: { try: true, abort: true, renew: false },
  tokens: true,
  ...SESSION_SCOPED,
  closeEndsConnection: true,
  open: async (ctx) => {
    const pool = transactionPool(ctx.url, statementGuardMs(ctx.keepaliveMs));
    const checkedOut = new Set<pg.PoolClient>();
    pool.on('acquire', (client) => checkedOut.add(client));
    pool.on('release', (_err, client) => checkedOut.delete(client));
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
    /** Transactions still open: a close ends their connections and rolls them back (db.destroy() waits for them). */
    const open = new Set<{ rollback(): { execute(): Promise<void> } }>();
    return {
      acquire: async ({ name, mode, timeoutMs, signal, started }) => {
        const trx = await driver(() => db.startTransaction().execute());
        open.add(trx);
        try {
          const opts = { mode, signal, fencing: mode === 'exclusive' };
          started();
          const result = timeoutMs === null ? await kyselyLocks.tryXactLock(trx, name, opts) : await kyselyLocks.xactLock(trx, name, { ...opts, timeoutMs });
          if (!result) {
            open.delete(trx);
            await driver(() => trx.rollback().execute());
            return null;
          }
          return transactionHold(result.token, {
            ping: () => sql`SELECT 1`.execute(trx),
            commit: () => (open.delete(trx), trx.commit().execute()),
            rollback: () => (open.delete(trx), trx.rollback().execute()),
            write: (write) => write({ kysely: trx }),
          });
        } catch (err) {
          open.delete(trx);
          await trx.rollback().execute().catch(() => {});
          throw err;
        }
      },
      close: async () => {
        for (const client of checkedOut) client.end().catch(() => {});
        await Promise.all([...open].map((trx) => trx.rollback().execute().catch(() => {})));
        await db.destroy();
      },
    };
  },
};
