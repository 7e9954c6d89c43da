// At most 3 calls in flight to a rate-limited vendor API, across every instance.
import { createLocker } from 'pgfence';

const locker = createLocker({ connectionString: process.env.DATABASE_URL });
const vendor = locker.semaphore('vendor-api', { permits: 3 });
let inFlight = 0;
let maxInFlight = 0;

await Promise.all(
  Array.from({ length: 12 }, (_, i) =>
    vendor.withPermit(async () => {
      maxInFlight = Math.max(maxInFlight, ++inFlight);
      await new Promise((r) => setTimeout(r, 20)); // the call
      inFlight--;
    }, { timeoutMs: 10_000 }),
  ),
);
console.log(`12 calls, at most ${maxInFlight} in flight`);
await locker.close();
