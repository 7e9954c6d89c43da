// Knex: pgfence's schema through Knex's migrator, a transaction lock with a fencing token, a guarded
// update builder that says why it was refused, and an optimistic update that notices a lost race.
import knexFactory from 'knex';
import { addFencingColumn, addVersionColumn, fenced, pgfenceMigrations, versionedUpdate, xactLock } from 'pgfence/knex';

// No connection string: node-postgres reads PGHOST, PGUSER, PGDATABASE, ... as psql does.
const db = knexFactory({ client: 'pg', connection: process.env.DATABASE_URL ?? {} });

// pgfence's schema, kept in a history table of its own (nothing to do where migrate() already ran).
const [, ran] = await db.migrate.latest({ migrationSource: pgfenceMigrations(), tableName: 'pgfence_knex_migrations' });
console.log(`pgfence schema up to date (${ran.length} name(s) recorded by Knex's migrator this time)`);

await db.raw('CREATE TABLE IF NOT EXISTS example_knex_accounts (id int PRIMARY KEY, balance int NOT NULL)');
await addFencingColumn(db, 'example_knex_accounts', { enforce: true });
await addVersionColumn(db, 'example_knex_accounts');
// A fresh row (the trigger would refuse putting its token back to NULL).
await db('example_knex_accounts').where({ id: 1 }).del();
await db('example_knex_accounts').insert({ id: 1, balance: 100 });

async function withdraw(amount) {
  return db.transaction(async (trx) => {
    const lock = await xactLock(trx, 'account:1', { fencing: true }); // released at COMMIT
    const r = await fenced(trx('example_knex_accounts').where({ id: 1 }).decrement('balance', amount), lock.token).execute();
    console.log(`withdraw ${amount} with token ${lock.token}: ${r.written} row updated`);
    return lock.token;
  });
}
const first = await withdraw(10);
await withdraw(5);
// A late writer still holding the first token (say, a retried request) changes nothing:
const stale = await fenced(db('example_knex_accounts').where({ id: 1 }).update({ balance: 0 }), first).execute();
console.log(`update with the older token ${first}: ${stale.written} rows updated (${stale.reason}: token ${stale.currentToken} wrote it)`);

// Optimistic concurrency: two writers read version 0; the second one's write is refused.
const { version } = await db('example_knex_accounts').where({ id: 1 }).first('version');
const a = await versionedUpdate(db, { table: 'example_knex_accounts', set: { balance: 84 }, where: { id: 1 }, version: BigInt(version) });
const b = await versionedUpdate(db, { table: 'example_knex_accounts', set: { balance: 0 }, where: { id: 1 }, version: BigInt(version) });
console.log(`two writers of version ${version}: first applied=${a.applied}, second ${b.reason} (now version ${b.currentVersion})`);

const { balance } = await db('example_knex_accounts').where({ id: 1 }).first('balance');
console.log(`balance: ${balance}`); // 84
await db.destroy();
