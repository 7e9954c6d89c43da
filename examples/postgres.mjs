// postgres.js: a transaction lock with a fencing token, a guarded update that says why it was refused,
// and a busy lock whose timeout the transaction survives.
import postgres from 'postgres';
import { fencingColumnSql, LockTimeoutError, migrate } from 'pgfence';
import { fencedUpdate, xactLock } from 'pgfence/postgres';

await migrate({ connectionString: process.env.DATABASE_URL });
// Without a URL, postgres.js reads the PG* environment, as migrate() does.
const sql = process.env.DATABASE_URL ? postgres(process.env.DATABASE_URL, { onnotice: () => {} }) : postgres({ onnotice: () => {} });
await sql`CREATE TABLE IF NOT EXISTS example_postgres_accounts (id int PRIMARY KEY, balance int)`;
await sql.unsafe(fencingColumnSql('example_postgres_accounts')); // a migration of your own, in one round trip
await sql`INSERT INTO example_postgres_accounts VALUES (1, 100, NULL) ON CONFLICT (id) DO UPDATE SET balance = 100, fencing_token = NULL`;

async function withdraw(amount) {
  return sql.begin(async (tx) => {
    const { token } = await xactLock(tx, 'account:1', { fencing: true }); // released at COMMIT
    const [{ balance }] = await tx`SELECT balance FROM example_postgres_accounts WHERE id = 1`;
    const r = await fencedUpdate(tx, { table: 'example_postgres_accounts', set: { balance: balance - amount }, where: { id: 1 }, token });
    console.log(`withdraw ${amount} with token ${token}: ${r.written} row updated`);
    return token;
  });
}
const first = await withdraw(10);
await withdraw(5);
// A late writer still holding the first token (say, a retried request) changes nothing:
const stale = await fencedUpdate(sql, { table: 'example_postgres_accounts', set: { balance: 0 }, where: { id: 1 }, token: first });
console.log(`update with the older token ${first}: ${stale.written} rows updated (${stale.reason}: token ${stale.currentToken} wrote it)`);

// Another transaction holds account:1; this one waits 200 ms for it, then carries on and commits.
let letGo;
const held = new Promise((resolve) => (letGo = resolve));
let taken;
const holding = new Promise((resolve) => (taken = resolve));
const holder = sql.begin(async (tx) => {
  await xactLock(tx, 'account:1');
  taken();
  await held;
});
await holding;
const outcome = await sql.begin(async (tx) => {
  try {
    await xactLock(tx, 'account:1', { timeoutMs: 200 });
  } catch (err) {
    if (!(err instanceof LockTimeoutError)) throw err;
    console.log(`account:1 is busy (${err.code}): the transaction goes on`);
  }
  const [{ balance }] = await tx`SELECT balance FROM example_postgres_accounts WHERE id = 1`;
  return `committed, balance ${balance}`;
});
console.log(outcome); // committed, balance 85
letGo();
await holder;
await sql.end();
