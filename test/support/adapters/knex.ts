import { knex as createKnex, type Knex } from 'knex';
import * as k from '../../../src/adapters/knex/index.js';
import type { AdapterClient, AdapterUnderTest } from './adapter.js';
import { installed } from './node-postgres-kysely.js';

/** The conformance table, declared to Knex as a user declares theirs: pgfence/knex's specs are typed from it. */
export interface ConformanceItem {
  id: number;
  label: string | null;
  n: number;
  fencing_token: string | null;
  version: string;
}
declare module 'knex/types/tables.js' {
  interface Tables {
    conformance_items: ConformanceItem;
  }
}

/** pgfence/knex on Knex's own transaction object (knex.transaction(async (trx) => ...)), with the 'pg' client. */
const knexAdapter: AdapterUnderTest = {
  name: 'knex',
  library: () => installed('knex'),
  updateBuilder: true,
  async open(url) {
    const db: Knex = createKnex({ client: 'pg', connection: url, pool: { min: 0, max: 4 } });
    const client: AdapterClient = {
      transaction: (fn) => db.transaction((trx) => fn(trx)),
      outside: () => db,
      xactLock: (tx, name, opts) => k.xactLock(tx as Knex.Transaction, name, opts),
      tryXactLock: (tx, name, opts) => k.tryXactLock(tx as Knex.Transaction, name, opts),
      xactLockUnchecked: (tx, name, opts) => k.xactLock(tx as Knex.Transaction, name as string, opts as never),
      fencedUpdate: (tx, s) => k.fencedUpdate(tx as Knex.Transaction, { table: 'conformance_items', ...s }),
      async fencedClaim(tx, s) {
        const { rows, ...rest } = await k.fencedClaim(tx as Knex.Transaction, { table: 'conformance_items', ...s });
        return { ...rest, n: rows.map((r) => r.n) };
      },
      versionedUpdate: (tx, s) => k.versionedUpdate(tx as Knex.Transaction, { table: 'conformance_items', ...s }),
      fencedBuilder: (tx, s) => k.fenced((tx as Knex.Transaction)('conformance_items').where(s.where).update(s.set), s.token).execute(),
      async execute(tx, text) {
        await (tx as Knex.Transaction).raw(text);
      },
      close: () => db.destroy(),
    };
    return client;
  },
};

export const adapters: AdapterUnderTest[] = [knexAdapter];
