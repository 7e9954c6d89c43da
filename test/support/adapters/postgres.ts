import postgres from 'postgres';
import * as p from '../../../src/adapters/postgres/index.js';
import { installedVersion } from '../versions.js';
import type { AdapterClient, AdapterUnderTest } from './adapter.js';

/** `postgres 3.4.10`: its exports map does not export its package.json, so it is read from the file. */
const library = () => `postgres ${installedVersion('postgres').join('.')}`;

/** A postgres.js instance on `url` that keeps quiet about notices (IF NOT EXISTS and the like). */
const instance = (url: string) => postgres(url, { max: 4, onnotice: () => {} });

/** Everything but the transaction: the adapter's calls on whatever object the transaction is. */
function calls(sql: postgres.Sql): Omit<AdapterClient, 'transaction'> {
  return {
    outside: () => sql,
    xactLock: (tx, name, opts) => p.xactLock(tx as p.PostgresTransaction, name, opts),
    tryXactLock: (tx, name, opts) => p.tryXactLock(tx as p.PostgresTransaction, name, opts),
    xactLockUnchecked: (tx, name, opts) => p.xactLock(tx as p.PostgresTransaction, name as string, opts as never),
    fencedUpdate: (tx, s) => p.fencedUpdate(tx as p.AnySql, { table: 'conformance_items', ...s }),
    async fencedClaim(tx, s) {
      const { rows, ...rest } = await p.fencedClaim<{ n: number }>(tx as p.AnySql, { table: 'conformance_items', ...s });
      return { ...rest, n: rows.map((r) => r.n) };
    },
    versionedUpdate: (tx, s) => p.versionedUpdate(tx as p.AnySql, { table: 'conformance_items', ...s }),
    async execute(tx, text) {
      await (tx as p.AnySql).unsafe(text);
    },
    close: () => sql.end({ timeout: 5 }),
  };
}

/** pgfence/postgres on postgres.js's own transaction (sql.begin). */
const begin: AdapterUnderTest = {
  name: 'postgres.js',
  library,
  async open(url) {
    const sql = instance(url);
    return {
      transaction: <T>(fn: (tx: unknown) => Promise<T>) => sql.begin((tx) => fn(tx)) as Promise<T>,
      ...calls(sql),
    };
  },
};

/** pgfence/postgres on a reserved connection, in a transaction the caller opened with BEGIN. */
const reserved: AdapterUnderTest = {
  name: 'postgres.js/reserve',
  library,
  async open(url) {
    const sql = instance(url);
    return {
      async transaction<T>(fn: (tx: unknown) => Promise<T>) {
        const r = await sql.reserve();
        try {
          await r.unsafe('BEGIN');
          const value = await fn(r);
          await r.unsafe('COMMIT');
          return value;
        } catch (err) {
          await r.unsafe('ROLLBACK').catch(() => {}); // a connection that broke has nothing left to roll back
          throw err;
        } finally {
          r.release();
        }
      },
      ...calls(sql),
    };
  },
};

/** The conformance drivers of pgfence/postgres. */
export const adapters: AdapterUnderTest[] = [begin, reserved];
