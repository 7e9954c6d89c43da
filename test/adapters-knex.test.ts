// pgfence/knex beyond the conformance suite (test/adapters.test.ts): Knex's own transaction shapes
// (manual, nested savepoints, finished), what Knex does to raw statements (placeholders, post-processing,
// error messages), the typed specs, the builder idiom and pgfence's schema through Knex's migrator.
import { appendFile, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { knex as createKnex, type Knex } from 'knex';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockUnavailableError, migrate, NestedLockError, NotInTransactionError, PgfenceError, tryXactLock as pgTryXactLock } from '../src/index.js';
import { addFencingColumn, addVersionColumn, dropFencingColumn, dropVersionColumn, fenced, fencedClaim, fencedUpdate, pgfenceMigrations, tryXactLock, versionedUpdate, xactLock } from '../src/adapters/knex/index.js';
import { migrationSourceFor } from '../src/adapters/knex/migrations.js';
import { knexSqlExecutor } from '../src/adapters/knex/sql-executor.js';
import type { MigrationFolders } from '../src/migrate/index.js';
import { packageFolders } from '../src/migrate/package-folders.js';
import { DEFINITION_LOG_FILE } from '../src/migrate/definition-sets.js';
import { readMigrationSet } from '../src/migrate/files.js';
import { eventually, sleep, useMigratedDatabase, useTestDatabase } from './support/db.js';
import { proxyTo } from './support/tcp-proxy.js';

interface KxOrder {
  id: number;
  status: string;
  total: number;
  paid_by: string | null;
  fencing_token: string | null;
}
interface KxDoc {
  id: number;
  body: string;
  version: string;
}
// As a user declares their tables to Knex (under NodeNext, the module is named with its .js).
declare module 'knex/types/tables.js' {
  interface Tables {
    kx_orders: KxOrder;
    kx_docs: Knex.CompositeTableType<KxDoc, Omit<KxDoc, 'version'>, { body?: string }>;
  }
}

let url: string;
let db: Knex;
let observer: pg.Pool;
const knexes: Knex[] = [];
/** A Knex of the test's own on `on` (destroyed after the file). */
const newKnex = (config: Partial<Knex.Config> = {}, on = url) => {
  const k = createKnex({ client: 'pg', connection: on, pool: { min: 0, max: 3 }, ...config });
  knexes.push(k);
  return k;
};
let nextId = 1;
async function order(token: bigint | null = null, values: Partial<KxOrder> = {}): Promise<number> {
  const id = nextId++;
  await observer.query(`INSERT INTO kx_orders (id, status, total, fencing_token) VALUES ($1, $2, $3, $4)`, [id, values.status ?? 'new', values.total ?? 0, token === null ? null : String(token)]);
  return id;
}
const orderRow = async (id: number) => (await observer.query(`SELECT status, total, paid_by, fencing_token FROM kx_orders WHERE id = $1`, [id])).rows[0];
const settled = <T>(p: Promise<T>): Promise<T | unknown> => p.then((v) => v, (e: unknown) => e);
/** A fencing token issued now (node-postgres), so tokens in a test are real ones. */
async function tokenFor(name: string): Promise<bigint> {
  const c = await observer.connect();
  try {
    await c.query('BEGIN');
    const r = await pgTryXactLock(c, name, { fencing: true });
    await c.query('COMMIT');
    return r!.token;
  } finally {
    c.release();
  }
}

beforeAll(async () => {
  url = (await useMigratedDatabase('knex')).url;
  observer = new pg.Pool({ connectionString: url, max: 3 });
  await observer.query(`CREATE TABLE kx_orders (id int PRIMARY KEY, status text NOT NULL, total int NOT NULL DEFAULT 0, paid_by text, fencing_token bigint)`);
  await observer.query(`CREATE TABLE kx_docs (id int PRIMARY KEY, body text NOT NULL, version bigint NOT NULL DEFAULT 0)`);
  db = newKnex();
});
afterAll(async () => {
  await Promise.all(knexes.map((k) => k.destroy()));
  await observer.end();
});

describe('xactLock on Knex transactions', () => {
  it('works on a transaction from `await knex.transaction()`, held until commit; a finished one is not in a transaction', async () => {
    const trx = await db.transaction();
    const { token } = await xactLock(trx, 'kx:manual', { fencing: true });
    expect(token).toBeGreaterThan(0n);
    const other = await db.transaction();
    expect(await tryXactLock(other, 'kx:manual')).toBeNull();
    await trx.commit();
    expect(await tryXactLock(other, 'kx:manual')).not.toBeNull();
    await other.rollback();
    // Committed, rolled back: refused before any statement (Knex itself would refuse it, untyped).
    for (const finished of [trx, other]) expect(await settled(xactLock(finished, 'kx:manual'))).toBeInstanceOf(NotInTransactionError);
  });

  it('savepoints (trx.transaction()) belong to their transaction: a name held there is nested, and is held until the outer commit', async () => {
    let inner: unknown;
    await db.transaction(async (trx) => {
      await xactLock(trx, 'kx:outer');
      inner = await settled(trx.transaction((sp) => xactLock(sp, 'kx:outer')));
      await trx.transaction((sp) => xactLock(sp, 'kx:in-savepoint'));
      expect(await settled(xactLock(trx, 'kx:in-savepoint'))).toBeInstanceOf(NestedLockError);
      // Released savepoint, lock kept: another transaction cannot have it until the outer one ends.
      const other = await db.transaction();
      expect(await tryXactLock(other, 'kx:in-savepoint')).toBeNull();
      await other.rollback();
    });
    expect(inner).toBeInstanceOf(NestedLockError);
  });

  it('reads the results of its own statements when the Knex post-processes results and maps identifiers (a deep camelCase mapper)', async () => {
    const camel = (s: string) => s.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    const deepCamel = (v: unknown): unknown => {
      if (Array.isArray(v)) return v.map(deepCamel);
      if (v instanceof Object && Array.isArray((v as { rows?: unknown }).rows)) return { ...v, rows: deepCamel((v as { rows: unknown }).rows) };
      if (v instanceof Object && Object.getPrototypeOf(v) === Object.prototype) return Object.fromEntries(Object.entries(v).map(([k, x]) => [camel(k), deepCamel(x)]));
      return v;
    };
    const mapped = newKnex({
      postProcessResponse: (result) => deepCamel(result),
      wrapIdentifier: (value, origImpl) => origImpl(value.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)),
    });
    const id = await order();
    await mapped.transaction(async (trx) => {
      const { token } = await xactLock(trx, 'kx:mapped', { fencing: true });
      expect(await fencedUpdate(trx, { table: 'kx_orders', set: { status: 'claimed' }, where: { id }, token })).toEqual({ applied: true, written: 1, refused: 0 });
      const claim = await fencedClaim(trx, { table: 'kx_orders', where: { id }, token });
      expect(claim.rows).toEqual([{ id, status: 'claimed', total: 0, paid_by: null, fencing_token: token }]);
      // The builder idiom in the caller's own (mapped) names.
      const r = await fenced(trx<Record<string, unknown>>('kx_orders').where({ id }).update({ paidBy: 'ann' }), token).execute();
      expect(r).toEqual({ applied: true, written: 1, refused: 0 });
      // The caller's own queries are still post-processed.
      expect(await trx('kx_orders').where({ id }).first('paid_by')).toEqual({ paidBy: 'ann' });
    });
  });
});

describe('statements through Knex', () => {
  it("sends pgfence's ? as a question mark (never a binding) and a script's $1 as written, and reads a script's results", async () => {
    await db.transaction(async (trx) => {
      const sql = knexSqlExecutor(trx);
      expect(await sql.query(`SELECT '?' AS q, $2::int AS b, $1::int AS a, '{"k":1}'::jsonb ? 'k' AS has, $1::int AS again`, [1, 2])).toEqual([{ q: '?', b: 2, a: 1, has: true, again: 1 }]);
      expect(await sql.script(`SELECT '??' AS q; SELECT 2 AS n`)).toEqual([[{ q: '??' }], [{ n: 2 }]]);
      expect(await sql.script(`SELECT 1 AS n`)).toEqual([[{ n: 1 }]]);
      // A script has no parameters: its $1 is PostgreSQL's own (a function's argument).
      expect(await sql.script(`CREATE FUNCTION pg_temp.next(int) RETURNS int LANGUAGE sql AS $f$ SELECT $1 + 1 $f$; SELECT pg_temp.next(1) AS n`)).toEqual([[], [{ n: 2 }]]);
    });
  });

  it('takes identifiers with a $ and a digit ("price$2" is a column, not a placeholder)', async () => {
    await observer.query(`CREATE TABLE "kx_dollar$1" (id int PRIMARY KEY, "amount$2" int NOT NULL)`);
    await addFencingColumn(db, 'kx_dollar$1', { column: 'token$1' });
    await observer.query(`INSERT INTO "kx_dollar$1" (id, "amount$2") VALUES (1, 0)`);
    const r = await fencedUpdate(db, { table: 'kx_dollar$1', set: { amount$2: 5 }, where: { id: 1 }, token: 3n, column: 'token$1' });
    expect(r).toEqual({ applied: true, written: 1, refused: 0 });
    expect((await observer.query(`SELECT "amount$2" AS amount, "token$1" AS token FROM "kx_dollar$1"`)).rows).toEqual([{ amount: 5, token: '3' }]);
  });

  it("fails with pgfence's typed errors carrying PostgreSQL's own error, without Knex's SQL prefix", async () => {
    const err = await settled(fencedUpdate(db, { table: 'kx_no_such_table', set: { a: 1 }, where: { id: 1 }, token: 1n }));
    expect(err).toBeInstanceOf(InvalidArgumentError);
    const cause = (err as PgfenceError).cause as { code: string; severity: string; message: string };
    expect(cause).toMatchObject({ code: '42P01', severity: 'ERROR', message: 'relation "kx_no_such_table" does not exist' });
    expect((err as Error).message).not.toMatch(/pgfence updated/);
  });

  it('refuses Knex expressions as values (they would be compiled into the SQL), before any I/O', async () => {
    const offline = newKnex({}, 'postgres://nobody@127.0.0.1:9/none');
    const raw = offline.raw('1');
    for (const spec of [
      { table: 'kx_orders', set: { total: raw }, where: { id: 1 }, token: 1n },
      { table: 'kx_orders', set: { status: 'x' }, where: { id: offline('kx_orders').select('id') }, token: 1n },
      { table: 'kx_orders', set: { status: () => 'x' }, where: { id: 1 }, token: 1n },
    ]) {
      expect(await settled(fencedUpdate(offline, spec as never))).toMatchObject({ code: 'PGFENCE_INVALID_ARGUMENT' });
    }
    expect(await settled(versionedUpdate(offline, { table: 'kx_docs', set: { body: raw as never }, where: { id: 1 }, version: 0 }))).toBeInstanceOf(InvalidArgumentError);
    expect(await settled(fencedClaim(offline, { table: 'kx_orders', where: { id: raw as never }, token: 1n }))).toBeInstanceOf(InvalidArgumentError);
    expect(await settled(xactLock(offline, 'x'))).toBeInstanceOf(NotInTransactionError);
  });
});

describe('typed from the tables declared to Knex', () => {
  it('types set, where, column and claimed rows from a declared table; any other name takes plain records', async () => {
    const id = await order();
    const token = await tokenFor('kx:typed');
    const claim = await fencedClaim(db, { table: 'kx_orders', where: { id }, token });
    const claimedToken: bigint = claim.rows[0]!.fencing_token;
    const status: string = claim.rows[0]!.status;
    expect([claimedToken, status]).toEqual([token, 'new']);
    expect((await fencedUpdate(db, { table: 'kx_orders', set: { status: 'paid', total: 3 }, where: { id, paid_by: null }, token })).applied).toBe(true);
    await observer.query(`INSERT INTO kx_docs (id, body) VALUES (1, 'v0')`);
    expect(await versionedUpdate(db, { table: 'kx_docs', set: { body: 'v1' }, where: { id: 1 }, version: 0n })).toEqual({ applied: true, currentVersion: 1n });
    // An undeclared table: any columns, rows as records.
    const loose = await fencedUpdate(db, { table: 'public.kx_orders', set: { status: 'loose' }, where: { id }, token });
    expect(loose.applied).toBe(true);
  });

  // Compiled, never run: what the declared types refuse.
  function refusedAtCompileTime(trx: Knex.Transaction, token: bigint) {
    // @ts-expect-error: not a column of kx_orders
    void fencedUpdate(trx, { table: 'kx_orders', set: { state: 'paid' }, where: { id: 1 }, token });
    // @ts-expect-error: status is a string
    void fencedUpdate(trx, { table: 'kx_orders', set: { status: 1 }, where: { id: 1 }, token });
    // @ts-expect-error: the fencing column is written by fencedUpdate itself
    void fencedUpdate(trx, { table: 'kx_orders', set: { fencing_token: '9' }, where: { id: 1 }, token });
    // @ts-expect-error: where names a column that is not there
    void fencedUpdate(trx, { table: 'kx_orders', set: { status: 'paid' }, where: { idd: 1 }, token });
    // @ts-expect-error: the fencing column must be a column of the table
    void fencedClaim(trx, { table: 'kx_orders', where: { id: 1 }, token, column: 'nope' });
    // @ts-expect-error: kx_docs' update type has no id (CompositeTableType's 'update' scope)
    void versionedUpdate(trx, { table: 'kx_docs', set: { id: 2 }, where: { id: 1 }, version: 0 });
    void (async () => {
      const claim = await fencedClaim(trx, { table: 'kx_orders', where: { id: 1 }, token });
      // @ts-expect-error: status is a string
      const n: number = claim.rows[0]!.status;
      void n;
    });
  }
  void refusedAtCompileTime;
});

describe('fenced(builder, token): the guard added to a Knex update', () => {
  it('writes the token with the update, in either order of where and update; refuses an older token (stale) and reports a missing row', async () => {
    const id = await order();
    const t1 = await tokenFor('kx:builder');
    const t2 = await tokenFor('kx:builder');
    expect(await fenced(db('kx_orders').where({ id }).update({ status: 'one' }), t1).execute()).toEqual({ applied: true, written: 1, refused: 0 });
    expect(await fenced(db('kx_orders').update({ status: 'two' }).where({ id }), t2).execute()).toEqual({ applied: true, written: 1, refused: 0 });
    expect(await orderRow(id)).toMatchObject({ status: 'two', fencing_token: String(t2) });
    expect(await fenced(db('kx_orders').where({ id }).update({ status: 'late' }), t1).execute()).toEqual({ applied: false, written: 0, refused: 1, reason: 'stale', currentToken: t2 });
    expect(await fenced(db('kx_orders').where({ id: -1 }).update({ status: 'x' }), t2).execute()).toEqual({ applied: false, written: 0, refused: 0, reason: 'missing' });
    expect(await orderRow(id)).toMatchObject({ status: 'two' });
  });

  it("guards the whole where: a row matched through an orWhere is refused when a newer token wrote it", async () => {
    const t = await tokenFor('kx:or');
    const newer = await order(t + 100n);
    const older = await order(t - 1n);
    const r = await fenced(db('kx_orders').where({ id: newer }).orWhere({ id: older }).update({ status: 'or' }), t).execute();
    expect(r).toEqual({ applied: false, written: 1, refused: 1, reason: 'stale', currentToken: t + 100n });
    expect((await orderRow(newer)).status).toBe('new');
    expect((await orderRow(older)).status).toBe('or');
  });

  it('takes increments, an aliased table and withSchema; runs in the transaction (or on the connection) the builder came from', async () => {
    const id = await order(null, { total: 10 });
    const t = await tokenFor('kx:shapes');
    expect((await fenced(db('kx_orders').where({ id }).increment('total', 5), t).execute()).applied).toBe(true);
    expect((await fenced(db('kx_orders as o').where('o.id', id).decrement('total', 1), t).execute()).applied).toBe(true);
    expect((await fenced(db('kx_orders').withSchema('public').where({ id }).update({ status: 'schema' }), t).execute()).applied).toBe(true);
    expect(await orderRow(id)).toMatchObject({ total: 14, status: 'schema', fencing_token: String(t) });
    const outcome = await settled(
      db.transaction(async (trx) => {
        expect((await fenced(trx('kx_orders').where({ id }).update({ status: 'rolled back' }), t).execute()).applied).toBe(true);
        throw new Error('roll back');
      }),
    );
    expect(outcome).toMatchObject({ message: 'roll back' });
    expect((await orderRow(id)).status).toBe('schema');
    // A builder given a connection of its own (.connection(c)) runs on it: here, in c's transaction.
    const c = (await db.client.acquireConnection()) as pg.Client;
    try {
      await c.query('BEGIN');
      expect((await fenced(db('kx_orders').connection(c).where({ id }).update({ status: 'on c' }), t).execute()).applied).toBe(true);
      await c.query('ROLLBACK');
    } finally {
      await db.client.releaseConnection(c);
    }
    expect((await orderRow(id)).status).toBe('schema');
  });

  it('shows its statement: the update with the token and the guarded where, and the counts over the same where', () => {
    const q = fenced(db('kx_orders').where({ id: 1 }).update({ status: 'paid' }), 7n).toSQL();
    expect(q.toNative().sql).toBe(
      `WITH "pgfence updated" AS (update "kx_orders" set "status" = $1, "fencing_token" = $2 where ("id" = $3) and ("fencing_token" is null or "fencing_token" <= $4) returning 1)
SELECT CAST((SELECT count(*) FROM "pgfence updated") AS int) AS written,
       CAST((SELECT count(*) FROM (select * from "kx_orders" where "id" = $5) AS "pgfence matched") AS int) AS matched,
       CAST((SELECT max("fencing_token") FROM (select * from "kx_orders" where "id" = $6) AS "pgfence matched") AS text) AS current`,
    );
    expect(q.bindings).toEqual(['paid', 7n, 1, 7n, 1, 1]);
    expect(fenced(db('kx_orders').where({ id: 1 }).update({ status: 'paid' }), 7n, { column: 'guard' }).toSQL().sql).toMatch(/"guard" = \?.*"guard" is null or "guard" <= \?.*max\("guard"\)/s);
  });

  it('refuses, before any I/O, what is not an update of one table by its where', () => {
    const offline = newKnex({}, 'postgres://nobody@127.0.0.1:9/none');
    const refused = (builder: unknown, opts?: object) => () => fenced(builder as Knex.QueryBuilder, 1n, opts as never);
    // Untyped: what each builder may do is Knex's business here, not the declared tables'.
    const t = (table: unknown = 'kx_orders') => (offline as unknown as (table: unknown) => Knex.QueryBuilder<any, any>)(table);
    for (const make of [
      () => t().where({ id: 1 }),
      () => t().insert({ id: 1 }),
      () => t().where({ id: 1 }).del(),
      () => t().join('kx_docs', 'kx_docs.id', 'kx_orders.id').update({ status: 'x' }),
      () => offline.with('w', offline.raw('select 1')).table('kx_orders' as string).update({ status: 'x' }),
      () => t().where({ id: 1 }).update({ status: 'x' }, ['id']),
      () => t().updateFrom('kx_docs' as string).update({ status: 'x' }),
      () => t().where({ id: 1 }).limit(1).update({ status: 'x' }),
      () => t(offline.raw('kx_orders')).update({ status: 'x' }),
      () => t().where({ id: 1 }).update({ fencing_token: 5 }),
      () => t().where({ id: 1 }).increment('fencing_token'),
    ]) {
      expect(refused(make())).toThrow(InvalidArgumentError);
    }
    for (const notABuilder of [42, null, offline.raw('update kx_orders set status = 1'), offline]) expect(refused(notABuilder)).toThrow(InvalidArgumentError);
    expect(refused(offline('kx_orders').update({ status: 'x' }), { colum: 'x' })).toThrow(/column/);
    expect(() => fenced(offline('kx_orders').update({ status: 'x' }), 0n)).toThrow(InvalidArgumentError);
  });
});

describe('a doomed transaction (PostgreSQL does not answer)', () => {
  it("knex.transaction() settles at once, and the pool's next transaction gets a working connection", async () => {
    const holder = await db.transaction();
    await xactLock(holder, 'kx:doomed');
    const { proxy, url: via } = await proxyTo(url);
    const cut = newKnex({ pool: { min: 0, max: 1 } }, via);
    try {
      let lockOutcome: unknown;
      const done = settled(
        cut.transaction(async (trx) => {
          const waiting = settled(xactLock(trx, 'kx:doomed', { timeoutMs: 500 }));
          await eventually(async () => (await observer.query(`SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()`)).rowCount === 1);
          proxy.stall();
          await holder.commit();
          lockOutcome = await waiting;
          throw lockOutcome;
        }),
      );
      // Still stalled: the transaction is over for Knex all the same (its connection was closed, not left queued).
      const outcome = await Promise.race([done, sleep(6000).then(() => 'still pending')]);
      expect(lockOutcome).toBeInstanceOf(LockUnavailableError);
      expect(outcome).toBeInstanceOf(Error);
      proxy.heal();
      expect(await cut.transaction(async (trx) => (await trx.raw('SELECT 1 AS one')).rows)).toEqual([{ one: 1 }]);
    } finally {
      proxy.heal();
      await proxy.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// pgfence's schema and your tables' columns through Knex's migrator.

const tempDirs: string[] = [];
afterAll(async () => {
  await Promise.all(tempDirs.map((d) => rm(d, { recursive: true, force: true })));
});
async function copyFixture(name: string): Promise<MigrationFolders> {
  const dir = await mkdtemp(join(tmpdir(), 'pgfence-knex-migrate-'));
  tempDirs.push(dir);
  await cp(fileURLToPath(new URL(`./fixtures/migrate/${name}`, import.meta.url)), dir, { recursive: true });
  return { migrationsDir: join(dir, 'migrations'), sqlDir: join(dir, 'sql') };
}
const queryOn = async (on: string, text: string) => {
  const c = new pg.Client({ connectionString: on });
  await c.connect();
  try {
    return (await c.query(text)).rows;
  } finally {
    await c.end();
  }
};
const appliedVersions = async (on: string) => (await queryOn(on, 'SELECT version FROM pgfence.schema_migrations ORDER BY version')).map((r) => r.version as number);
const packageVersions = async () => (await readMigrationSet(packageFolders())).migrations.map((f) => f.version);
const packageNames = async () => (await pgfenceMigrations().getMigrations()).map((m) => m.name);
const TABLE = 'pgfence_knex_migrations';

/** knex.migrate.latest() with pgfence's source (or `source`): the names it ran this time. */
async function latest(k: Knex, config: Knex.MigratorConfig = {}): Promise<string[]> {
  const [, names] = (await k.migrate.latest({ migrationSource: pgfenceMigrations(), tableName: TABLE, ...config })) as [number, string[]];
  return names;
}

describe("pgfenceMigrations() with Knex's migrator", () => {
  it.each([
    ['in one transaction (Knex’s default)', {}],
    ['with disableTransactions (each step opens its own)', { disableTransactions: true }],
  ])('applies the schema %s under its own history table; migrate() then applies nothing', async (_, config) => {
    const fresh = (await useTestDatabase('knex_mig')).url;
    const k = newKnex({}, fresh);
    expect(await latest(k, config)).toEqual(await packageNames());
    expect(await appliedVersions(fresh)).toEqual(await packageVersions());
    expect(await queryOn(fresh, `SELECT to_regclass('pgfence.leases') IS NOT NULL AS leases, to_regclass('public.${TABLE}') IS NOT NULL AS history, to_regclass('public.knex_migrations') IS NULL AS none`)).toEqual([{ leases: true, history: true, none: true }]);
    expect(await migrate({ connectionString: fresh })).toEqual({ applied: [] });
    expect(await latest(k, config)).toEqual([]);
  });

  it('after migrate(), records the names without applying a file again; a rollback leaves the schema and latest() records them again', async () => {
    const fresh = (await useTestDatabase('knex_after')).url;
    await migrate({ connectionString: fresh });
    const before = await queryOn(fresh, 'SELECT version, applied_at::text FROM pgfence.schema_migrations ORDER BY version');
    const k = newKnex({}, fresh);
    // Applying 0001 again would fail (CREATE TABLE without IF NOT EXISTS).
    expect(await latest(k)).toEqual(await packageNames());
    await k.migrate.rollback({ migrationSource: pgfenceMigrations(), tableName: TABLE }, true);
    expect(await queryOn(fresh, `SELECT to_regclass('pgfence.leases') IS NOT NULL AS kept`)).toEqual([{ kept: true }]);
    expect(await latest(k, { disableTransactions: true })).toEqual(await packageNames());
    expect(await queryOn(fresh, 'SELECT version, applied_at::text FROM pgfence.schema_migrations ORDER BY version')).toEqual(before);
  });

  it('runs each step inside a transaction, also with disableTransactions; a changed definition set runs under a new name, and the old names stay valid', async () => {
    const fresh = (await useTestDatabase('knex_defs')).url;
    const folders = await copyFixture('basic');
    // A migration that fails unless it runs inside a transaction opened before it (not a lone implicit one).
    await writeFile(
      join(folders.migrationsDir, '0003_in_transaction.sql'),
      `DO $$ BEGIN IF transaction_timestamp() = statement_timestamp() THEN RAISE EXCEPTION 'not inside a transaction'; END IF; END $$;\n`,
    );
    const k = newKnex({}, fresh);
    const run = (config: Knex.MigratorConfig = {}) => latest(k, { migrationSource: migrationSourceFor(folders), disableTransactions: true, ...config });
    expect(await run()).toEqual(['0001_create_items', '0002_add_item_notes', '0003_in_transaction', '0002~definitions-r0001-e613e51b']);
    await writeFile(join(folders.sqlDir, 'fixture_version.sql'), 'CREATE OR REPLACE FUNCTION public.fixture_version() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;\n');
    const [changed, ...more] = await run({ disableTransactions: false });
    expect(more).toEqual([]);
    expect(changed).toMatch(/^0003~definitions-r0002-[0-9a-f]{8}$/);
    expect(await queryOn(fresh, 'SELECT public.fixture_version() AS v')).toEqual([{ v: 2 }]);
    await appendFile(join(folders.sqlDir, DEFINITION_LOG_FILE), `${changed}\n`);
    expect(await run()).toEqual([]);
  });

  it('adds the fencing column with its trigger, and the version column, from your own Knex migration, and drops them in its down()', async () => {
    const fresh = (await useTestDatabase('knex_columns')).url;
    await migrate({ connectionString: fresh });
    const k = newKnex({}, fresh);
    await k.raw('CREATE TABLE shipments (id int PRIMARY KEY, state text)');
    const own: Knex.MigrationSource<string> = {
      getMigrations: async () => ['20250101_fence_shipments'],
      getMigrationName: (name) => name,
      getMigration: async () => ({
        up: async (knex: Knex) => {
          await addFencingColumn(knex, 'shipments', { enforce: true });
          await addVersionColumn(knex, 'shipments');
        },
        down: async (knex: Knex) => {
          await dropFencingColumn(knex, 'shipments');
          await dropVersionColumn(knex, 'shipments');
        },
      }),
    };
    await k.migrate.latest({ migrationSource: own });
    await k.raw(`INSERT INTO shipments (id, state) VALUES (1, 'new')`);
    const t = 5n;
    expect(await fencedUpdate(k, { table: 'shipments', set: { state: 'sent' }, where: { id: 1 }, token: t })).toMatchObject({ applied: true });
    expect(await versionedUpdate(k, { table: 'shipments', set: { state: 'seen' }, where: { id: 1 }, version: 0 })).toEqual({ applied: true, currentVersion: 1n });
    // The trigger: the table itself refuses a lower token, whoever writes.
    expect(await settled(k.raw('UPDATE shipments SET fencing_token = 4 WHERE id = 1'))).toMatchObject({ code: 'PGF01' });
    // And back: the trigger goes with its column (left behind, it would guard a column of that name added later).
    await k.migrate.rollback({ migrationSource: own });
    expect(await queryOn(fresh, `SELECT column_name FROM information_schema.columns WHERE table_name = 'shipments' ORDER BY column_name`)).toEqual([{ column_name: 'id' }, { column_name: 'state' }]);
    expect(await queryOn(fresh, `SELECT count(*)::int AS triggers FROM pg_trigger WHERE tgrelid = 'shipments'::regclass AND NOT tgisinternal`)).toEqual([{ triggers: 0 }]);
  });
});
