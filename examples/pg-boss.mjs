// pg-boss workers where jobs for the same order never run at the same time, across workers and processes.
import * as pgBoss from 'pg-boss';
import { createLocker } from 'pgfence';
import { workWithLock } from 'pgfence/pg-boss';

// pg-boss 12 exports its class by name; 10 and 11 as the default export.
const PgBoss = pgBoss.PgBoss ?? pgBoss.default;
const url = process.env.DATABASE_URL;
const boss = new PgBoss({ connectionString: url, max: 3 });
boss.on('error', (err) => console.error(err));
await boss.start();
await boss.createQueue('example-orders', { retryLimit: 10, retryDelay: 1 });
const locker = createLocker({ connectionString: url });

const running = new Map(); // order -> jobs of it running now
let overlaps = 0;
let done = 0;
await workWithLock(boss, locker, 'example-orders',
  { key: (job) => `order:${job.data.orderId}`, workOptions: { batchSize: 4, pollingIntervalSeconds: 0.5 } },
  async (job) => {
    const n = (running.get(job.data.orderId) ?? 0) + 1;
    running.set(job.data.orderId, n);
    if (n > 1) overlaps++;
    await new Promise((r) => setTimeout(r, 30)); // the work (pass job.signal to real I/O)
    running.set(job.data.orderId, n - 1);
    done++;
  });

for (let i = 0; i < 8; i++) await boss.send('example-orders', { orderId: i % 2 === 0 ? 'A' : 'B', step: i });
while (done < 8) await new Promise((r) => setTimeout(r, 100));
console.log(`8 jobs on 2 orders done; same-order overlaps: ${overlaps}`);
await boss.stop({ graceful: true, wait: true });
await locker.close();
