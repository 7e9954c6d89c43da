// Prisma: a transaction lock with a fencing token inside prisma.$transaction, and a guarded write by model
// and field names that says why it was refused.
//
// Its client is generated from ./schema.prisma (TypeScript, into ./generated), so run it with a loader for
// TypeScript (tsx, or Node's own type stripping where it resolves ./generated/client.js to .ts):
//   npx prisma generate --schema examples/prisma/schema.prisma
//   node --import ./test/support/ts-loader.mjs examples/prisma/main.mjs   # this repository's loader
import { PrismaPg } from '@prisma/adapter-pg';
import pg from 'pg';
import { migrate } from 'pgfence';
import { fencedUpdate, fencingColumnMigration, xactLock } from 'pgfence/prisma';
import { PrismaClient } from './generated/client.js';

await migrate(); // pgfence's schema (or: writePgfenceMigration() into prisma/migrations, applied by Prisma Migrate)
// The example's table, as Prisma Migrate would create it, with the fencing column's migration.
const admin = new pg.Client();
await admin.connect();
await admin.query(`CREATE TABLE IF NOT EXISTS example_prisma_accounts (id int PRIMARY KEY, balance int NOT NULL)`);
await admin.query(fencingColumnMigration('example_prisma_accounts').sql);
await admin.end();

// DATABASE_URL, else the PG* environment (node-postgres reads it), as migrate() and pg.Client do.
const prisma = new PrismaClient({ adapter: new PrismaPg(process.env.DATABASE_URL ?? {}) });
await prisma.account.upsert({ where: { id: 1 }, create: { id: 1, balance: 100 }, update: { balance: 100, fencingToken: null } });

async function withdraw(amount) {
  return prisma.$transaction(
    async (tx) => {
      const lock = await xactLock(tx, 'account:1', { fencing: true }); // released at COMMIT
      const { balance } = await tx.account.findUniqueOrThrow({ where: { id: 1 } });
      const r = await fencedUpdate(tx, { model: 'Account', set: { balance: balance - amount }, where: { id: 1 }, token: lock.token });
      console.log(`withdraw ${amount} with token ${lock.token}: ${r.written} row updated`);
      return lock.token;
    },
    { timeout: 15_000 }, // longer than a lock wait may take (Prisma's default is 5000 ms)
  );
}
const first = await withdraw(10);
await withdraw(5);
// A late writer still holding the first token (say, a retried request) changes nothing:
const stale = await fencedUpdate(prisma, { model: 'Account', set: { balance: 0 }, where: { id: 1 }, token: first });
console.log(`update with the older token ${first}: ${stale.written} rows updated (${stale.reason}: token ${stale.currentToken} wrote it)`);
const account = await prisma.account.findUniqueOrThrow({ where: { id: 1 } });
console.log(`balance: ${account.balance}`); // 85
await prisma.$disconnect();
