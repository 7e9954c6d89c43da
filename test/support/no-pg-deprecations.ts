import { afterAll } from 'vitest';

/**
 * Every test file fails when node-postgres warned that something it does will stop working in pg 9
 * (say, a query sent while the client is still executing another). Node prints such a warning once per
 * process and goes on, so it would otherwise scroll by unseen; the warning's stack names the caller.
 * Not counted: vitest's own reading of a pg client's deprecated getters as it reports a failed test, and
 * Prisma's driver adapter's own queueing.
 */
const seen: Error[] = [];
process.on('warning', (warning) => {
  if (warning.name !== 'DeprecationWarning' || !warning.message.includes('pg@9')) return;
  if (warning.stack?.includes('/@vitest/')) return;
  // Prisma's driver adapter sends a transaction's statements to node-postgres without waiting for the one
  // in flight (its own ROLLBACK at its timeout does too): the library's doing, which pgfence cannot reach.
  if (warning.stack?.includes('/@prisma/adapter-pg/')) return;
  seen.push(warning);
});

/** The pg 9 deprecation warnings seen so far in this file (a test that provokes one asserts this stays empty). */
export const pgDeprecationWarnings: readonly Error[] = seen;

afterAll(() => {
  if (seen.length > 0) throw new Error(`node-postgres deprecation warning (gone in pg 9):\n${seen.map((w) => w.stack).join('\n')}`);
});
