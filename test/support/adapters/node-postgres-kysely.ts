import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { fencedClaim, fencedUpdate, tryXactLock, versionedUpdate, xactLock } from '../../../src/index.js';
import * as k from '../../../src/adapters/kysely/index.js';
import { installedVersion } from '../versions.js';
import type { AdapterClient, AdapterUnderTest } from './adapter.js';

/** `name version` of an installed package, for the matrix. */
export function installed(name: string): string {
  return `${name} ${installedVersion(name).join('.')}`;
}

/** The baseline: pgfence's root export on a node-postgres client inside BEGIN ... COMMIT. */
const nodePostgres: AdapterUnderTest = {
  name: 'node-postgres',
  library: () => installed('pg'),
  async open(url) {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {}); // a connection the doomed-transaction test cuts
    const client: AdapterClient = {
      async transaction(fn) {
        const c = await pool.connect();
        c.on('error', () => {}); // reported through the failing statement
        let broken = false;
        try {
          await c.query('BEGIN');
          const value = await fn(c);
          await c.query('COMMIT');
          return value;
        } catch (err) {
          await c.query('ROLLBACK').catch(() => (broken = true)); // an ended client cannot roll back: discard it
          throw err;
        } finally {
          c.release(broken);
        }
      },
      outside: () => pool,
      xactLock: (tx, name, opts) => xactLock(tx as pg.PoolClient, name, opts),
      tryXactLock: (tx, name, opts) => tryXactLock(tx as pg.PoolClient, name, opts),
      xactLockUnchecked: (tx, name, opts) => xactLock(tx as pg.PoolClient, name as string, opts as never),
      fencedUpdate: (tx, s) => fencedUpdate(tx as pg.PoolClient, { table: 'conformance_items', ...s }),
      async fencedClaim(tx, s) {
        const { rows, ...rest } = await fencedClaim<{ n: number }>(tx as pg.PoolClient, { table: 'conformance_items', ...s });
        return { ...rest, n: rows.map((r) => r.n) };
      },
      versionedUpdate: (tx, s) => versionedUpdate(tx as pg.PoolClient, { table: 'conformance_items', ...s }),
      async execute(tx, text) {
        await (tx as pg.PoolClient).query(text);
      },
      close: () => pool.end(),
    };
    return client;
  },
};

interface Items {
  conformance_items: { id: number; label: string | null; n: number; fencing_token: string | null; version: string };
}
type KTx = k.AnyKysely & Kysely<Items>;

/** pgfence/kysely on Kysely's own transaction (db.transaction().execute). */
const kysely: AdapterUnderTest = {
  name: 'kysely',
  library: () => installed('kysely'),
  updateBuilder: true,
  async open(url) {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {}); // a connection the doomed-transaction test cuts
    const db = new Kysely<Items>({ dialect: new PostgresDialect({ pool }) });
    const client: AdapterClient = {
      transaction: (fn) => db.transaction().execute((trx) => fn(trx)),
      outside: () => db,
      xactLock: (tx, name, opts) => k.xactLock(tx as KTx, name, opts),
      tryXactLock: (tx, name, opts) => k.tryXactLock(tx as KTx, name, opts),
      xactLockUnchecked: (tx, name, opts) => k.xactLock(tx as KTx, name as string, opts as never),
      fencedUpdate: (tx, s) => k.fencedUpdate(tx as Kysely<Items>, { table: 'conformance_items', ...s }),
      async fencedClaim(tx, s) {
        const { rows, ...rest } = await k.fencedClaim(tx as Kysely<Items>, { table: 'conformance_items', ...s });
        return { ...rest, n: rows.map((r) => r.n) };
      },
      versionedUpdate: (tx, s) => k.versionedUpdate(tx as Kysely<Items>, { table: 'conformance_items', ...s }),
      fencedBuilder: (tx, s) =>
        k.fenced((tx as Kysely<Items>).updateTable('conformance_items').set(s.set).where('id', '=', s.where.id), s.token).execute(),
      async execute(tx, text) {
        await sql.raw(text).execute(tx as Kysely<Items>);
      },
      close: () => db.destroy(),
    };
    return client;
  },
};

export const adapters: AdapterUnderTest[] = [nodePostgres, kysely];
