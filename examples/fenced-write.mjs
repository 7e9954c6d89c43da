// A long job under a lease, writing with its fencing token: a stale holder's write is refused.
import pg from 'pg';
import { createLocker, fencedUpdate, fencingColumnSql, migrate } from 'pgfence';

const url = process.env.DATABASE_URL;
await migrate({ connectionString: url });
const pool = new pg.Pool({ connectionString: url });
await pool.query('CREATE TABLE IF NOT EXISTS example_invoices (id int PRIMARY KEY, status text)');
await pool.query(fencingColumnSql('example_invoices'));
await pool.query(`INSERT INTO example_invoices (id, status) VALUES (42, 'open') ON CONFLICT (id) DO UPDATE SET status = 'open', fencing_token = NULL`);

const locker = createLocker({ connectionString: url });
const old = await locker.lease('invoice:42', { ttlMs: 300, renew: false }); // think: a holder about to freeze
await new Promise((r) => setTimeout(r, 500)); // ... it froze past its lease
console.log(`old holder lost its lease: ${old.signal.aborted}`);

const fresh = await locker.lease('invoice:42', { ttlMs: 10_000 });
console.log(`new holder's token ${fresh.token} > old token ${old.token}`);
const ok = await fencedUpdate(pool, { table: 'example_invoices', set: { status: 'paid' }, where: { id: 42 }, token: fresh.token });
console.log(`new holder writes: applied=${ok.applied}`);

// The old holder wakes up and writes as if nothing happened:
const stale = await fencedUpdate(pool, { table: 'example_invoices', set: { status: 'cancelled' }, where: { id: 42 }, token: old.token });
console.log(`old holder writes: applied=${stale.applied} reason=${stale.reason} currentToken=${stale.currentToken}`);
const { rows } = await pool.query('SELECT status FROM example_invoices WHERE id = 42');
console.log(`invoice 42 is ${rows[0].status}`); // paid
await fresh.release();
await locker.close();
await pool.end();
