// Two candidates; one leads. When it resigns, the other is elected with a higher epoch.
import { createLocker, migrate } from 'pgfence';

await migrate({ connectionString: process.env.DATABASE_URL });
const lockers = [0, 1].map(() => createLocker({ connectionString: process.env.DATABASE_URL }));
const elections = lockers.map((l, i) => {
  const e = l.leader('example:scheduler', { ttlMs: 3000 });
  e.on('elected', ({ epoch }) => console.log(`candidate ${i} elected, epoch ${epoch}`));
  e.on('demoted', ({ epoch, reason }) => console.log(`candidate ${i} demoted from epoch ${epoch} (${reason})`));
  return e;
});
const first = await Promise.race(elections.map((e, i) => e.whenElected().then(() => i)));
await elections[first].resign();
await elections[1 - first].whenElected();
await Promise.all(lockers.map((l) => l.close()));
