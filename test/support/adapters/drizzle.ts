import { eq, sql } from 'drizzle-orm';
import { drizzle as drizzleNodePostgres } from 'drizzle-orm/node-postgres';
import { integer, type PgDatabase, type PgQueryResultHKT, pgTable, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import * as d from '../../../src/adapters/drizzle/index.js';
import { installedVersion } from '../versions.js';
import type { AdapterClient, AdapterUnderTest } from './adapter.js';

/** conformance_items as a drizzle table: keys that differ from the SQL names, so that the mapping is exercised. */
export const conformanceItems = pgTable('conformance_items', {
  id: integer('id').primaryKey(),
  label: text('label'),
  n: integer('n').notNull().default(0),
  fencingToken: d.fencingToken(),
  version: d.versionColumn(),
});

type Db = PgDatabase<PgQueryResultHKT, Record<string, never>>;
type Tx = d.DrizzleTransaction;

const installed = (name: string) => `${name} ${installedVersion(name).join('.')}`;

/** The driver-independent part: pgfence/drizzle on drizzle's own transaction (db.transaction(async (tx) => ...)). */
function client(db: Db, close: () => Promise<void>): AdapterClient {
  return {
    transaction: (fn) => db.transaction((tx) => fn(tx)),
    outside: () => db,
    xactLock: (tx, name, opts) => d.xactLock(tx as Tx, name, opts),
    tryXactLock: (tx, name, opts) => d.tryXactLock(tx as Tx, name, opts),
    xactLockUnchecked: (tx, name, opts) => d.xactLock(tx as Tx, name as string, opts as never),
    fencedUpdate: (tx, s) => d.fencedUpdate(tx as Tx, { table: conformanceItems, ...s }),
    async fencedClaim(tx, s) {
      const { rows, ...rest } = await d.fencedClaim(tx as Tx, { table: conformanceItems, ...s });
      return { ...rest, n: rows.map((r) => r.n) };
    },
    versionedUpdate: (tx, s) => d.versionedUpdate(tx as Tx, { table: conformanceItems, ...s }),
    fencedBuilder: (tx, s) => d.fenced((tx as Tx).update(conformanceItems).set(s.set).where(eq(conformanceItems.id, s.where.id)), s.token).execute(),
    async execute(tx, text) {
      await (tx as Tx).execute(sql.raw(text));
    },
    close,
  };
}

/** pgfence/drizzle on drizzle-orm/node-postgres over a pg.Pool. */
const drizzleNodePg: AdapterUnderTest = {
  name: 'drizzle/node-postgres',
  library: () => `${installed('drizzle-orm')} + ${installed('pg')}`,
  updateBuilder: true,
  async open(url) {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => {}); // a connection the doomed-transaction test cuts
    return client(drizzleNodePostgres(pool), () => pool.end());
  },
};

/** pgfence/drizzle on drizzle-orm/postgres-js over a postgres.js client. */
const drizzlePostgres: AdapterUnderTest = {
  name: 'drizzle/postgres-js',
  library: () => `${installed('drizzle-orm')} + ${installed('postgres')}`,
  updateBuilder: true,
  async open(url) {
    const sqlClient = postgres(url, { max: 4, onnotice: () => {} });
    return client(drizzlePostgresJs(sqlClient), () => sqlClient.end({ timeout: 5 }));
  },
};

export const adapters: AdapterUnderTest[] = [drizzleNodePg, drizzlePostgres];
