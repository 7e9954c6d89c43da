// pgfence/typeorm beyond the conformance suite (test/adapters.test.ts): QueryRunner transactions, the
// entity mapping of guarded writes (property names, transformers, relations, schemas, hydrated rows),
// the builder idiom's SQL, and migrations through TypeORM's own migrator. Entities are EntitySchemas:
// the repository compiles without experimentalDecorators.
import 'reflect-metadata';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { DataSource, EntitySchema, QueryFailedError, type EntityManager, type EntitySubscriberInterface, type Logger, type QueryRunner, type UpdateEvent } from 'typeorm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, lockKey, migrate, NestedLockError, NotInTransactionError, type PgfenceError } from '../src/index.js';
import { migrationClassesFor, typeormMigrationName } from '../src/adapters/typeorm/migrations.js';
import { schemaMigrationSteps } from '../src/adapters/shared/index.js';
import type { MigrationFolders } from '../src/migrate/index.js';
import * as t from '../src/adapters/typeorm/index.js';
import { eventually, queryOnce, track, useMigratedDatabase, useTestDatabase } from './support/db.js';
import { advisoryLocksOf } from './support/server-locks.js';

/** A customer: the target of Account's relation. */
interface Customer {
  id: number;
  name: string;
}
const Customer = new EntitySchema<Customer>({
  name: 'Customer',
  tableName: 'customers',
  schema: 'bank',
  columns: { id: { type: 'int', primary: true }, name: { type: 'text' } },
});

/** A class of its own, so that claimed rows can be seen to be instances of it. */
class Account {
  id!: number;
  ownerName!: string;
  balance!: number;
  openedOn!: Date | null;
  fencingToken!: bigint | null;
  version!: number;
  customer!: Customer | null;
  describe(): string {
    return `${this.ownerName}: ${this.balance}`;
  }
}
/** Cents in the database, a decimal amount in the entity: TypeORM's column transformers, both ways. */
const cents = { to: (v: number | null) => (v === null ? null : Math.round(v * 100)), from: (v: number | null) => (v === null ? null : v / 100) };
const int8 = { to: (v: bigint | null) => (v === null ? null : v.toString()), from: (v: string | null) => (v === null ? null : BigInt(v)) };
const AccountSchema = new EntitySchema<Account>({
  name: 'Account',
  target: Account,
  tableName: 'accounts',
  schema: 'bank',
  columns: {
    id: { type: 'int', primary: true },
    ownerName: { type: 'text', name: 'owner_name' },
    balance: { type: 'int', name: 'balance_cents', transformer: cents },
    openedOn: { type: 'timestamptz', name: 'opened_on', nullable: true },
    fencingToken: { type: 'bigint', name: 'fencing_token', nullable: true, transformer: int8 },
    version: { type: 'int', version: true, name: 'row_version' },
  },
  relations: { customer: { type: 'many-to-one', target: 'Customer', joinColumn: { name: 'customer_id' }, nullable: true } },
});

/** An entity that maps the fencing column under its SQL name, without a transformer. */
interface Ticket {
  id: number;
  state: string;
  fencing_token: string | null;
}
const Ticket = new EntitySchema<Ticket>({
  name: 'Ticket',
  tableName: 'tickets',
  columns: { id: { type: 'int', primary: true }, state: { type: 'text' }, fencing_token: { type: 'bigint', nullable: true } },
});

/** An entity whose table has no fencing column. */
const Plain = new EntitySchema<{ id: number; note: string }>({ name: 'Plain', tableName: 'plain', columns: { id: { type: 'int', primary: true }, note: { type: 'text' } } });

/** An entity whose table was never created. */
const Ghost = new EntitySchema<{ id: number }>({ name: 'Ghost', tableName: 'ghosts', columns: { id: { type: 'int', primary: true } } });

/** Every statement TypeORM sends through its query runners (pgfence's wait scripts excepted). */
const statements: string[] = [];
const logger: Logger = {
  logQuery: (query) => void statements.push(query),
  logQueryError: () => {},
  logQuerySlow: () => {},
  logSchemaBuild: () => {},
  logMigration: () => {},
  log: () => {},
};

/** What Account's update listeners saw. */
const updates: string[] = [];
class AccountSubscriber implements EntitySubscriberInterface<Account> {
  listenTo() {
    return Account;
  }
  beforeUpdate(event: UpdateEvent<Account>) {
    updates.push(`before ${JSON.stringify(event.entity)}`);
  }
  afterUpdate(event: UpdateEvent<Account>) {
    updates.push(`after ${JSON.stringify(event.entity)}`);
  }
}

let url: string;
let dataSource: DataSource;
let observer: pg.Pool;

async function openDataSource(at: string, extra: Partial<ConstructorParameters<typeof DataSource>[0]> = {}): Promise<DataSource> {
  const ds = new DataSource({ type: 'postgres', url: at, poolSize: 4, ...extra } as ConstructorParameters<typeof DataSource>[0]);
  await ds.initialize();
  track({ close: () => ds.destroy() });
  return ds;
}

beforeAll(async () => {
  url = (await useMigratedDatabase('typeorm')).url;
  observer = new pg.Pool({ connectionString: url, max: 3 });
  await observer.query(`
    CREATE SCHEMA bank;
    CREATE TABLE bank.customers (id int PRIMARY KEY, name text NOT NULL);
    CREATE TABLE bank.accounts (id int PRIMARY KEY, owner_name text NOT NULL, balance_cents int NOT NULL, opened_on timestamptz,
      fencing_token bigint, row_version int NOT NULL DEFAULT 1, customer_id int REFERENCES bank.customers);
    CREATE TABLE tickets (id int PRIMARY KEY, state text NOT NULL, fencing_token bigint);
    CREATE TABLE plain (id int PRIMARY KEY, note text NOT NULL);
    INSERT INTO bank.customers VALUES (1, 'Ada'), (2, 'Brian');`);
  dataSource = await openDataSource(url, { entities: [Customer, AccountSchema, Ticket, Plain, Ghost], logger });
  // Without decorators (@EventSubscriber), a subscriber is registered on the initialized DataSource.
  dataSource.subscribers.push(new AccountSubscriber());
});
afterAll(async () => {
  await observer?.end();
});

/** What a promise settled with: its value, or the error it rejected with. */
const settled = <T>(p: Promise<T>): Promise<T | unknown> => p.then((v) => v, (e: unknown) => e);

/** A query runner of the DataSource's own, rolled back (if need be) and released after `fn`. */
async function withRunner<T>(fn: (runner: QueryRunner) => Promise<T>): Promise<T> {
  const runner = dataSource.createQueryRunner();
  try {
    return await fn(runner);
  } finally {
    if (runner.isTransactionActive) await runner.rollbackTransaction();
    await runner.release();
  }
}

const held = async (name: string) => (await advisoryLocksOf(url, lockKey(name))) > 0;
const waiting = async (name: string) => (await advisoryLocksOf(url, lockKey(name), false)) > 0;

describe('xactLock on a QueryRunner, which outlives its transactions', () => {
  it('holds until commit, refuses the same name again in one transaction, and takes it again in the next one', async () => {
    const name = 'typeorm:runner';
    await withRunner(async (runner) => {
      for (let round = 0; round < 3; round++) {
        await runner.startTransaction();
        const { token } = await t.xactLock(runner, name, { fencing: true });
        expect(typeof token).toBe('bigint');
        expect(await held(name)).toBe(true);
        expect(await settled(t.xactLock(runner, name))).toBeInstanceOf(NestedLockError);
        // The transaction's manager is the same transaction.
        expect(await settled(t.tryXactLock(runner.manager, name))).toBeInstanceOf(NestedLockError);
        await runner.commitTransaction();
        expect(await held(name)).toBe(false);
      }
    });
  });

  it('after a wait (the savepoint script), still knows the lock is this transaction’s, and not the next one’s', async () => {
    const name = 'typeorm:waited';
    await withRunner(async (holder) => {
      await holder.startTransaction();
      await t.xactLock(holder, name);
      await withRunner(async (waiter) => {
        await waiter.startTransaction();
        const granted = t.xactLock(waiter, name, { fencing: true, timeoutMs: 30_000 });
        await eventually(() => waiting(name), 15_000, 'the waiter to queue in the server');
        await holder.commitTransaction();
        expect(typeof (await granted).token).toBe('bigint');
        expect(await settled(t.xactLock(waiter, name))).toBeInstanceOf(NestedLockError);
        await waiter.commitTransaction();
        await waiter.startTransaction();
        expect(await t.tryXactLock(waiter, name)).not.toBeNull();
        await waiter.commitTransaction();
      });
    });
  });

  it('a nested manager.transaction() (a savepoint) belongs to its transaction', async () => {
    const name = 'typeorm:savepoint';
    const rolledBack = new Error('the savepoint’s own failure');
    await dataSource.transaction(async (manager) => {
      const inner = await settled(
        manager.transaction(async (savepoint) => {
          await t.xactLock(savepoint, name);
          throw rolledBack;
        }),
      );
      expect(inner).toBe(rolledBack);
      // PostgreSQL gave the lock back with the savepoint; as on a node-postgres client, pgfence still counts it as this transaction's.
      expect(await held(name)).toBe(false);
      expect(await settled(t.xactLock(manager, name))).toBeInstanceOf(NestedLockError);
      await manager.transaction((savepoint) => t.xactLock(savepoint, `${name}:kept`));
      expect(await held(`${name}:kept`)).toBe(true);
    });
    expect(await held(`${name}:kept`)).toBe(false);
  });

  it('outside a transaction: NotInTransactionError, without a statement when TypeORM knows; a BEGIN sent by hand counts', async () => {
    const name = 'typeorm:outside';
    const sent = statements.length;
    expect(await settled(t.xactLock(dataSource.manager, name))).toBeInstanceOf(NotInTransactionError);
    const ended = await dataSource.transaction(async (manager) => manager);
    expect(await settled(t.xactLock(ended, name))).toBeInstanceOf(NotInTransactionError);
    expect(statements.length - sent).toBe(2); // the ended transaction's own START TRANSACTION and COMMIT
    await withRunner(async (runner) => {
      // Not started through TypeORM: the server decides, in the lock's own statement.
      expect(await settled(t.xactLock(runner, name))).toBeInstanceOf(NotInTransactionError);
      await runner.query('BEGIN');
      expect(await t.xactLock(runner, name)).toMatchObject({ key: lockKey(name) });
      expect(await held(name)).toBe(true);
      await runner.query('COMMIT');
      expect(await held(name)).toBe(false);
    });
  });

  it('refuses what is not a TypeORM manager or runner of a PostgreSQL DataSource, before any I/O', async () => {
    const mysqlManager = { '@instanceof': Symbol.for('EntityManager'), dataSource: { options: { type: 'mysql' } } };
    for (const bad of [dataSource, {}, null, 'manager', mysqlManager]) {
      const err = await settled(t.xactLock(bad as EntityManager, 'typeorm:bad'));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as InvalidArgumentError).argument).toBe('trx');
    }
    expect(await settled(t.fencedUpdate(mysqlManager as unknown as EntityManager, { entity: Plain, set: { note: 'x' }, where: { id: 1 }, token: 1n }))).toMatchObject({
      code: 'PGFENCE_INVALID_ARGUMENT',
      message: expect.stringContaining("type 'postgres'"),
    });
  });
});

describe('fencedUpdate, fencedClaim, versionedUpdate typed from entities', () => {
  beforeAll(async () => {
    await observer.query(`INSERT INTO bank.accounts (id, owner_name, balance_cents, customer_id) VALUES (1, 'Ada', 1000, 1), (2, 'Brian', 500, 2), (3, 'Cleo', 0, NULL)`);
  });
  const account = async (id: number) =>
    (await observer.query(`SELECT owner_name, balance_cents, opened_on, fencing_token, row_version, customer_id FROM bank.accounts WHERE id = $1`, [id])).rows[0];

  it('checks entities, properties and values at compile time', () => {
    const compileOnly = (_: () => unknown) => {};
    const m = dataSource.manager;
    compileOnly(() => [
      t.fencedUpdate(m, { entity: AccountSchema, set: { balance: 1.5, ownerName: 'x' }, where: { id: 1 }, token: 1n }),
      t.fencedUpdate(m, { entity: Account, set: { balance: 1.5 }, where: { customer: { id: 1, name: 'Ada' } }, token: 1n }),
      // @ts-expect-error: not a property of Account (its column is owner_name)
      t.fencedUpdate(m, { entity: AccountSchema, set: { owner_name: 'x' }, where: { id: 1 }, token: 1n }),
      // @ts-expect-error: a value of the wrong type
      t.fencedUpdate(m, { entity: AccountSchema, set: { balance: 'a lot' }, where: { id: 1 }, token: 1n }),
      // @ts-expect-error: the fencing property is written by fencedUpdate itself
      t.fencedUpdate(m, { entity: AccountSchema, set: { fencingToken: 9n }, where: { id: 1 }, token: 1n, column: 'fencingToken' }),
      // @ts-expect-error: a method is not a column
      t.fencedUpdate(m, { entity: AccountSchema, set: { describe: () => '' }, where: { id: 1 }, token: 1n }),
      // @ts-expect-error: where names a property Account lacks
      t.fencedClaim(m, { entity: AccountSchema, where: { idd: 1 }, token: 1n }),
      // @ts-expect-error: a token is a bigint
      t.fencedClaim(m, { entity: AccountSchema, where: { id: 1 }, token: 1 }),
      // @ts-expect-error: the version column is written by versionedUpdate itself
      t.versionedUpdate(m, { entity: AccountSchema, set: { version: 3 }, where: { id: 1 }, version: 2 }),
      // An entity named by a string is not checked.
      t.fencedUpdate(m, { entity: 'Account', set: { anything: 1 }, where: { id: 1 }, token: 1n }),
    ]);
    const claimed = async () => {
      const r = await t.fencedClaim(m, { entity: AccountSchema, where: { id: 1 }, token: 1n });
      const balance: number = r.rows[0]!.balance;
      // @ts-expect-error: rows are Accounts (owner_name is their column, not a property)
      return [balance, r.rows[0]!.owner_name];
    };
    void claimed;
  });

  it('writes properties to their columns, values prepared as TypeORM writes them (transformers, dates, related entities)', async () => {
    const openedOn = new Date('2024-01-02T03:04:05.000Z');
    await dataSource.transaction(async (manager) => {
      const r = await t.fencedUpdate(manager, {
        entity: AccountSchema,
        set: { balance: 12.5, openedOn, customer: { id: 2, name: 'Brian' } },
        where: { id: 1, balance: 10, customer: { id: 1, name: 'Ada' } },
        token: 5n,
      });
      expect(r).toEqual({ applied: true, written: 1, refused: 0 });
    });
    expect(await account(1)).toEqual({ owner_name: 'Ada', balance_cents: 1250, opened_on: openedOn, fencing_token: '5', row_version: 1, customer_id: 2 });
    // An older token, and a row the where does not match (balance 10 is gone).
    expect(await t.fencedUpdate(dataSource.manager, { entity: Account, set: { balance: 0 }, where: { id: 1 }, token: 4n })).toEqual({
      applied: false,
      written: 0,
      refused: 1,
      reason: 'stale',
      currentToken: 5n,
    });
    expect(await t.fencedUpdate(dataSource.manager, { entity: Account, set: { balance: 0 }, where: { id: 1, balance: 10 }, token: 6n })).toMatchObject({ reason: 'missing' });
    // null matches IS NULL; the fencing column may be named by its property.
    expect(await t.fencedUpdate(dataSource.manager, { entity: Account, set: { ownerName: 'Cleo B.' }, where: { customer: null }, token: 3n, column: 'fencingToken' })).toEqual({
      applied: true,
      written: 1,
      refused: 0,
    });
    expect(await account(3)).toMatchObject({ owner_name: 'Cleo B.', fencing_token: '3' });
  });

  it('fencedClaim gives back entities, as TypeORM loads them (an instance of the class, transformers applied, the token in its property)', async () => {
    const claim = await dataSource.transaction((manager) => t.fencedClaim(manager, { entity: AccountSchema, where: { id: 2 }, token: 7n }));
    expect(claim).toMatchObject({ claimed: true, refused: 0 });
    const [row] = claim.rows;
    expect(row).toBeInstanceOf(Account);
    expect(row!.describe()).toBe('Brian: 5');
    const loaded = await dataSource.manager.findOneByOrFail(AccountSchema, { id: 2 });
    expect(row).toEqual(loaded);
    expect(row!.fencingToken).toBe(7n);
    expect(await t.fencedClaim(dataSource.manager, { entity: AccountSchema, where: { id: 2 }, token: 6n })).toEqual({ claimed: false, rows: [], refused: 1, reason: 'stale', currentToken: 7n });
    // Without a transformer, TypeORM loads a bigint column as a string: so does the claim.
    await observer.query(`INSERT INTO tickets VALUES (2, 'open', NULL)`);
    const ticket = await t.fencedClaim(dataSource.manager, { entity: Ticket, where: { id: 2 }, token: 8n });
    expect(ticket.rows).toEqual([await dataSource.manager.findOneByOrFail(Ticket, { id: 2 })]);
    expect(ticket.rows[0]!.fencing_token).toBe('8');
  });

  it('versionedUpdate writes the entity’s @VersionColumn, which TypeORM’s own updates increment too', async () => {
    const { version } = await dataSource.manager.findOneByOrFail(AccountSchema, { id: 3 });
    expect(await t.versionedUpdate(dataSource.manager, { entity: AccountSchema, set: { balance: 1 }, where: { id: 3 }, version })).toEqual({
      applied: true,
      currentVersion: BigInt(version + 1),
    });
    await dataSource.manager.update(AccountSchema, { id: 3 }, { ownerName: 'Cleo C.' });
    expect(await t.versionedUpdate(dataSource.manager, { entity: AccountSchema, set: { balance: 2 }, where: { id: 3 }, version: version + 1 })).toEqual({
      applied: false,
      reason: 'conflict',
      currentVersion: BigInt(version + 2),
    });
    expect(await account(3)).toMatchObject({ balance_cents: 100, row_version: version + 2 });
  });

  it('failures are typed PgfenceErrors carrying node-postgres’s error, not TypeORM’s QueryFailedError', async () => {
    const err = await settled(t.fencedUpdate(dataSource.manager, { entity: Plain, set: { note: 'x' }, where: { id: 1 }, token: 1n }));
    expect(err).toMatchObject({ code: 'PGFENCE_NOT_MIGRATED', message: expect.stringContaining('"plain" has no fencing column') });
    const cause = (err as PgfenceError).cause;
    expect(cause).not.toBeInstanceOf(QueryFailedError);
    expect(cause).toMatchObject({ code: '42703', severity: 'ERROR' });
    // The same through the builder, whose execute() is TypeORM's.
    const viaBuilder = await settled(t.fenced(dataSource.createQueryBuilder().update(Plain).set({ note: 'x' }).where({ id: 1 }), 1n).execute());
    expect(viaBuilder).toMatchObject({ code: 'PGFENCE_NOT_MIGRATED', cause: { code: '42703', severity: 'ERROR' } });
    expect((viaBuilder as PgfenceError).cause).not.toBeInstanceOf(QueryFailedError);
    // A table that is not there (the entity is the DataSource's; its table was never created).
    const ghost = await settled(t.fencedClaim(dataSource.manager, { entity: Ghost, where: { id: 1 }, token: 1n }));
    expect(ghost).toBeInstanceOf(InvalidArgumentError);
    expect(ghost).toMatchObject({ argument: 'table', cause: { code: '42P01', severity: 'ERROR' } });
  });

  it('refuses bad specs before any I/O, naming the property', async () => {
    const sent = statements.length;
    const refusals: [Promise<unknown>, string][] = [
      [t.fencedUpdate(dataSource.manager, { entity: AccountSchema, set: { nope: 1 } as never, where: { id: 1 }, token: 1n }), 'set.nope'],
      [t.fencedUpdate(dataSource.manager, { entity: AccountSchema, set: { balance: (() => 'balance_cents + 1') as never }, where: { id: 1 }, token: 1n }), 'set.balance'],
      [t.fencedClaim(dataSource.manager, { entity: AccountSchema, where: {}, token: 1n }), 'where'],
      [t.fencedClaim(dataSource.manager, { entity: 'Nobody', where: { id: 1 }, token: 1n }), 'entity'],
      [t.fencedUpdate(dataSource.manager, { table: 'plain' } as never), 'fencedUpdate spec'],
      [t.versionedUpdate(dataSource.manager, { entity: AccountSchema, set: { balance: 1 }, where: { id: 1 }, version: -1 }), 'version'],
    ];
    for (const [refusal, argument] of refusals) {
      const err = await settled(refusal);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as InvalidArgumentError).argument).toBe(argument);
    }
    expect(statements.length).toBe(sent);
  });
});

describe('fenced(updateQueryBuilder, token)', () => {
  beforeAll(async () => {
    await observer.query(`INSERT INTO bank.accounts (id, owner_name, balance_cents, fencing_token) VALUES (10, 'Dora', 100, 50), (11, 'Eli', 100, NULL), (12, 'Fay', 100, NULL)`);
  });
  const balances = async (...ids: number[]) =>
    (await observer.query<{ id: number; balance_cents: number; fencing_token: string | null }>(`SELECT id, balance_cents, fencing_token FROM bank.accounts WHERE id = ANY($1) ORDER BY id`, [ids])).rows;
  const update = (manager: EntityManager = dataSource.manager) => manager.createQueryBuilder().update(AccountSchema);

  it('guards the whole of the builder’s WHERE, ORs included, and counts what it matched', async () => {
    // Without parentheses the guard would bind to the last OR branch only, and account 10 (token 50) would be written.
    const r = await dataSource.transaction((manager) =>
      t.fenced(update(manager).set({ balance: 2 }).where('id = :first', { first: 10 }).orWhere({ id: 11 }), 40n).execute(),
    );
    expect(r).toEqual({ applied: false, written: 1, refused: 1, reason: 'stale', currentToken: 50n });
    expect(await balances(10, 11)).toEqual([
      { id: 10, balance_cents: 100, fencing_token: '50' },
      { id: 11, balance_cents: 200, fencing_token: '40' },
    ]);
    expect(await t.fenced(update().set({ balance: 3 }).whereInIds([11, 12]), 40n).execute()).toEqual({ applied: true, written: 2, refused: 0 });
    expect(await t.fenced(update().set({ balance: 3 }).where({ id: 999 }), 40n).execute()).toEqual({ applied: false, written: 0, refused: 0, reason: 'missing' });
    // whereEntity(): the entity is only a WHERE here (TypeORM would otherwise merge the statement's result into it).
    const fay = await dataSource.manager.findOneByOrFail(AccountSchema, { id: 12 });
    const before = { ...fay };
    expect(await t.fenced(update().set({ balance: 3.5 }).whereEntity(fay), 40n).execute()).toEqual({ applied: true, written: 1, refused: 0 });
    expect({ ...fay }).toEqual(before);
  });

  it('leaves the caller’s builder as it was, and shows its statement (TypeORM’s parameters, whatever their names)', async () => {
    const builder = update().set({ ownerName: 'Fay F.' }).where('id = :int', { int: 12 }).andWhere('owner_name <> :text', { text: 'nobody' });
    const bare = builder.getQueryAndParameters();
    const guarded = t.fenced(builder, 41n);
    const [sql, parameters] = guarded.getQueryAndParameters();
    expect(sql).toBe(`WITH "pgfence updated" AS (UPDATE "bank"."accounts" SET "owner_name" = $1, "row_version" = "row_version" + 1, "fencing_token" = $2 WHERE ("id" = $3 AND "owner_name" <> $4) AND ("fencing_token" IS NULL OR "fencing_token" <= $2) RETURNING 1)
SELECT CAST((SELECT count(*) FROM "pgfence updated") AS int) AS written,
       CAST((SELECT count(*) FROM "bank"."accounts" WHERE "id" = $3 AND "owner_name" <> $4) AS int) AS matched,
       CAST((SELECT max("fencing_token") FROM "bank"."accounts" WHERE "id" = $3 AND "owner_name" <> $4) AS text) AS current`);
    expect(parameters).toEqual(['Fay F.', 41n, 12, 'nobody']);
    expect(await guarded.execute()).toEqual({ applied: true, written: 1, refused: 0 });
    expect(builder.getQueryAndParameters()).toEqual(bare);
    await builder.execute(); // still the caller's plain update
    expect(await balances(12)).toEqual([{ id: 12, balance_cents: 350, fencing_token: '41' }]);
  });

  it('runs through the builder’s own execute(): the entity’s update subscribers see the caller’s values', async () => {
    updates.length = 0;
    await dataSource.transaction((manager) => t.fenced(update(manager).set({ ownerName: 'Eli E.' }).where({ id: 11 }), 42n).execute());
    expect(updates).toEqual(['before {"ownerName":"Eli E."}', 'after {"ownerName":"Eli E."}']);
  });

  it('refuses what it cannot guard, before any I/O', async () => {
    const sent = statements.length;
    const refusals: [() => unknown, string][] = [
      [() => t.fenced(dataSource.createQueryBuilder().select().from(AccountSchema, 'a') as never, 1n), 'builder'],
      [() => t.fenced(update().set({ balance: 1 }).where({ id: 10 }).returning('*'), 1n), 'builder'],
      [() => t.fenced(update().set({ fencingToken: 5n, balance: 1 }).where({ id: 10 }), 1n), 'builder'],
      [() => t.fenced(update().set({ balance: 1 }).where({ id: 10 }), 1n, { column: 'fencingToken', colum: 'x' } as never), 'fenced options'],
      [() => t.fenced(update().set({ balance: 1 }).where({ id: 10 }), 0n), 'token'],
      [() => t.fenced(update().set({ nope: 1 } as never).where({ id: 10 }), 1n), 'builder'],
    ];
    for (const [refusal, argument] of refusals) {
      let err: unknown;
      try {
        refusal();
      } catch (e) {
        err = e;
      }
      expect(err, argument).toBeInstanceOf(InvalidArgumentError);
      expect((err as InvalidArgumentError).argument).toBe(argument);
    }
    expect(statements.length).toBe(sent);
  });
});

describe("migrations through TypeORM's migrator", () => {
  const fixtures = fileURLToPath(new URL('./fixtures/migrate/', import.meta.url));
  const tempDirs: string[] = [];
  afterAll(async () => {
    await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });
  async function copyFixture(name: string): Promise<MigrationFolders> {
    const dir = await mkdtemp(join(tmpdir(), 'pgfence-typeorm-'));
    tempDirs.push(dir);
    await cp(join(fixtures, name), dir, { recursive: true });
    return { migrationsDir: join(dir, 'migrations'), sqlDir: join(dir, 'sql') };
  }
  type Migrations = NonNullable<ConstructorParameters<typeof DataSource>[0]['migrations']>;
  /** A DataSource on a fresh database's own, with `migrations`. */
  async function migrator(at: string, migrations: Migrations, extra: Partial<ConstructorParameters<typeof DataSource>[0]> = {}): Promise<DataSource> {
    return openDataSource(at, { migrations, ...extra });
  }
  const ran = async (ds: DataSource) => (await ds.runMigrations()).map((m) => m.name);
  /** pgfence's step names, as Kysely's provider has them, in the order the migrator must run them (by name). */
  const stepNames = async (folders?: MigrationFolders) => (await schemaMigrationSteps(folders)).map((s) => s.name).sort();
  const history = async (at: string) => (await queryOnce(at, 'SELECT version, applied_at::text FROM pgfence.schema_migrations ORDER BY version')).map((r) => JSON.stringify(r));

  it("runs pgfence's schema in order on an empty database, after which migrate() applies nothing, and the other way round", async () => {
    const fresh = (await useTestDatabase('typeorm_migrations')).url;
    const ds = await migrator(fresh, await t.pgfenceMigrations());
    const names = (await stepNames()).map(typeormMigrationName);
    expect(await ran(ds)).toEqual(names);
    expect(names[0]).toBe('pgfence_0001_schema_0000000100000');
    expect(await queryOnce(fresh, 'SELECT count(*)::int AS n FROM pgfence.schema_definitions')).toEqual([{ n: expect.any(Number) }]);
    expect(await migrate({ connectionString: fresh })).toEqual({ applied: [] });
    expect(await ran(ds)).toEqual([]);

    const migratedFirst = (await useTestDatabase('typeorm_after_migrate')).url;
    await migrate({ connectionString: migratedFirst });
    const before = await history(migratedFirst);
    // Applying 0001_schema.sql again would fail (CREATE TABLE without IF NOT EXISTS): every step only checks.
    expect(await ran(await migrator(migratedFirst, await t.pgfenceMigrations(), { migrationsTransactionMode: 'each' }))).toEqual(names);
    expect(await history(migratedFirst)).toEqual(before);
  });

  it('opens a transaction of its own for each step under migrationsTransactionMode none: a failing file leaves nothing behind', async () => {
    const fresh = (await useTestDatabase('typeorm_notx')).url;
    const sent = statements.length;
    const names = await ran(await migrator(fresh, await t.pgfenceMigrations(), { migrationsTransactionMode: 'none', logger }));
    expect(names).toHaveLength((await stepNames()).length);
    expect(statements.slice(sent).filter((s) => s === 'START TRANSACTION')).toHaveLength(names.length);
    expect(await migrate({ connectionString: fresh })).toEqual({ applied: [] });

    const failing = (await useTestDatabase('typeorm_notx_failing')).url;
    const ds = await migrator(failing, await migrationClassesFor({ migrationsDir: join(fixtures, 'failing', 'migrations'), sqlDir: join(fixtures, 'failing', 'sql') }), {
      migrationsTransactionMode: 'none',
      logger, // TypeORM would print the failure
    });
    await expect(ds.runMigrations()).rejects.toMatchObject({ code: 'PGFENCE_MIGRATION_FAILED' });
    const tables = await queryOnce<{ t: string }>(failing, `SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('fine', 'half_done', 'never') ORDER BY 1`);
    expect(tables.map((r) => r.t)).toEqual(['fine']);
  });

  it('orders names by number as they sort by name, and a changed definition set or a later file sorts last', async () => {
    // TypeORM orders by the number at the end of each name; Kysely by the name: the same order.
    const byNumber = (names: string[]) => [...names].sort((a, b) => Number(a.slice(-13)) - Number(b.slice(-13)));
    const packageNames = (await stepNames()).map(typeormMigrationName);
    expect(byNumber(packageNames)).toEqual(packageNames);

    const fresh = (await useTestDatabase('typeorm_defs')).url;
    const folders = await copyFixture('basic');
    const run = async () => ran(await migrator(fresh, await migrationClassesFor(folders)));
    expect(await run()).toEqual(['pgfence_0001_create_items_0000000100000', 'pgfence_0002_add_item_notes_0000000200000', 'pgfence_0002~definitions-r0001-e613e51b_0000000200001']);
    await writeFile(join(folders.sqlDir, 'fixture_version.sql'), 'CREATE OR REPLACE FUNCTION public.fixture_version() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;\n');
    const [changed] = await run();
    expect(changed).toMatch(/^pgfence_0002~definitions-r0002-[0-9a-f]{8}_0000000200002$/);
    expect(await queryOnce(fresh, 'SELECT public.fixture_version() AS v')).toEqual([{ v: 2 }]);
    await writeFile(join(folders.migrationsDir, '0003_more_items.sql'), 'CREATE TABLE public.more_items (id int);\n');
    const later = await run();
    // Until the new definitions name is logged, the plan renames it after the new file: both run, the file first.
    expect(later[0]).toBe('pgfence_0003_more_items_0000000300000');
    expect(byNumber(later)).toEqual(later);
  });

  it('adds the fencing column with its trigger and a version column, and takes them away again', async () => {
    const fresh = (await useTestDatabase('typeorm_columns')).url;
    await queryOnce(fresh, 'CREATE TABLE shipments (id int PRIMARY KEY, state text); CREATE TABLE docs (id int PRIMARY KEY, body text)');
    interface Doc {
      id: number;
      body: string;
      revision: string;
    }
    const DocSchema = new EntitySchema<Doc>({
      name: 'Doc',
      tableName: 'docs',
      columns: { id: { type: 'int', primary: true }, body: { type: 'text' }, revision: { type: 'bigint', name: 'rev' } },
    });
    const migrations = [
      ...(await t.pgfenceMigrations()),
      t.fencingColumnMigration('shipments', { name: 'ShipmentsFencing1735689600000', enforce: true }),
      // An entity: its table and its property's column are read from the DataSource the migration runs in.
      t.versionColumnMigration(DocSchema, { name: 'DocsVersion1735689600001', column: 'revision' }),
    ];
    const ds = await migrator(fresh, migrations, { entities: [DocSchema] });
    expect((await ran(ds)).slice(-2)).toEqual(['ShipmentsFencing1735689600000', 'DocsVersion1735689600001']);
    const columns = async () =>
      (await queryOnce<{ c: string }>(fresh, `SELECT table_name || '.' || column_name AS c FROM information_schema.columns WHERE table_name IN ('shipments', 'docs') ORDER BY 1`)).map((r) => r.c);
    expect(await columns()).toEqual(['docs.body', 'docs.id', 'docs.rev', 'shipments.fencing_token', 'shipments.id', 'shipments.state']);
    // The trigger refuses a lower token, whoever writes.
    await queryOnce(fresh, `INSERT INTO shipments VALUES (1, 'packed', 7)`);
    await expect(queryOnce(fresh, `UPDATE shipments SET fencing_token = 6 WHERE id = 1`)).rejects.toMatchObject({ code: 'PGF01' });
    expect(await queryOnce(fresh, `SELECT tgname FROM pg_trigger WHERE tgrelid = 'shipments'::regclass AND NOT tgisinternal`)).toEqual([{ tgname: 'pgfence_fencing_token' }]);
    expect(await t.versionedUpdate(ds.manager, { entity: DocSchema, set: { body: 'x' }, where: { id: 1 }, version: 0, column: 'revision' })).toEqual({ applied: false, reason: 'missing' });

    await ds.undoLastMigration();
    await ds.undoLastMigration();
    expect(await columns()).toEqual(['docs.body', 'docs.id', 'shipments.id', 'shipments.state']);
    expect(await queryOnce(fresh, `SELECT tgname FROM pg_trigger WHERE tgrelid = 'shipments'::regclass AND NOT tgisinternal`)).toEqual([]);
  });

  it('refuses a migration name TypeORM could not order, and a table name pgfence would not quote, when the class is made', () => {
    for (const [make, argument] of [
      [() => t.fencingColumnMigration('orders', { name: 'OrdersFencing' }), 'name'],
      [() => t.fencingColumnMigration('orders', { name: 'OrdersFencing0000000000000' }), 'name'],
      [() => t.versionColumnMigration('orders; DROP TABLE x', { name: 'V1735689600000' }), 'table'],
      [() => t.fencingColumnMigration('orders', { name: 'F1735689600000', enforce: 'yes' } as never), 'enforce'],
      [() => t.versionColumnMigration(42 as never, { name: 'V1735689600000' }), 'table'],
    ] as const) {
      expect(make).toThrow(InvalidArgumentError);
      try {
        make();
      } catch (err) {
        expect((err as InvalidArgumentError).argument).toBe(argument);
      }
    }
  });
});
