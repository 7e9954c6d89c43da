// A job that several instances schedule, but only one should run at a time: the others skip it.
import { createLocker } from 'pgfence';

const a = createLocker({ connectionString: process.env.DATABASE_URL });
const b = createLocker({ connectionString: process.env.DATABASE_URL });

// Instance b's schedule fires while instance a is building the report.
let second;
const first = await a.tryWithLock('cron:nightly-report', async () => {
  second = await b.tryWithLock('cron:nightly-report', async () => 'report built');
  return 'report built';
});
console.log(`instance a: ${first.acquired ? first.value : 'skipped'}`);
console.log(`instance b: ${second.acquired ? second.value : 'skipped (a is on it)'}`);
await Promise.all([a.close(), b.close()]);
