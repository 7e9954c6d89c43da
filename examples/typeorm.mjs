// TypeORM: pgfence's schema and a fencing column as TypeORM migrations, a transaction lock with a fencing
// token, and guarded writes (the update builder and an entity-typed fencedUpdate) that say why they were refused.
import { DataSource, EntitySchema } from 'typeorm';
import { fenced, fencedUpdate, fencingColumnMigration, pgfenceMigrations, xactLock } from 'pgfence/typeorm';

// An entity without decorators: the fencing column is mapped too (TypeORM reads a bigint as a string).
const Account = new EntitySchema({
  name: 'Account',
  tableName: 'example_typeorm_accounts',
  columns: {
    id: { type: 'int', primary: true },
    balance: { type: 'int' },
    fencingToken: { type: 'bigint', name: 'fencing_token', nullable: true },
  },
});

// The connection comes from the PG* environment (PGHOST, PGDATABASE, ...), as psql's does.
const dataSource = new DataSource({
  type: 'postgres',
  entities: [Account],
  migrations: [
    ...(await pgfenceMigrations()),
    // The fencing column, and the trigger that makes the table refuse a lower token whoever writes.
    fencingColumnMigration('example_typeorm_accounts', { name: 'AccountsFencing1735689600000', enforce: true }),
  ],
});
await dataSource.initialize();
await dataSource.query('CREATE TABLE IF NOT EXISTS example_typeorm_accounts (id int PRIMARY KEY, balance int NOT NULL)');
const applied = await dataSource.runMigrations();
console.log(`migrations run: ${applied.length}`);
await dataSource.query('DELETE FROM example_typeorm_accounts');
await dataSource.getRepository(Account).insert({ id: 1, balance: 100 });

async function withdraw(amount) {
  return dataSource.transaction(async (manager) => {
    const lock = await xactLock(manager, 'account:1', { fencing: true }); // released at COMMIT
    const update = manager.createQueryBuilder().update(Account).set({ balance: () => 'balance - :amount' }).setParameter('amount', amount).where('id = :id', { id: 1 });
    const r = await fenced(update, lock.token).execute();
    console.log(`withdraw ${amount} with token ${lock.token}: ${r.written} row updated`);
    return lock.token;
  });
}
const first = await withdraw(10);
await withdraw(5);

// A late writer still holding the first token (say, a retried request) changes nothing:
const stale = await fencedUpdate(dataSource.manager, { entity: Account, set: { balance: 0 }, where: { id: 1 }, token: first });
console.log(`update with the older token ${first}: ${stale.written} rows updated (${stale.reason}: token ${stale.currentToken} wrote it)`);

// And one that bypasses pgfence is refused by the table itself:
try {
  await dataSource.query('UPDATE example_typeorm_accounts SET balance = 0, fencing_token = $1 WHERE id = 1', [String(first)]);
} catch (err) {
  console.log(`a plain UPDATE with the older token: refused by the table (${err.code})`);
}

const account = await dataSource.getRepository(Account).findOneByOrFail({ id: 1 });
console.log(`balance: ${account.balance}, written with token ${account.fencingToken}`); // 85
await dataSource.destroy();
