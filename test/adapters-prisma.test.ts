// pgfence/prisma beyond the conformance suite (test/adapters.test.ts): models and fields mapped to tables
// and columns (@@map, @map), Prisma's value types both ways, the typed specs, Prisma's interactive
// transactions (a new tx each, nested ones, their timeout), Prisma's wrapped errors as typed PgfenceErrors,
// and the migrations (pgfence's schema as a Prisma migration, the fencing and version columns).
// The client is generated from test/fixtures/prisma/schema.prisma (test/support/adapters/prisma-client.ts).
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, LockUnavailableError, migrate, NestedLockError, NotInTransactionError, StaleTokenError, TransactionAbortedError, xactLock as pgXactLock } from '../src/index.js';
import * as p from '../src/adapters/prisma/index.js';
import { writePgfenceMigrationFrom } from '../src/adapters/prisma/migrations.js';
import { PrismaDriverError } from '../src/adapters/prisma/driver-error.js';
import type { Prisma, PrismaClient } from './fixtures/prisma/generated/client.js';
import { eventually, freePortUrl, sleep, useMigratedDatabase, useTestDatabase } from './support/db.js';
import { importPrismaClient } from './support/adapters/prisma-client.js';

type Tx = Prisma.TransactionClient;
type Generated = { PrismaClient: new (options: { adapter: PrismaPg }) => PrismaClient; Prisma: typeof Prisma };

const root = fileURLToPath(new URL('..', import.meta.url));
let url: string;
let generated: Generated;
let prisma: PrismaClient;
let observer: pg.Pool;
const clients: PrismaClient[] = [];
/** A PrismaClient of the test's own on `on` (disconnected after the file). */
const newClient = (on = url) => {
  const c = new generated.PrismaClient({ adapter: new PrismaPg({ connectionString: on, max: 3 }) });
  clients.push(c);
  return c;
};
const settled = <T>(promise: Promise<T>): Promise<T | unknown> => promise.then((v) => v, (e: unknown) => e);
/** A fencing token issued now (node-postgres), so tokens in a test are real ones. */
async function issue(name: string): Promise<bigint> {
  const c = await observer.connect();
  try {
    await c.query('BEGIN');
    const { token } = await pgXactLock(c, name, { fencing: true });
    await c.query('COMMIT');
    return token;
  } finally {
    c.release();
  }
}

beforeAll(async () => {
  generated = await importPrismaClient<Generated>();
  url = (await useMigratedDatabase('prisma')).url;
  observer = new pg.Pool({ connectionString: url, max: 4 });
  // The tables Prisma Migrate would create for the fixture schema; orders' fencing column and documents'
  // version column come from pgfence/prisma's own migrations, as a user adds them.
  await observer.query(`
    CREATE TABLE conformance_items (id int PRIMARY KEY, label text, n int NOT NULL DEFAULT 0, fencing_token bigint, version bigint NOT NULL DEFAULT 0);
    CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);
    CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, customer_id int REFERENCES customers (id));
    CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, fencing_token bigint);
    CREATE TABLE documents (id int PRIMARY KEY, body text NOT NULL);
    CREATE TYPE "ShipmentState" AS ENUM ('packed', 'shipped');
    CREATE TABLE "Shipment" (id int PRIMARY KEY, weight decimal(65,30) NOT NULL, shipped_at timestamp(3), meta jsonb, tags text[],
      state "ShipmentState" NOT NULL DEFAULT 'packed', label bytea, fence_token bigint, rev int NOT NULL DEFAULT 0);`);
  await observer.query(p.fencingColumnMigration('orders', { enforce: true }).sql);
  await observer.query(p.versionColumnMigration('documents').sql);
  prisma = newClient();
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.$disconnect()));
  await observer?.end();
});

/** Compile-time checks of the typed specs (tsc runs over test/): never called. */
function typeChecks(tx: Tx, client: PrismaClient, token: bigint): void {
  void p.fencedUpdate(tx, { model: 'Order', set: { status: 'paid' }, where: { id: 1, customerId: null }, token });
  // @ts-expect-error: no such model
  void p.fencedUpdate(tx, { model: 'Invoice', set: {}, where: { id: 1 }, token });
  // @ts-expect-error: no such field
  void p.fencedUpdate(tx, { model: 'Order', set: { state: 'paid' }, where: { id: 1 }, token });
  // @ts-expect-error: a field's type (status is a String)
  void p.fencedUpdate(tx, { model: 'Order', set: { status: 1 }, where: { id: 1 }, token });
  // @ts-expect-error: a relation is not a column
  void p.fencedUpdate(tx, { model: 'Order', set: { customer: null }, where: { id: 1 }, token });
  // @ts-expect-error: the fencing field is fencedUpdate's to write
  void p.fencedUpdate(tx, { model: 'Order', set: { fencingToken: 1n }, where: { id: 1 }, token });
  // @ts-expect-error: ... also under another name
  void p.fencedUpdate(tx, { model: 'Shipment', set: { fence: 1n }, where: { id: 1 }, token, field: 'fence' });
  // @ts-expect-error: the fencing field is one of the model's
  void p.fencedUpdate(tx, { model: 'Order', set: {}, where: { id: 1 }, token, field: 'fence' });
  // @ts-expect-error: a token is a bigint
  void p.fencedUpdate(tx, { model: 'Order', set: {}, where: { id: 1 }, token: 1 });
  void p.fencedClaim(tx, { model: 'Counter', where: { id: 1 }, token }).then((c) => {
    const n: number = c.rows[0]!.n;
    const claimedBy: bigint = c.rows[0]!.fencingToken; // the token, never null
    // @ts-expect-error: rows have the model's fields, not its columns
    void c.rows[0]!.fencing_token;
    void [n, claimedBy];
  });
  void p.fencedClaim(tx, { model: 'Shipment', where: { id: 1 }, token, field: 'fence' }).then((c) => {
    const weight: Prisma.Decimal = c.rows[0]!.weight;
    const fence: bigint = c.rows[0]!.fence;
    void [weight, fence];
  });
  void p.versionedUpdate(client, { model: 'Document', set: { body: 'x' }, where: { id: 1 }, version: 1n });
  // @ts-expect-error: the version field is versionedUpdate's to write
  void p.versionedUpdate(client, { model: 'Document', set: { version: 2n }, where: { id: 1 }, version: 1n });
  void p.xactLock(tx, 'n', { fencing: true }).then((r) => {
    const t: bigint = r.token;
    void t;
  });
  // @ts-expect-error: a transaction lock needs the transaction client, not the PrismaClient
  void p.xactLock(client, 'n');
}
void typeChecks;

describe('models and fields as tables and columns', () => {
  it('fencedUpdate writes the mapped columns (@@map, @map) and stores the token in the fencing field’s column', async () => {
    await observer.query(`INSERT INTO customers VALUES (7, 'ada'); INSERT INTO orders (id, status, customer_id) VALUES (1, 'new', 7), (2, 'new', NULL)`);
    const older = await issue('order:1');
    const token = await issue('order:1');
    const r = await prisma.$transaction((tx) => p.fencedUpdate(tx, { model: 'Order', set: { status: 'paid' }, where: { id: 1, customerId: 7 }, token }));
    expect(r).toEqual({ applied: true, written: 1, refused: 0 });
    expect((await observer.query(`SELECT id, status, fencing_token FROM orders ORDER BY id`)).rows).toEqual([
      { id: 1, status: 'paid', fencing_token: String(token) },
      { id: 2, status: 'new', fencing_token: null },
    ]);
    // null in `where` is IS NULL, through the field's column too.
    expect(await p.fencedUpdate(prisma, { model: 'Order', set: { status: 'orphan' }, where: { customerId: null }, token })).toMatchObject({ applied: true, written: 1 });
    expect(await p.fencedUpdate(prisma, { model: 'Order', set: {}, where: { id: 1 }, token: older })).toEqual({ applied: false, written: 0, refused: 1, reason: 'stale', currentToken: token });
  });

  it('fencedClaim returns the rows by field name with Prisma’s types; a fencing field of another name with `field`', async () => {
    await observer.query(`INSERT INTO "Shipment" (id, weight, shipped_at, meta, tags, state, label) VALUES
      (1, 12.5, '2024-05-01 10:00:00', '{"fragile": true}', '{a,b}', 'shipped', '\\x0102')`);
    const token = await issue('shipment:1');
    const claim = await p.fencedClaim(prisma, { model: 'Shipment', where: { id: 1 }, token, field: 'fence' });
    expect(claim).toMatchObject({ claimed: true, refused: 0 });
    const row = claim.rows[0]!;
    expect(Object.keys(row).sort()).toEqual(['fence', 'id', 'label', 'meta', 'revision', 'shippedAt', 'state', 'tags', 'weight']);
    expect(row).toMatchObject({ id: 1, fence: token, meta: { fragile: true }, tags: ['a', 'b'], state: 'shipped', revision: 0, shippedAt: new Date('2024-05-01T10:00:00Z') });
    expect(row.weight).toBeInstanceOf(generated.Prisma.Decimal);
    expect(row.weight.toString()).toBe('12.5');
    expect([...row.label!]).toEqual([1, 2]);
    // The same row read by Prisma itself: what a claim returns is what Prisma reads.
    const read = await prisma.shipment.findUniqueOrThrow({ where: { id: 1 } });
    expect({ ...row, weight: row.weight.toString(), label: [...row.label!] }).toEqual({ ...read, weight: read.weight.toString(), label: [...read.label!] });
    expect((await observer.query(`SELECT fence_token FROM "Shipment" WHERE id = 1`)).rows).toEqual([{ fence_token: String(token) }]);
  });

  it('writes Prisma’s values: Decimal, DateTime, Json (a string, an array, an object, null), lists, enums, Bytes', async () => {
    await observer.query(`INSERT INTO "Shipment" (id, weight) VALUES (2, 1)`);
    const token = await issue('shipment:2');
    const { Decimal } = generated.Prisma;
    const write = (meta: Prisma.InputJsonValue | null) =>
      p.fencedUpdate(prisma, {
        model: 'Shipment',
        set: { weight: new Decimal('2.25'), shippedAt: new Date('2025-01-02T03:04:05Z'), meta: meta as never, tags: ['x'], state: 'packed', label: new Uint8Array([9]), revision: 3 },
        where: { id: 2 },
        token,
        field: 'fence',
      });
    const stored = async () => (await observer.query(`SELECT weight::text, shipped_at::text, meta, tags, state::text, label, rev FROM "Shipment" WHERE id = 2`)).rows[0];
    for (const meta of ['just text', [1, 'two'], { nested: { ok: true } }, null]) {
      expect(await write(meta)).toMatchObject({ applied: true });
      expect((await stored()).meta).toEqual(meta);
    }
    expect(await stored()).toEqual({ weight: '2.250000000000000000000000000000', shipped_at: '2025-01-02 03:04:05', meta: null, tags: ['x'], state: 'packed', label: Buffer.from([9]), rev: 3 });
  });

  it('refuses an unknown model, field or fencing field, and a relation, before any I/O', async () => {
    const nowhere = newClient(await freePortUrl(url)); // any statement would fail to connect
    const refusals: [() => Promise<unknown>, string][] = [
      [() => p.fencedUpdate(nowhere, { model: 'Invoice' as 'Order', set: {}, where: { id: 1 }, token: 1n }), 'model'],
      [() => p.fencedUpdate(nowhere, { model: 'Order', set: { state: 'x' } as never, where: { id: 1 }, token: 1n }), 'set.state'],
      [() => p.fencedUpdate(nowhere, { model: 'Order', set: {}, where: { fencing_token: 1n } as never, token: 1n }), 'where.fencing_token'],
      [() => p.fencedUpdate(nowhere, { model: 'Order', set: { customer: null } as never, where: { id: 1 }, token: 1n }), 'set.customer'],
      [() => p.fencedClaim(nowhere, { model: 'Order', where: { id: 1 }, token: 1n, field: 'fence' as never }), 'field'],
      [() => p.fencedClaim(nowhere, { model: 'Order', where: { id: 1 }, token: 1n, set: {} } as never), 'set'],
      [() => p.versionedUpdate(nowhere, { model: 'Document', set: { body: 'x' }, where: { id: 1 }, version: 0n, colum: 'v' } as never), 'versionedUpdate spec'],
      [() => p.fencedUpdate({ $queryRawUnsafe: async () => [], $executeRawUnsafe: async () => 0 } as never, { model: 'Order', set: {}, where: { id: 1 }, token: 1n } as never), 'db'],
      [() => p.fencedUpdate({} as PrismaClient, { model: 'Order', set: {}, where: { id: 1 }, token: 1n }), 'db'],
    ];
    for (const [refusal, argument] of refusals) {
      const err = await settled(refusal());
      expect(err, argument).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message, argument).toMatch(new RegExp(`^${argument.replace('.', '\\.')}:`));
    }
  });
});

describe("Prisma's interactive transactions", () => {
  it('a new transaction client per transaction: one name in two transactions of one client, one after the other', async () => {
    const seen: Tx[] = [];
    for (let i = 0; i < 2; i++) {
      await prisma.$transaction(async (tx) => {
        seen.push(tx);
        expect((await p.xactLock(tx, 'tx:sequential', { fencing: true })).token).toBeGreaterThan(0n);
      });
    }
    expect(seen[0]).not.toBe(seen[1]);
  });

  it('nested transactions (savepoints) are one PostgreSQL transaction: the same name at any depth is NestedLockError', async () => {
    await prisma.$transaction(async (tx) => {
      await p.xactLock(tx, 'tx:outer');
      await tx.$transaction(async (inner) => {
        expect(await settled(p.xactLock(inner, 'tx:outer'))).toBeInstanceOf(NestedLockError);
        await p.xactLock(inner, 'tx:inner');
      });
      // Taken in the nested transaction, which committed to its savepoint: still this transaction's.
      expect(await settled(p.tryXactLock(tx, 'tx:inner'))).toBeInstanceOf(NestedLockError);
    });
  });

  it('the PrismaClient itself and an extended client: NotInTransactionError outside, the lock inside', async () => {
    expect(await settled(p.xactLock(prisma as never, 'tx:outside'))).toBeInstanceOf(NotInTransactionError);
    const extended = prisma.$extends({ query: { $allOperations: ({ args, query }) => query(args) } });
    expect(await settled(p.tryXactLock(extended as never, 'tx:outside'))).toBeInstanceOf(NotInTransactionError);
    const r = await extended.$transaction(async (tx) => p.tryXactLock(tx, 'tx:extended', { fencing: true }));
    expect(r?.token).toBeGreaterThan(0n);
  });

  it('a transaction Prisma closed at its timeout: TransactionAbortedError naming the timeout, never Prisma’s own error', async () => {
    const outcome = await settled(
      prisma.$transaction(
        async (tx) => {
          // Time passes with nothing in flight: Prisma closes the transaction at 50 ms (its ROLLBACK then
          // finds the connection idle; a statement in flight is the child-process scenario below).
          await sleep(300);
          return p.xactLock(tx, 'tx:expired');
        },
        { timeout: 50 },
      ),
    );
    expect(outcome).toBeInstanceOf(TransactionAbortedError);
    const cause = (outcome as Error).cause;
    expect(cause).toBeInstanceOf(PrismaDriverError);
    expect(cause).toMatchObject({ code: '25P02', message: expect.stringMatching(/Prisma closed this interactive transaction \(P2028: .*timeout.*\); give prisma\.\$transaction\(\) a timeout/) });
    expect((cause as Error).cause).toMatchObject({ code: 'P2028' });
  });

  // In processes of their own: in both, @prisma/adapter-pg queues a statement on node-postgres' client
  // behind one still running (Prisma's ROLLBACK at its timeout; the doom), which pg 8 warns about
  // (test/support/no-pg-deprecations.ts would fail this file).
  const scenario = async (name: 'outlived' | 'doomed') => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', './test/support/ts-loader.mjs', 'test/fixtures/prisma/scenarios.ts', name, url], { cwd: root, timeout: 60_000 });
    return JSON.parse(stdout.trim().split('\n').at(-1)!) as Record<string, unknown>;
  };

  it('a fenced wait that outlives the transaction’s timeout: TransactionAbortedError, and the lock goes with the transaction (child process)', async () => {
    expect(await scenario('outlived')).toEqual({ lock: 'PGFENCE_TRANSACTION_ABORTED', cause: '25P02', prisma: 'P2028', locksLeft: 0 });
  });

  it('a doomed transaction: the statement the caller sends next is refused, not batched away by Prisma (child process)', async () => {
    expect(await scenario('doomed')).toEqual({ lock: 'PGFENCE_UNAVAILABLE', later: '25P02', kept: 0 });
  });
});

describe('errors through Prisma, typed', () => {
  it('the enforcing trigger refuses Prisma’s own older write; a missing version column: PGFENCE_NOT_MIGRATED; a missing table: InvalidArgumentError', async () => {
    await observer.query(`INSERT INTO orders (id, status) VALUES (10, 'new')`);
    const token = await issue('order:10');
    expect(await p.fencedUpdate(prisma, { model: 'Order', set: { status: 'paid' }, where: { id: 10 }, token })).toMatchObject({ applied: true });
    // Whoever writes: Prisma itself writing an older token is refused by the trigger fencingColumnMigration installed.
    expect(await settled(prisma.order.update({ where: { id: 10 }, data: { fencingToken: token - 1n } }))).toMatchObject({ message: expect.stringMatching(/PGF01/) });
    const noColumn = await settled(p.versionedUpdate(prisma, { model: 'Order', set: { status: 'x' }, where: { id: 10 }, version: 0n }));
    expect(noColumn).toMatchObject({ code: 'PGFENCE_NOT_MIGRATED', message: expect.stringContaining('ADD COLUMN IF NOT EXISTS "version"') });
    expect((noColumn as Error).cause).toMatchObject({ code: '42703', severity: 'ERROR' });
    await observer.query(`DROP TABLE counters`);
    try {
      const noTable = await settled(p.fencedUpdate(prisma, { model: 'Counter', set: { n: 1 }, where: { id: 1 }, token }));
      expect(noTable).toBeInstanceOf(InvalidArgumentError);
      expect((noTable as Error).cause).toMatchObject({ code: '42P01' });
    } finally {
      await observer.query(`CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, fencing_token bigint)`);
    }
  });

  it('StaleTokenError from the trigger through fencedUpdate (Prisma’s postgres-kind error)', async () => {
    await observer.query(`INSERT INTO orders (id, status, fencing_token) VALUES (11, 'new', 100)`);
    // The guard refuses an older token first; a trigger of a column written in `set` shows the trigger's refusal.
    await observer.query(`CREATE FUNCTION refuse_status() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = 'PGF01'; END$$;
      CREATE TRIGGER refuse_status BEFORE UPDATE OF status ON orders FOR EACH ROW WHEN (NEW.status = 'refused') EXECUTE FUNCTION refuse_status()`);
    try {
      const err = await settled(p.fencedUpdate(prisma, { model: 'Order', set: { status: 'refused' }, where: { id: 11 }, token: 200n }));
      expect(err).toBeInstanceOf(StaleTokenError);
      expect((err as Error).cause).toMatchObject({ code: 'PGF01', severity: 'ERROR' });
    } finally {
      await observer.query(`DROP TRIGGER refuse_status ON orders; DROP FUNCTION refuse_status()`);
    }
  });

  it('a connection PostgreSQL ends during a wait: LockUnavailableError, with the FATAL error as its cause', async () => {
    const holder = await observer.connect();
    try {
      await holder.query('BEGIN');
      await pgXactLock(holder, 'err:killed');
      let err: unknown;
      await settled(
        prisma.$transaction(async (tx) => {
          const { pid } = (await tx.$queryRawUnsafe<{ pid: number }[]>('SELECT pg_backend_pid() AS pid'))[0]!;
          const waiting = settled(p.xactLock(tx, 'err:killed', { timeoutMs: 30_000 }));
          await eventually(async () => (await observer.query(`SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted`, [pid])).rowCount === 1, 15_000, 'the wait');
          await observer.query('SELECT pg_terminate_backend($1)', [pid]);
          err = await waiting;
        }, { timeout: 60_000 }),
      ); // its COMMIT fails too: the connection is gone
      expect(err).toBeInstanceOf(LockUnavailableError);
      expect((err as Error).cause).toMatchObject({ code: '57P01', severity: 'FATAL' });
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
  });
});

describe('migrations', () => {
  const applied = async (on: string) => (await queryRows(on, `SELECT version, checksum, applied_at FROM pgfence.schema_migrations ORDER BY version`));
  async function queryRows(on: string, text: string): Promise<Record<string, unknown>[]> {
    const c = new pg.Client({ connectionString: on });
    await c.connect();
    try {
      return (await c.query(text)).rows;
    } finally {
      await c.end();
    }
  }

  it('pgfence’s schema as one Prisma migration: applies on a fresh database, after which migrate() applies nothing', async () => {
    const fresh = (await useTestDatabase('prisma_migration')).url;
    await queryRows(fresh, await p.pgfenceMigrationSql()); // as Prisma's schema engine sends migration.sql: one simple query
    expect(await migrate({ connectionString: fresh })).toEqual({ applied: [] });
    await queryRows(fresh, await p.pgfenceMigrationSql()); // again (a shadow database replays it): nothing changes
    expect(await migrate({ connectionString: fresh })).toEqual({ applied: [] });
    expect(await queryRows(fresh, `SELECT pgfence.interface_version() > 0 AS ok`)).toEqual([{ ok: true }]);
  });

  it('applies nothing where migrate() ran, runs beside a concurrent migrate(), and refuses an edited migration', async () => {
    const before = await applied(url);
    await queryRows(url, await p.pgfenceMigrationSql());
    expect(await applied(url)).toEqual(before);

    const racing = (await useTestDatabase('prisma_migration_race')).url;
    await Promise.all([queryRows(racing, await p.pgfenceMigrationSql()), migrate({ connectionString: racing })]);
    expect(await migrate({ connectionString: racing })).toEqual({ applied: [] });

    await queryRows(racing, `UPDATE pgfence.schema_migrations SET checksum = 'edited' WHERE version = 1`);
    await expect(queryRows(racing, await p.pgfenceMigrationSql())).rejects.toMatchObject({ message: expect.stringContaining('PGFENCE_MIGRATION_EDITED: migrations/0001') });
  });

  it('writePgfenceMigration: <timestamp>_pgfence/migration.sql, written again only when pgfence’s schema changed', async () => {
    await mkdir(join(root, '.pgfence-test'), { recursive: true });
    const dir = await mkdtemp(join(root, '.pgfence-test', 'prisma-migrations-'));
    try {
      const first = await p.writePgfenceMigration({ migrationsDir: dir, now: new Date('2025-01-02T03:04:05Z') });
      expect(first).toEqual({ path: join(dir, '20250102030405_pgfence'), written: true });
      expect(await readFile(join(first.path, 'migration.sql'), 'utf8')).toBe(await p.pgfenceMigrationSql());
      expect(await p.writePgfenceMigration({ migrationsDir: dir })).toEqual({ ...first, written: false });
      // Another pgfence's schema (a fixture): a new migration after the first.
      const fixture = join(root, 'test', 'fixtures', 'migrate', 'basic');
      const next = await writePgfenceMigrationFrom({ migrationsDir: dir, now: new Date('2025-02-01T00:00:00Z') }, { migrationsDir: join(fixture, 'migrations'), sqlDir: join(fixture, 'sql') });
      expect(next).toEqual({ path: join(dir, '20250201000000_pgfence'), written: true });
      expect((await readdir(dir)).sort()).toEqual(['20250102030405_pgfence', '20250201000000_pgfence']);
      expect(await settled(p.writePgfenceMigration({ migrationsDir: dir, name: 'pg fence' }))).toBeInstanceOf(InvalidArgumentError);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the fencing and version columns: their SQL and the fields to add, as the fixture schema has them', async () => {
    expect(p.fencingColumnMigration('orders')).toEqual({ sql: 'ALTER TABLE "orders" ADD COLUMN IF NOT EXISTS "fencing_token" bigint;\n', schemaField: 'fencingToken BigInt? @map("fencing_token")' });
    expect(p.fencingColumnMigration('Shipment', { column: 'fence_token', field: 'fence' }).schemaField).toBe('fence BigInt? @map("fence_token")');
    expect(p.versionColumnMigration('documents')).toEqual({ sql: 'ALTER TABLE "documents" ADD COLUMN IF NOT EXISTS "version" bigint NOT NULL DEFAULT 0;\n', schemaField: 'version BigInt @default(0)' });
    expect(p.versionColumnMigration('Shipment', { column: 'rev', field: 'revision' }).schemaField).toBe('revision BigInt @default(0) @map("rev")');
    const schema = await readFile(join(root, 'test', 'fixtures', 'prisma', 'schema.prisma'), 'utf8');
    expect(schema.replace(/\s+/g, ' ')).toContain('fencingToken BigInt? @map("fencing_token")');
    expect(() => p.fencingColumnMigration('orders', { field: 'fencing token' })).toThrow(InvalidArgumentError);
    // Applied in beforeAll: the columns are there, the trigger too.
    expect((await observer.query(`SELECT tgname FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal`)).rows).toEqual([{ tgname: 'pgfence_fencing_token' }]);
    await observer.query(`INSERT INTO documents (id, body) VALUES (1, 'draft')`);
    const doc = await prisma.document.findUniqueOrThrow({ where: { id: 1 } });
    expect(await p.versionedUpdate(prisma, { model: 'Document', set: { body: 'final' }, where: { id: 1 }, version: doc.version })).toEqual({ applied: true, currentVersion: 1n });
    expect(await p.versionedUpdate(prisma, { model: 'Document', set: { body: 'late' }, where: { id: 1 }, version: doc.version })).toEqual({ applied: false, reason: 'conflict', currentVersion: 1n });
  });
});

