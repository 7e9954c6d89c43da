// Kysely: a transaction lock with a fencing token, and a guarded update builder that says why it was refused.
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { migrate } from 'pgfence';
import { addFencingColumn, fenced, xactLock } from 'pgfence/kysely';

await migrate({ connectionString: process.env.DATABASE_URL });
const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) }) });
await sql`CREATE TABLE IF NOT EXISTS example_accounts (id int PRIMARY KEY, balance int)`.execute(db);
await addFencingColumn(db, 'example_accounts');
await sql`INSERT INTO example_accounts VALUES (1, 100, NULL) ON CONFLICT (id) DO UPDATE SET balance = 100, fencing_token = NULL`.execute(db);

async function withdraw(amount) {
  return db.transaction().execute(async (trx) => {
    const lock = await xactLock(trx, 'account:1', { fencing: true }); // released at COMMIT
    const r = await fenced(
      trx.updateTable('example_accounts').set((eb) => ({ balance: eb('balance', '-', amount) })).where('id', '=', 1),
      lock.token,
    ).execute();
    console.log(`withdraw ${amount} with token ${lock.token}: ${r.written} row updated`);
    return lock.token;
  });
}
const first = await withdraw(10);
await withdraw(5);
// A late writer still holding the first token (say, a retried request) changes nothing:
const stale = await fenced(db.updateTable('example_accounts').set({ balance: 0 }).where('id', '=', 1), first).execute();
console.log(`update with the older token ${first}: ${stale.written} rows updated (${stale.reason}: token ${stale.currentToken} wrote it)`);
const { rows } = await sql`SELECT balance FROM example_accounts WHERE id = 1`.execute(db);
console.log(`balance: ${rows[0].balance}`); // 85
await db.destroy();
