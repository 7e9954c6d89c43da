import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type LockHandle, LockLostError, type Locker } from '../src/index.js';
import { appName, killBackends, track, useMigratedDatabase } from './support/db.js';

/**
 * Issue 30: withLock, tryWithLock, withLease, tryWithLease and withPermit (advisory and lease-backed)
 * resolved with the callback's value when the lock was lost before the callback settled, so a caller
 * who did not check `signal` believed its section was protected. They reject with LockLostError (the
 * callback's value kept as `value`) — the losses below are real: a killed backend, an expired lease row.
 */
let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let admin: pg.Client;

beforeAll(async () => {
  db = await useMigratedDatabase('callback_loss');
  admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
});
afterAll(async () => {
  await admin.end();
});

/** A locker whose backends can be told apart (and killed). */
function openNamed(label: string): { locker: Locker; app: string } {
  const app = appName(label);
  return { locker: track(createLocker({ connectionString: db.urlWith({ application_name: app }) })), app };
}

/** The lease (or lease-backed permit) row of `handle` expires now, as if its holder had stopped renewing. */
async function expireLease(handle: LockHandle): Promise<void> {
  const { rowCount } = await admin.query(`UPDATE pgfence.leases SET expires_at = clock_timestamp() - interval '1 second' WHERE key = $1 AND token = $2`, [
    handle.key,
    handle.token,
  ]);
  expect(rowCount).toBe(1);
}

/** Resolves once `signal` aborts: the callback below finishes after the loss, ignoring it. */
const aborted = (signal: AbortSignal) =>
  new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true })));

/** How each helper is called, and how its lock is lost while the callback runs (the callback then returns 'finished'). */
const helpers: { name: string; run(label: string): Promise<unknown> }[] = [
  {
    name: 'withLock (backend killed)',
    async run(label) {
      const { locker, app } = openNamed(label);
      return locker.withLock('loss:with-lock', async (lock) => {
        await killBackends(db.url, app);
        await aborted(lock.signal);
        return 'finished';
      });
    },
  },
  {
    name: 'tryWithLock (backend killed)',
    async run(label) {
      const { locker, app } = openNamed(label);
      return locker.tryWithLock('loss:try-with-lock', async (lock) => {
        await killBackends(db.url, app);
        await aborted(lock.signal);
        return 'finished';
      });
    },
  },
  {
    name: 'withLease (row expired, renewal finds it gone)',
    async run(label) {
      return openNamed(label).locker.withLease(
        'loss:with-lease',
        async (lease) => {
          await expireLease(lease);
          await aborted(lease.signal);
          return 'finished';
        },
        { ttlMs: 1500 },
      );
    },
  },
  {
    name: 'tryWithLease (row expired, renewal finds it gone)',
    async run(label) {
      return openNamed(label).locker.tryWithLease(
        'loss:try-with-lease',
        async (lease) => {
          await expireLease(lease);
          await aborted(lease.signal);
          return 'finished';
        },
        { ttlMs: 1500 },
      );
    },
  },
  {
    name: 'withLease (taken over; the callback returns before any renewal, the release finds it gone)',
    async run(label) {
      const other = openNamed(`${label}_other`).locker;
      return openNamed(label).locker.withLease(
        'loss:with-lease-taken',
        async (lease) => {
          await expireLease(lease);
          const taker = await other.tryLease('loss:with-lease-taken');
          expect(taker?.token).toBeGreaterThan(lease.token);
          return 'finished';
        },
        { ttlMs: 60_000 },
      );
    },
  },
  {
    name: 'semaphore withPermit, advisory (backend killed)',
    async run(label) {
      const { locker, app } = openNamed(label);
      return locker.semaphore('loss:permit', { permits: 2 }).withPermit(async (permit) => {
        await killBackends(db.url, app);
        await aborted(permit.signal);
        return 'finished';
      });
    },
  },
  {
    name: 'semaphore withPermit, lease-backed (row expired)',
    async run(label) {
      return openNamed(label)
        .locker.semaphore('loss:lease-permit', { permits: 2, ttlMs: 1500 })
        .withPermit(async (permit) => {
          await expireLease(permit);
          await aborted(permit.signal);
          return 'finished';
        });
    },
  },
];

describe('callback helpers after a loss (issue 30)', () => {
  it.each(helpers)('$name rejects with LockLostError carrying the callback’s value', async ({ name, run }) => {
    const outcome = await run(name.split(' ')[0]!.replace(/\W/g, '_')).then(
      (value) => ({ resolved: value }),
      (err: unknown) => ({ rejected: err }),
    );
    expect(outcome).not.toHaveProperty('resolved');
    const err = (outcome as { rejected: unknown }).rejected;
    expect(err).toBeInstanceOf(LockLostError);
    expect((err as LockLostError & { value: unknown }).value).toBe('finished');
    expect((err as Error).message).toMatch(/lost .* before its callback settled/);
  });

  it('a callback that throws after the loss rejects with its own error', async () => {
    const { locker, app } = openNamed('throws');
    const own = new Error('the callback’s own failure');
    await expect(
      locker.withLock('loss:throws', async (lock) => {
        await killBackends(db.url, app);
        await aborted(lock.signal);
        throw own;
      }),
    ).rejects.toBe(own);
  });

  it('a callback that keeps its lock to the end resolves with its value; the value stays off the error’s JSON', async () => {
    const { locker } = openNamed('kept');
    expect(await locker.withLock('loss:kept', async () => 'kept')).toBe('kept');
    expect(await locker.withLease('loss:kept-lease', async () => 'kept')).toBe('kept');
    const value = { circular: globalThis };
    const err = new LockLostError('x', 1n, 'session-lost', { value });
    expect(err.value).toBe(value);
    expect(JSON.parse(JSON.stringify(err))).not.toHaveProperty('value');
  });
});
