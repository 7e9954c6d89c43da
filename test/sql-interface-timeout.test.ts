// Found by the exploration (seeds 1005 and 1006, test/explore.test.ts): pgfence.lock_fenced, bounded
// with statement_timeout as sql/interface.sql advises, could be cancelled after pg_advisory_lock granted
// the session lock and before the function returned: the caller was told 57014 and believed it got
// nothing, but its session kept the lock, and nobody else could take the name until that session ended.
// Here the window is held open on purpose: another transaction holds the key's token row, so
// next_token waits after the grant until the timeout.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { lockKey } from '../src/index.js';
import { eventually, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
const clients: pg.Client[] = [];
const connect = async () => {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  clients.push(c);
  return c;
};

beforeAll(async () => {
  db = await useMigratedDatabase('sql_interface_timeout');
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => {})));
});

it('pgfence.lock_fenced cancelled by statement_timeout after its grant leaves no session lock behind', async () => {
  const key = lockKey('repro:lock-fenced-timeout');
  const [holder, tokenRow, waiter, observer] = [await connect(), await connect(), await connect(), await connect()];
  await holder.query('SELECT pg_advisory_lock($1)', [key]);
  // A transaction issuing a token of the same key holds its counter row until it ends.
  await tokenRow.query('BEGIN');
  await tokenRow.query('SELECT pgfence.next_token($1)', [key]);

  await waiter.query(`SET statement_timeout = '1500ms'`);
  const waiterPid = (await waiter.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const answer = waiter.query('SELECT pgfence.lock_fenced($1)', [key]).then(
    () => null,
    (err: { code?: string }) => err.code,
  );
  const held = async (granted: boolean) =>
    (
      await observer.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND pid = $1 AND granted = $2
            AND ((classid::int8 << 32) | objid::int8) = $3`,
        [waiterPid, granted, key],
      )
    ).rows[0]!.n;
  await eventually(async () => (await held(false)) === 1, 10_000, 'lock_fenced to wait for the session lock');
  await holder.query('SELECT pg_advisory_unlock($1)', [key]);

  expect(await answer).toBe('57014'); // cancelled by statement_timeout: the caller got no token
  const leftHeld = await held(true);
  await tokenRow.query('ROLLBACK');
  expect(leftHeld, 'the session that was told "cancelled" still holds the lock').toBe(0);
});
