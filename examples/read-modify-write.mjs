// A fenced read-modify-write: claim the row with your token before reading it. Two holders in turn
// (A's lease expired, B took over with a newer token) each add 1 to a counter; A writes first.
import pg from 'pg';
import { createLocker, fencedClaim, fencedUpdate, fencingColumnSql, migrate } from 'pgfence';

const url = process.env.DATABASE_URL;
await migrate({ connectionString: url });
const pool = new pg.Pool({ connectionString: url });
await pool.query('CREATE TABLE IF NOT EXISTS example_counters (id int PRIMARY KEY, n int NOT NULL)');
await pool.query(fencingColumnSql('example_counters'));
const reset = () => pool.query(`INSERT INTO example_counters VALUES (1, 0) ON CONFLICT (id) DO UPDATE SET n = 0, fencing_token = NULL`);
const counter = async () => (await pool.query('SELECT n FROM example_counters WHERE id = 1')).rows[0].n;
const add1 = (n, token) => fencedUpdate(pool, { table: 'example_counters', set: { n: n + 1 }, where: { id: 1 }, token });

const locker = createLocker({ connectionString: url });
const a = await locker.lease('counter:1', { ttlMs: 300, renew: false });
await new Promise((r) => setTimeout(r, 500)); // A is paused past its lease...
const b = await locker.lease('counter:1', { ttlMs: 10_000 }); // ...and B takes over

// Read, then write: A's write lands first, before the row has seen B's token, so it applies.
await reset();
const [readA, readB] = [await counter(), await counter()];
const plain = [await add1(readA, a.token), await add1(readB, b.token)];
console.log(`read then write: ${plain.filter((r) => r.applied).length} increments applied, counter = ${await counter()}`);

// Claim, then read, then write: B's claim stamps its token, so A's write is refused.
await reset();
const claimA = await fencedClaim(pool, { table: 'example_counters', where: { id: 1 }, token: a.token });
const claimB = await fencedClaim(pool, { table: 'example_counters', where: { id: 1 }, token: b.token });
const claimed = [await add1(claimA.rows[0].n, a.token), await add1(claimB.rows[0].n, b.token)];
console.log(`claim then write: ${claimed.filter((r) => r.applied).length} increment applied, counter = ${await counter()}; A was refused: ${claimed[0].reason}`);

await b.release();
await locker.close();
await pool.end();
