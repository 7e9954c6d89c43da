// Events, stats and inspect(): what is held and waited for, across the database, by name.
import { createLocker, migrate } from 'pgfence';

await migrate({ connectionString: process.env.DATABASE_URL });
const locker = createLocker({ connectionString: process.env.DATABASE_URL });
locker.on('acquired', (e) => console.log(`acquired ${e.name} after ${e.waitMs.toFixed(1)} ms`));
locker.on('released', (e) => console.log(`released ${e.name} after ${e.holdMs.toFixed(1)} ms`));

const lock = await locker.acquire('example:report');
const lease = await locker.lease('example:import', { ttlMs: 30_000, owner: 'importer-1' });
const report = await locker.inspect();
for (const l of report.locks.filter((x) => x.mine)) console.log(`held: ${l.name} (${l.mode}) by pid ${l.pid}`);
for (const l of report.leases) console.log(`lease: ${l.name} owner=${l.owner} token=${l.token} left=${Math.round(l.remainingMs / 1000)}s`);
await lock.release();
await lease.release();
console.log(`stats: ${JSON.stringify(locker.stats())}`);
await locker.close();
