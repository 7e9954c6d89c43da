// A job that several instances schedule, but only one should run at a time: the others skip it.
import { createLocker } from 'pgfence';

const a = createLocker({ connectionString: process.env.DATABASE_URL });
const b = createLocker({ connectionString: process.env.DATABASE_URL });
const report = () => new Promise((r) => setTimeout(() => r('report built'), 200));

const [first, second] = await Promise.all([
  a.tryWithLock('cron:nightly-report', report),
  new Promise((r) => setTimeout(r, 50)).then(() => b.tryWithLock('cron:nightly-report', report)),
]);
console.log(`instance a: ${first.acquired ? first.value : 'skipped'}`);
console.log(`instance b: ${second.acquired ? second.value : 'skipped (a is on it)'}`);
await Promise.all([a.close(), b.close()]);
