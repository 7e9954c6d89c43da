// A cron job scheduled on three hosts runs once per period, even though the hosts' schedules fire
// at different moments (clock skew, late timers). Each host tries the job's lease once per firing;
// minHoldMs keeps the lease after a quick job until the other hosts' firings have passed, so they
// skip instead of running it again.
//
// With real cron (every host, the same crontab line), the job's code is the `fire` below, e.g.
//   const lease = await locker.tryLease('report', { minHoldMs: 30_000 });  // skew < 30 s < period
// or, for any command:  */5 * * * *  pgfence run report --lease --at-least 30s -- ./report.sh
// Here a period is 2 s and the three hosts fire 0, 0.4 and 0.8 s into it (a hold of 1.4 s).
import { createLocker } from 'pgfence';

const PERIOD_MS = 2000;
const SKEW_MS = [0, 400, 800];
const MIN_HOLD_MS = 1400; // longer than the largest skew, shorter than the period
const hosts = ['a', 'b', 'c'].map((name) => ({ name, locker: createLocker({ connectionString: process.env.DATABASE_URL }) }));

const runs = [];
async function fire(host, slot) {
  const lease = await host.locker.tryLease('cron:report', { minHoldMs: MIN_HOLD_MS });
  if (lease === null) return; // another host has run this period's job (or is running it)
  try {
    runs.push({ slot, host: host.name, token: lease.token });
    await new Promise((resolve) => setTimeout(resolve, 50)); // the job: quicker than the skew
  } finally {
    await lease.release(); // kept until acquired + MIN_HOLD_MS on the database clock
  }
}

const start = Date.now() + 200;
const firings = [];
for (let slot = 0; slot < 3; slot++) {
  hosts.forEach((host, i) => {
    // The hosts take turns being the early one.
    const at = start + slot * PERIOD_MS + SKEW_MS[(i + slot) % 3];
    firings.push(new Promise((resolve) => setTimeout(resolve, at - Date.now())).then(() => fire(host, slot)));
  });
}
await Promise.all(firings);
for (let slot = 0; slot < 3; slot++) {
  const ran = runs.filter((r) => r.slot === slot);
  console.log(`period ${slot}: ran ${ran.length} time(s), on host ${ran.map((r) => r.host).join(', ')}`);
}
await Promise.all(hosts.map((h) => h.locker.close()));
