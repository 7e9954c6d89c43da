// One worker at a time per order, across every instance of the service.
// Run: DATABASE_URL=postgres://... node examples/critical-section.mjs
import { createLocker } from 'pgfence';

const locker = createLocker({ connectionString: process.env.DATABASE_URL });
let balance = 100;

async function charge(orderId, amount) {
  return locker.withLock(`order:${orderId}`, async (lock) => {
    const before = balance; // read ...
    await new Promise((r) => setTimeout(r, 5)); // ... slow work (pass lock.signal to real I/O) ...
    if (lock.signal.aborted) throw lock.signal.reason; // the lock was lost: stop
    balance = before - amount; // ... write: nobody else ran in between
  }, { timeoutMs: 10_000 });
}

await Promise.all(Array.from({ length: 20 }, () => charge(123, 1)));
console.log(`balance after 20 concurrent charges of 1: ${balance}`); // always 80
await locker.close();
