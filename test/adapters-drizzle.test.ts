// pgfence/drizzle beyond the conformance suite (test/adapters.test.ts runs that on both drivers): the
// typed specs, the mapping between a drizzle table and SQL, the builder idiom, what each driver does
// differently (savepoints, scripts, errors), and the migrations. Every behaviour on node-postgres and
// on postgres.js.
import { installedAtLeast } from './support/versions.js';
import { alias, customType, integer, jsonb, pgSchema, pgTable, text, timestamp, bigint as pgBigint } from 'drizzle-orm/pg-core';
import { eq, type Logger, sql } from 'drizzle-orm';
import { drizzle as drizzleNodePostgres } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import { execFile } from 'node:child_process';
import { appendFile, cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { migrate as drizzleMigrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { InvalidArgumentError, LockTimeoutError, lockKey, migrate, NestedLockError, PgfenceError } from '../src/index.js';
import * as d from '../src/adapters/drizzle/index.js';
import { migratePgfenceFrom } from '../src/adapters/drizzle/migrations.js';
import { drizzleSqlExecutor } from '../src/adapters/drizzle/sql-executor.js';
import { readMigrationSet } from '../src/migrate/files.js';
import { packageFolders } from '../src/migrate/package-folders.js';
import { eventually, queryOnce, useMigratedDatabase, useTestDatabase } from './support/db.js';
import { advisoryLocksOf } from './support/server-locks.js';

/** A text column holding a list as `a,b`: its own toDriver / fromDriver, so that the mapping shows. */
const csv = customType<{ data: string[]; driverData: string }>({
  dataType: () => 'text',
  toDriver: (value) => value.join(','),
  fromDriver: (value) => value.split(','),
});

const shipments = pgTable('shipments', {
  id: integer('id').primaryKey(),
  state: text('state'),
  shippedAt: timestamp('shipped_at', { withTimezone: true, mode: 'date' }),
  labels: csv('labels'),
  meta: jsonb('meta').$type<{ carrier: string }>(),
  touched: integer('touched').notNull().default(0).$onUpdate(() => sql`touched + 1`),
  fencingToken: d.fencingToken(),
  version: d.versionColumn(),
});
/** The same table, its fencing column undeclared. */
const shipmentsUndeclared = pgTable('shipments', { id: integer('id').primaryKey(), state: text('state') });
/** A fencing column of another name. */
const locks = pgTable('lock_tokens', { id: integer('id').primaryKey(), state: text('state'), lockToken: d.fencingToken('lock_token') });
const app = pgSchema('app');
const jobs = app.table('jobs', { id: integer('id').primaryKey(), state: text('state'), fencingToken: d.fencingToken() });
/** Declared without names: drizzle's `casing` gives them their SQL names. */
const cased = pgTable('cased_items', { id: integer().primaryKey(), orderState: text(), fencingToken: pgBigint({ mode: 'bigint' }) });
/** No fencing column in the database. */
const unguarded = pgTable('unguarded', { id: integer('id').primaryKey(), state: text('state'), fencingToken: d.fencingToken() });

const SCHEMA = `
  CREATE TABLE shipments (id int PRIMARY KEY, state text, shipped_at timestamptz, labels text, meta jsonb,
    touched int NOT NULL DEFAULT 0, fencing_token bigint, version bigint NOT NULL DEFAULT 0);
  CREATE TABLE lock_tokens (id int PRIMARY KEY, state text, lock_token bigint);
  CREATE SCHEMA app; CREATE TABLE app.jobs (id int PRIMARY KEY, state text, fencing_token bigint);
  CREATE TABLE cased_items (id int PRIMARY KEY, order_state text, fencing_token bigint);
  CREATE TABLE unguarded (id int PRIMARY KEY, state text);`;

interface Driver {
  name: 'node-postgres' | 'postgres-js';
  open(url: string, opts?: { logger?: Logger; casing?: 'snake_case' }): { db: Db; close(): Promise<void> };
}
type Db = ReturnType<typeof drizzleNodePostgres>;

const drivers: Driver[] = [
  {
    name: 'node-postgres',
    open(url, opts) {
      const pool = new pg.Pool({ connectionString: url, max: 3 });
      return { db: drizzleNodePostgres(pool, opts ?? {}), close: () => pool.end() };
    },
  },
  {
    name: 'postgres-js',
    open(url, opts) {
      const client = postgres(url, { max: 3, onnotice: () => {} });
      // Both drivers' databases have the same API; the tests only use what PgDatabase declares.
      return { db: drizzlePostgresJs(client, opts ?? {}) as unknown as Db, close: () => client.end({ timeout: 5 }) };
    },
  },
];

/** What a promise settled with: its value, or the error it rejected with. */
const settled = <T>(p: Promise<T>): Promise<T | unknown> => p.then((v) => v, (e: unknown) => e);

let url: string;
let observer: pg.Pool;
beforeAll(async () => {
  url = (await useMigratedDatabase('adapters_drizzle')).url;
  observer = new pg.Pool({ connectionString: url, max: 2 });
  await observer.query(SCHEMA);
});
afterAll(async () => {
  await observer?.end();
});

let nextId = 1;
/** A shipment row of the test's own. */
async function shipment(values: { token?: bigint; state?: string } = {}): Promise<number> {
  const id = nextId++;
  await observer.query('INSERT INTO shipments (id, state, fencing_token) VALUES ($1, $2, $3)', [id, values.state ?? 'new', values.token?.toString() ?? null]);
  return id;
}
const shipmentRow = async (id: number) => (await observer.query('SELECT state, shipped_at, labels, meta, touched, fencing_token, version FROM shipments WHERE id = $1', [id])).rows[0];

describe.each(drivers)('pgfence/drizzle on drizzle-orm/$name', (driver) => {
  let db: Db;
  let close: () => Promise<void>;
  beforeAll(() => {
    ({ db, close } = driver.open(url));
  });
  afterAll(() => close());

  describe('fencedUpdate / fencedClaim / versionedUpdate: typed from the table', () => {
    it('write by column key, each value through its column (mapToDriverValue), where too', async () => {
      const id = await shipment();
      const shippedAt = new Date('2025-03-04T05:06:07.089Z');
      const r = await d.fencedUpdate(db, { table: shipments, set: { state: 'shipped', shippedAt, labels: ['a', 'b'], meta: { carrier: 'dhl' } }, where: { id }, token: 5n });
      expect(r).toEqual({ applied: true, written: 1, refused: 0 });
      expect(await shipmentRow(id)).toMatchObject({ state: 'shipped', shipped_at: shippedAt, labels: 'a,b', meta: { carrier: 'dhl' }, fencing_token: '5' });
      // A where value goes through its column as well: ['a', 'b'] finds 'a,b'.
      expect(await d.fencedUpdate(db, { table: shipments, set: { state: 'found' }, where: { id, labels: ['a', 'b'] }, token: 5n })).toMatchObject({ applied: true });
      expect(await d.versionedUpdate(db, { table: shipments, set: { state: 'v1' }, where: { id, labels: ['a', 'b'] }, version: 0n })).toEqual({ applied: true, currentVersion: 1n });
    });

    it('fencedClaim: rows keyed and typed as drizzle selects them (mapFromDriverValue), the fencing column the token', async () => {
      const id = await shipment({ token: 3n });
      await observer.query(`UPDATE shipments SET shipped_at = '2025-01-02T03:04:05Z', labels = 'x,y', meta = '{"carrier":"ups"}', version = 7 WHERE id = $1`, [id]);
      const claim = await db.transaction((tx) => d.fencedClaim(tx, { table: shipments, where: { id }, token: 9n }));
      expectTypeOf(claim.rows).toEqualTypeOf<(typeof shipments.$inferSelect)[]>();
      expect(claim).toMatchObject({ claimed: true, refused: 0 });
      expect(claim.rows).toEqual([
        { id, state: 'new', shippedAt: new Date('2025-01-02T03:04:05Z'), labels: ['x', 'y'], meta: { carrier: 'ups' }, touched: 0, fencingToken: 9n, version: 7n },
      ]);
      expect(await d.fencedClaim(db, { table: shipments, where: { id }, token: 8n })).toEqual({ claimed: false, rows: [], refused: 1, reason: 'stale', currentToken: 9n });
    });

    it('another fencing column by its key; a schema-qualified table; columns named by drizzle’s casing', async () => {
      const id = nextId++;
      await observer.query(`INSERT INTO lock_tokens VALUES ($1, 'new', 50); INSERT INTO app.jobs VALUES ($1, 'new', NULL); INSERT INTO cased_items VALUES ($1, 'new', NULL)`.replaceAll('$1', String(id)));
      expect(await d.fencedUpdate(db, { table: locks, set: { state: 'late' }, where: { id }, token: 40n, column: 'lockToken' })).toMatchObject({ reason: 'stale', currentToken: 50n });
      expect(await d.fencedUpdate(db, { table: jobs, set: { state: 'run' }, where: { id }, token: 1n })).toMatchObject({ applied: true });
      const snake = driver.open(url, { casing: 'snake_case' });
      try {
        expect(await d.fencedUpdate(snake.db, { table: cased, set: { orderState: 'paid' }, where: { id }, token: 2n })).toMatchObject({ applied: true });
        expect((await d.fencedClaim(snake.db, { table: cased, where: { id }, token: 3n })).rows).toEqual([{ id, orderState: 'paid', fencingToken: 3n }]);
      } finally {
        await snake.close();
      }
      expect((await observer.query('SELECT order_state, fencing_token FROM cased_items WHERE id = $1', [id])).rows).toEqual([{ order_state: 'paid', fencing_token: '3' }]);
    });

    it('refuses, before any I/O: an unknown key, an SQL expression as a value, a table that is not a drizzle table, an unknown spec key', async () => {
      const ended = await db.transaction(async (tx) => tx);
      const refusals: Promise<unknown>[] = [
        d.fencedUpdate(ended, { table: shipments, set: { nope: 1 } as never, where: { id: 1 }, token: 1n }),
        d.fencedUpdate(ended, { table: shipments, set: { state: sql`upper(state)` } as never, where: { id: 1 }, token: 1n }),
        d.fencedClaim(ended, { table: 'shipments' as never, where: { id: 1 }, token: 1n }),
        d.versionedUpdate(ended, { table: shipments, set: { state: 'x' }, where: { nope: 1 } as never, version: 0n }),
        d.fencedUpdate(ended, { table: shipments, set: { state: 'x' }, where: { id: 1 }, token: 1n, colum: 'x' } as never),
        d.fencedUpdate({} as never, { table: shipments, set: { state: 'x' }, where: { id: 1 }, token: 1n }),
      ];
      for (const r of refusals) expect(await settled(r)).toBeInstanceOf(InvalidArgumentError);
    });

    it("errors come out typed, the driver's own error as their cause (not drizzle's wrapper)", async () => {
      const id = nextId++;
      await observer.query(`INSERT INTO unguarded VALUES ($1, 'new')`, [id]);
      const err = (await settled(d.fencedUpdate(db, { table: unguarded, set: { state: 'x' }, where: { id }, token: 1n }))) as PgfenceError;
      expect(err).toMatchObject({ code: 'PGFENCE_NOT_MIGRATED' });
      expect(err.cause).toMatchObject({ code: '42703', severity: 'ERROR' });
      const viaBuilder = (await settled(d.fenced(db.update(unguarded).set({ state: 'x' }).where(eq(unguarded.id, id)), 1n).execute())) as PgfenceError;
      expect(viaBuilder).toMatchObject({ code: 'PGFENCE_NOT_MIGRATED' });
      expect(viaBuilder.cause).toMatchObject({ code: '42703', severity: 'ERROR' });
    });
  });

  describe('fenced(builder, token): the guard added to your own update', () => {
    it('adds the token to the SET and the guard to the WHERE, through drizzle’s own SET ($onUpdate runs)', async () => {
      const id = await shipment();
      const q = d.fenced(db.update(shipments).set({ state: 'paid' }).where(eq(shipments.id, id)), 7n);
      expect(q.toSQL().sql).toMatch(
        /^WITH "pgfence updated" AS \(update "shipments" set "state" = \$1, "touched" = touched \+ 1, "fencing_token" = \$2 where \("shipments"\."id" = \$3 and \("fencing_token" IS NULL OR "fencing_token" <= \$4\)\) returning 1\)/,
      );
      expect(await q.execute()).toEqual({ applied: true, written: 1, refused: 0 });
      expect(await shipmentRow(id)).toMatchObject({ state: 'paid', touched: 1, fencing_token: '7' });
    });

    it('counts over the same WHERE: written, refused, and the newest token among the refused rows', async () => {
      await shipment({ token: 99n, state: 'elsewhere' }); // not matched: counts nowhere
      const ids = [await shipment({ token: 1n, state: 'batch' }), await shipment({ token: 30n, state: 'batch' }), await shipment({ state: 'batch' })];
      const r = await db.transaction((tx) => d.fenced(tx.update(shipments).set({ state: 'done' }).where(sql`${shipments.id} in (${sql.join(ids, sql`, `)})`), 20n).execute());
      expect(r).toEqual({ applied: false, written: 2, refused: 1, reason: 'stale', currentToken: 30n });
    });

    it('an aliased table, a schema-qualified one, an undeclared fencing column, another one by its key', async () => {
      const id = await shipment({ token: 10n });
      const s = alias(shipments, 's');
      expect(await d.fenced(db.update(s).set({ state: 'old' }).where(eq(s.id, id)), 9n).execute()).toMatchObject({ reason: 'stale', currentToken: 10n });
      expect(await d.fenced(db.update(shipmentsUndeclared).set({ state: 'new' }).where(eq(shipmentsUndeclared.id, id)), 11n).execute()).toMatchObject({ applied: true });
      await observer.query(`INSERT INTO app.jobs VALUES ($1, 'new', NULL); INSERT INTO lock_tokens VALUES ($1, 'new', 5)`.replaceAll('$1', String(id)));
      expect(await d.fenced(db.update(jobs).set({ state: 'run' }).where(eq(jobs.id, id)), 3n).execute()).toMatchObject({ applied: true });
      expect(await d.fenced(db.update(locks).set({ state: 'old' }).where(eq(locks.id, id)), 4n, { column: 'lockToken' }).execute()).toMatchObject({ reason: 'stale', currentToken: 5n });
      expect(await d.fenced(db.update(locks).set({ state: 'run' }).where(eq(locks.id, id)), 6n, { column: 'lockToken' }).execute()).toMatchObject({ applied: true });
      expect((await observer.query('SELECT fencing_token FROM shipments WHERE id = $1', [id])).rows).toEqual([{ fencing_token: '11' }]);
      expect((await observer.query('SELECT state, lock_token FROM lock_tokens WHERE id = $1', [id])).rows).toEqual([{ state: 'run', lock_token: '6' }]);
    });

    it('refuses what it cannot guard (FROM, joins, WITH, RETURNING), and anything that is not an update builder', () => {
      const cte = db.$with('recent').as(db.select().from(shipments));
      const refused = [
        () => d.fenced(db.update(shipments).set({ state: 'x' }).from(jobs) as never, 1n),
        // Joins need no FROM at run time (drizzle's types ask for one first).
        () => d.fenced((db.update(shipments).set({ state: 'x' }) as unknown as { innerJoin(t: unknown, on: unknown): never }).innerJoin(jobs, eq(jobs.id, shipments.id)), 1n),
        () => d.fenced(db.with(cte).update(shipments).set({ state: 'x' }), 1n),
        () => d.fenced(db.update(shipments).set({ state: 'x' }).returning() as never, 1n),
        () => d.fenced(db.select().from(shipments) as never, 1n),
        () => d.fenced(db.update(shipments).set({ state: 'x' }), 0n),
        () => d.fenced(db.update(shipments).set({ state: 'x' }), 1n, { column: 'nope' as never }),
      ];
      for (const call of refused) expect(call).toThrow(InvalidArgumentError);
    });
  });

  describe('xactLock in drizzle transactions', () => {
    it('a savepoint is a transaction of its own: a lock it took goes with its rollback, and can be taken again', async () => {
      const name = `drizzle:${driver.name}:savepoint`;
      await db.transaction(async (tx) => {
        await settled(
          tx.transaction(async (sp) => {
            await d.xactLock(sp, name);
            throw new Error('roll the savepoint back');
          }),
        );
        expect(await advisoryLocksOf(url, lockKey(name), true)).toBe(0);
        // A retry, in the transaction or in another savepoint, is no nesting.
        await tx.transaction(async (sp) => expect(await d.xactLock(sp, name)).toMatchObject({ key: lockKey(name) }));
        expect(await d.xactLock(tx, name)).toMatchObject({ key: lockKey(name) });
        expect(await settled(d.xactLock(tx, name))).toBeInstanceOf(NestedLockError);
      });
    });

    it('a wait cut into slices (a signal): slices that time out leave the transaction usable, a later one gets the lock, and it commits', async () => {
      const name = `drizzle:${driver.name}:sliced`;
      // Every slice after a wait's first starts by rolling back to the wait's savepoint.
      let laterSlices = 0;
      const logged = driver.open(url, { logger: { logQuery: (q) => void (q.includes('ROLLBACK TO SAVEPOINT pgfence_xact_lock;\nSELECT') && laterSlices++) } });
      let letGo!: () => void;
      const holding = new Promise<void>((r) => (letGo = r));
      let held!: () => void;
      const taken = new Promise<void>((r) => (held = r));
      const holder = db.transaction(async (tx) => {
        await d.xactLock(tx, name);
        held();
        await holding;
      });
      try {
        await taken;
        const token = await logged.db.transaction(async (tx) => {
          const signal = new AbortController().signal;
          // A wait that gives up after slices of 250 ms: the transaction goes on.
          expect(await settled(d.xactLock(tx, name, { timeoutMs: 600, signal }))).toBeInstanceOf(LockTimeoutError);
          laterSlices = 0;
          const granted = d.xactLock(tx, name, { timeoutMs: 30_000, signal, fencing: true });
          await eventually(() => laterSlices >= 2, 15_000, 'two slices of the second wait to time out');
          letGo();
          const { token } = await granted;
          expect(await advisoryLocksOf(url, lockKey(name), true)).toBe(1);
          return token;
        });
        expect(typeof token).toBe('bigint');
        expect(await advisoryLocksOf(url, lockKey(name), true)).toBe(0);
      } finally {
        letGo();
        await holder;
        await logged.close();
      }
    });

    it('one database object per drizzle instance, shared by its transactions: the lease guard is looked for once', async () => {
      const statements: string[] = [];
      const logged = driver.open(url, { logger: { logQuery: (query) => statements.push(query) } });
      try {
        const lockStatements = () => statements.filter((s) => s.includes('advisory_xact_lock') || s.includes('admit_xact_lock'));
        await logged.db.transaction((tx) => d.xactLock(tx, `drizzle:${driver.name}:guard:1`));
        expect(lockStatements().filter((s) => s.includes('to_regprocedure'))).toHaveLength(1);
        statements.length = 0;
        await logged.db.transaction((tx) => d.xactLock(tx, `drizzle:${driver.name}:guard:2`));
        expect(lockStatements()).toHaveLength(1);
        expect(lockStatements()[0]).not.toContain('to_regprocedure');
      } finally {
        await logged.close();
      }
    });

    it("scripts: the rows of each statement, in order (what xactLock's waits read their token from)", async () => {
      await db.transaction(async (tx) => {
        const exec = drizzleSqlExecutor(tx);
        expect(exec.scriptResults).toBe(true);
        const rows = await exec.script('SET LOCAL lock_timeout = 0; SELECT 1 AS a; SELECT 2 AS b, 3 AS c; SET LOCAL lock_timeout = 0');
        // postgres.js 3 reports a statement without rows only when it comes first; 4 reports every one.
        const everyStatement = driver.name === 'node-postgres' || installedAtLeast('postgres', 4);
        expect(rows).toEqual(everyStatement ? [[], [{ a: 1 }], [{ b: 2, c: 3 }], []] : [[], [{ a: 1 }], [{ b: 2, c: 3 }]]);
        expect(await exec.script('SELECT 1 AS a')).toEqual([[{ a: 1 }]]);
        expect(await exec.query('SELECT $2::text AS b, $1::int8::text AS a, $2::text AS again', [5n, 'x'])).toEqual([{ b: 'x', a: '5', again: 'x' }]);
      });
    });
  });
});

const root = fileURLToPath(new URL('..', import.meta.url));

describe('migrations', () => {
  /** The table of the drizzle-kit fixture: the same object the fixture's schema file builds. */
  const kitInvoices = pgTable('kit_invoices', { id: integer('id').primaryKey(), status: text('status'), fencingToken: d.fencingToken(), version: d.versionColumn() });

  it("drizzle-kit generates the columns from fencingToken() and versionColumn(); a custom migration installs the trigger; drizzle's migrator runs both", async () => {
    await mkdir(join(root, '.pgfence-test'), { recursive: true });
    // Inside the repository: the schema file imports drizzle-orm, and the helpers from src/, as drizzle-kit loads it.
    const work = await mkdtemp(join(root, '.pgfence-test', 'drizzle-kit-'));
    try {
      await writeFile(
        join(work, 'schema.ts'),
        `import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { fencingToken, versionColumn } from '../../src/adapters/drizzle/columns.js';
export const kitInvoices = pgTable('kit_invoices', { id: integer('id').primaryKey(), status: text('status'), fencingToken: fencingToken(), version: versionColumn() });
`,
      );
      const kit = (...args: string[]) =>
        promisify(execFile)(process.execPath, [join(root, 'node_modules', 'drizzle-kit', 'bin.cjs'), 'generate', '--dialect', 'postgresql', '--schema', './schema.ts', '--out', './drizzle', ...args], { cwd: work, timeout: 60_000 });
      await kit();
      const [generated] = (await readdir(join(work, 'drizzle'))).filter((f) => f.endsWith('.sql'));
      const emitted = await readFile(join(work, 'drizzle', generated!), 'utf8');
      expect(emitted).toContain('"fencing_token" bigint,');
      expect(emitted).toContain('"version" bigint DEFAULT 0 NOT NULL');

      await kit('--custom', '--name', 'fencing_trigger');
      const custom = (await readdir(join(work, 'drizzle'))).find((f) => f.endsWith('_fencing_trigger.sql'))!;
      await appendFile(join(work, 'drizzle', custom), d.fencingTriggerSql(kitInvoices));

      const pool = new pg.Pool({ connectionString: url, max: 2 });
      try {
        const orm = drizzleNodePostgres(pool);
        await drizzleMigrate(orm, { migrationsFolder: join(work, 'drizzle') });
        await orm.insert(kitInvoices).values({ id: 1, status: 'new' });
        expect(await d.fencedUpdate(orm, { table: kitInvoices, set: { status: 'paid' }, where: { id: 1 }, token: 10n })).toMatchObject({ applied: true });
        expect(await d.versionedUpdate(orm, { table: kitInvoices, set: { status: 'paid again' }, where: { id: 1 }, version: 0n })).toEqual({ applied: true, currentVersion: 1n });
        // The trigger: a write that would lower the token is refused, whoever sends it.
        expect(await settled(pool.query('UPDATE kit_invoices SET fencing_token = 9 WHERE id = 1'))).toMatchObject({ code: 'PGF01' });
      } finally {
        await pool.end();
      }
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }, 120_000);

  it('fencingTriggerSql: the trigger of another fencing column, on a schema-qualified table', () => {
    expect(d.fencingTriggerSql(locks, { column: 'lockToken' })).toBe(
      'ALTER TABLE "lock_tokens" ADD COLUMN IF NOT EXISTS "lock_token" bigint;\nDROP TRIGGER IF EXISTS "pgfence_lock_token" ON "lock_tokens";\n' +
        `CREATE TRIGGER "pgfence_lock_token" BEFORE UPDATE ON "lock_tokens" FOR EACH ROW EXECUTE FUNCTION pgfence.enforce_fencing_token('lock_token');\n`,
    );
    expect(d.fencingTriggerSql(jobs)).toContain('ON "app"."jobs"');
    expect(() => d.fencingTriggerSql(jobs, { column: 'nope' as never })).toThrow(InvalidArgumentError);
  });

  describe.each(drivers)('migratePgfence on drizzle-orm/$name', (driver) => {
    const versions = async () => (await readMigrationSet(packageFolders())).migrations.map((f) => f.version);
    const applied = async (at: string) => (await queryOnce<{ version: number; at: string }>(at, 'SELECT version, applied_at::text AS at FROM pgfence.schema_migrations ORDER BY version'));
    async function withDb<T>(at: string, fn: (db: Db) => Promise<T>): Promise<T> {
      const { db, close } = driver.open(at);
      try {
        return await fn(db);
      } finally {
        await close();
      }
    }

    it("installs pgfence's schema, after which migrate() applies nothing, and runs again without applying anything", async () => {
      const at = (await useTestDatabase(`drizzle_migrate_${driver.name}`)).url;
      await withDb(at, (db) => d.migratePgfence(db));
      const first = await applied(at);
      expect(first.map((r) => r.version)).toEqual(await versions());
      expect(await migrate({ connectionString: at })).toEqual({ applied: [] });
      await withDb(at, (db) => d.migratePgfence(db));
      expect(await applied(at)).toEqual(first);
    });

    it('after migrate(), applies no file again (0001 would fail: CREATE TABLE without IF NOT EXISTS)', async () => {
      const at = (await useTestDatabase(`drizzle_after_${driver.name}`)).url;
      await migrate({ connectionString: at });
      const before = await applied(at);
      await withDb(at, (db) => d.migratePgfence(db));
      expect(await applied(at)).toEqual(before);
    });

    it('re-applies changed definitions, and refuses an edited applied migration', async () => {
      const at = (await useTestDatabase(`drizzle_fixture_${driver.name}`)).url;
      const dir = await mkdtemp(join(root, '.pgfence-test', 'drizzle-migrate-'));
      try {
        await cp(join(root, 'test', 'fixtures', 'migrate', 'basic'), dir, { recursive: true });
        const folders = { migrationsDir: join(dir, 'migrations'), sqlDir: join(dir, 'sql') };
        const fixtureVersion = async () => (await queryOnce<{ v: number }>(at, 'SELECT public.fixture_version() AS v'))[0]!.v;
        await withDb(at, (db) => migratePgfenceFrom(db, folders));
        expect(await fixtureVersion()).toBe(1);
        await writeFile(join(folders.sqlDir, 'fixture_version.sql'), 'CREATE OR REPLACE FUNCTION public.fixture_version() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;\n');
        await withDb(at, (db) => migratePgfenceFrom(db, folders));
        expect(await fixtureVersion()).toBe(2);
        await appendFile(join(folders.migrationsDir, '0001_create_items.sql'), '\n-- an innocent-looking edit\n');
        expect(await settled(withDb(at, (db) => migratePgfenceFrom(db, folders)))).toMatchObject({ code: 'PGFENCE_MIGRATION_EDITED' });
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  });
});

/** Compile-time checks (tsc type-checks this file; never called). */
export function typeChecks(db: Db, tx: d.DrizzleTransaction, token: bigint): void {
  // @ts-expect-error -- xactLock takes a transaction, not the database
  void d.xactLock(db, 'n');
  void d.xactLock(tx, 'n');
  // @ts-expect-error -- no such column key
  void d.fencedUpdate(db, { table: shipments, set: { status: 'x' }, where: { id: 1 }, token });
  // @ts-expect-error -- a column's value of the wrong type
  void d.fencedUpdate(db, { table: shipments, set: { state: 42 }, where: { id: 1 }, token });
  // @ts-expect-error -- the fencing column is pgfence's to write
  void d.fencedUpdate(db, { table: shipments, set: { fencingToken: 3n }, where: { id: 1 }, token });
  // @ts-expect-error -- where by column key, not by SQL name
  void d.fencedUpdate(db, { table: shipments, set: { state: 'x' }, where: { shipped_at: null }, token });
  // @ts-expect-error -- the column option is a column key of the table
  void d.fencedUpdate(db, { table: locks, set: { state: 'x' }, where: { id: 1 }, token, column: 'lock_token' });
  // @ts-expect-error -- the version column is versionedUpdate's to write
  void d.versionedUpdate(db, { table: shipments, set: { version: 2n }, where: { id: 1 }, version: 1n });
  // @ts-expect-error -- fenced() refuses an update that returns rows
  void d.fenced(db.update(shipments).set({ state: 'x' }).returning(), token);
  // @ts-expect-error -- and one with FROM
  void d.fenced(db.update(shipments).set({ state: 'x' }).from(jobs), token);
  // @ts-expect-error -- fenced()'s column is a key of the updated table
  void d.fenced(db.update(shipments).set({ state: 'x' }), token, { column: 'lockToken' });
  void d.fenced(db.update(locks).set({ state: 'x' }).where(eq(locks.id, 1)), token, { column: 'lockToken' });
}

/** The same on drizzle-orm/postgres-js's own types (compile-time only). */
export function postgresJsTypeChecks(db: ReturnType<typeof drizzlePostgresJs>, token: bigint): void {
  void db.transaction(async (tx) => {
    const { token: mine } = await d.xactLock(tx, 'n', { fencing: true });
    await tx.transaction(async (sp) => d.tryXactLock(sp, 'm'));
    await d.fenced(tx.update(shipments).set({ state: 'x' }).where(eq(shipments.id, 1)), mine).execute();
    const claim = await d.fencedClaim(tx, { table: shipments, where: { id: 1 }, token });
    expectTypeOf(claim.rows[0]!.fencingToken).toEqualTypeOf<bigint | null>();
  });
  void d.fencedUpdate(db, { table: shipments, set: { state: 'x' }, where: { id: 1 }, token });
  void d.migratePgfence(db);
}
