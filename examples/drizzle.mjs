// Drizzle (node-postgres driver): a transaction lock with a fencing token, a guarded update builder that
// says why it was refused, and an optimistic versioned update.
import { eq, sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { integer, pgTable } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { fenced, fencingToken, migratePgfence, versionColumn, versionedUpdate, xactLock } from 'pgfence/drizzle';

const accounts = pgTable('example_drizzle_accounts', {
  id: integer('id').primaryKey(),
  balance: integer('balance').notNull(),
  fencingToken: fencingToken(), // "fencing_token" bigint
  version: versionColumn(), // "version" bigint NOT NULL DEFAULT 0
});

const pool = new pg.Pool(); // the PG* environment names the database
const db = drizzle(pool);
await migratePgfence(db); // pgfence's own schema (does nothing when it is up to date)
await db.execute(sql`CREATE TABLE IF NOT EXISTS example_drizzle_accounts (id int PRIMARY KEY, balance int NOT NULL, fencing_token bigint, version bigint NOT NULL DEFAULT 0)`);
await db
  .insert(accounts)
  .values({ id: 1, balance: 100 })
  .onConflictDoUpdate({ target: accounts.id, set: { balance: 100, fencingToken: null, version: 0n } });

async function withdraw(amount) {
  return db.transaction(async (tx) => {
    const lock = await xactLock(tx, 'account:1', { fencing: true }); // released at COMMIT
    const r = await fenced(tx.update(accounts).set({ balance: sql`${accounts.balance} - ${amount}` }).where(eq(accounts.id, 1)), lock.token).execute();
    console.log(`withdraw ${amount} with token ${lock.token}: ${r.written} row updated`);
    return lock.token;
  });
}
const first = await withdraw(10);
await withdraw(5);
// A late writer still holding the first token (say, a retried request) changes nothing:
const stale = await fenced(db.update(accounts).set({ balance: 0 }).where(eq(accounts.id, 1)), first).execute();
console.log(`update with the older token ${first}: ${stale.written} rows updated (${stale.reason}: token ${stale.currentToken} wrote it)`);

// No lock at all: two writers read the same version; the second one's write is refused.
const [read] = await db.select().from(accounts).where(eq(accounts.id, 1));
const a = await versionedUpdate(db, { table: accounts, set: { balance: read.balance + 1 }, where: { id: 1 }, version: read.version });
const b = await versionedUpdate(db, { table: accounts, set: { balance: read.balance + 2 }, where: { id: 1 }, version: read.version });
console.log(`two writers read version ${read.version}: first writer applied=${a.applied}, second writer: ${b.reason} (version is now ${b.currentVersion})`);

const [{ balance }] = await db.select({ balance: accounts.balance }).from(accounts).where(eq(accounts.id, 1));
console.log(`balance: ${balance}`); // 86
await pool.end();
