/** Transaction advisory locks through pgfence/kysely, in Kysely controlled transactions, one per hold. */
import { Kysely, PostgresDialect, sql } from 'kysely';
import * as kyselyLocks from '../../../src/kysely/index.js';
import { detectionBoundMs, driver, type KindAdapter, transactionHold, transactionPool } from './kind.js';
import { STATEMENT_GUARD_MS } from './xact-pg.js';

export const xactKysely: KindAdapter = {
  kind: 'xact-kysely',
  family: 'xact',
  modes: ['exclusive', 'shared'],
  supports: { try: true, abort: true, renew: false },
  tokens: true,
  lossWindowMs: detectionBoundMs,
  destroyedBy: ['backend-kill', 'restart'],
  open: async (ctx) => {
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: transactionPool(ctx.url, STATEMENT_GUARD_MS) }) });
    return {
      acquire: async ({ name, mode, timeoutMs, signal }) => {
        const trx = await driver(() => db.startTransaction().execute());
        try {
          const opts = { mode, signal, fencing: mode === 'exclusive' };
          const result = timeoutMs === null ? await kyselyLocks.tryXactLock(trx, name, opts) : await kyselyLocks.xactLock(trx, name, { ...opts, timeoutMs });
          if (!result) {
            await driver(() => trx.rollback().execute());
            return null;
          }
          return transactionHold(result.token, {
            ping: () => sql`SELECT 1`.execute(trx),
            commit: () => trx.commit().execute(),
            rollback: () => trx.rollback().execute(),
            write: (write) => write({ kysely: trx }),
          });
        } catch (err) {
          await trx.rollback().execute().catch(() => {});
          throw err;
        }
      },
      close: () => db.destroy(),
    };
  },
};
