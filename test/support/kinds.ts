import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { createLocker, tryXactLock, xactLock, type Locker } from '../../src/index.js';
import * as kyselyLocks from '../../src/kysely/index.js';
import { appName, killBackends } from './db.js';

export type Mode = 'exclusive' | 'shared';
export interface LockOpts {
  timeoutMs?: number;
  signal?: AbortSignal;
  mode?: Mode;
}

/** One participant (think: one process) of a lock kind under test. */
export interface Participant {
  /** Runs fn while holding the lock (waiting up to timeoutMs). */
  withLock<T>(name: string, fn: () => Promise<T>, opts?: LockOpts): Promise<T>;
  /** One try; { acquired: false } when the lock is busy. */
  tryWithLock<T>(name: string, fn: () => Promise<T>, opts?: Omit<LockOpts, 'timeoutMs'>): Promise<{ acquired: boolean; value?: T }>;
  /** While holding `name`, asks for it again the way a careless caller would; resolves with what that threw. */
  reenter(name: string): Promise<unknown>;
  /** How many of this participant's requests wait for a lock right now (for waiting on a state, not a sleep). */
  waiting(): Promise<number>;
  close(): Promise<void>;
}

export interface LockKindUnderTest {
  name: string;
  /** Has a shared mode (leases are exclusive only). */
  shared: boolean;
  open(url: string): Promise<Participant>;
  /**
   * For kinds whose handles signal loss: takes `name` and makes the kind's natural loss happen to it
   * (its session is killed; its lease runs out unrenewed).
   */
  holdAndLose?(url: string, name: string): Promise<{ signal: AbortSignal; lose(): Promise<void>; close(): Promise<void> }>;
}

function lockerParticipant(locker: Locker, extra: () => Promise<void> = async () => {}): Participant {
  return {
    withLock: (name, fn, opts) => locker.withLock(name, () => fn(), opts),
    tryWithLock: (name, fn, opts) => locker.tryWithLock(name, () => fn(), opts),
    reenter: (name) =>
      locker.withLock(name, () => locker.acquire(name, { timeoutMs: 1000 }).then(
        () => new Error('re-entry was allowed'),
        (err: unknown) => err,
      )),
    waiting: async () => locker.stats().waiting,
    close: async () => {
      await locker.close();
      await extra();
    },
  };
}

function withApp(url: string, app: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', app);
  return u.toString();
}

/** Backends of `app` blocked on a lock (transaction locks wait inside PostgreSQL). */
async function lockWaits(url: string, app: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
      [app],
    );
    return rows[0]!.n;
  } finally {
    await c.end();
  }
}

/** A session lock whose backends are then killed. */
async function holdAndKill(url: string, name: string, maxSessions: number) {
  const app = appName('loss');
  const u = new URL(url);
  u.searchParams.set('application_name', app);
  const locker = createLocker({ connectionString: u.toString(), maxSessions });
  const handle = await locker.acquire(name);
  return { signal: handle.signal, lose: async () => void (await killBackends(url, app)), close: () => locker.close() };
}

/** Session locks on one pinned session per participant. */
const session: LockKindUnderTest = {
  name: 'session',
  shared: true,
  open: async (url) => lockerParticipant(createLocker({ connectionString: url, maxSessions: 1 })),
  holdAndLose: (url, name) => holdAndKill(url, name, 1),
};

/** Session locks multiplexed over two sessions that also carry 200 unrelated held locks. */
const multiplexed: LockKindUnderTest = {
  name: 'multiplexed',
  shared: true,
  open: async (url) => {
    const locker = createLocker({ connectionString: url, maxSessions: 2 });
    const noise = await Promise.all(Array.from({ length: 200 }, (_, i) => locker.acquire(`noise:${Math.random()}:${i}`)));
    return lockerParticipant(locker, async () => {
      await Promise.all(noise.map((h) => h.release()));
    });
  },
  holdAndLose: (url, name) => holdAndKill(url, name, 2),
};

/** pg_advisory_xact_lock on node-postgres clients, one transaction per critical section. */
const xactPg: LockKindUnderTest = {
  name: 'xact-pg',
  shared: true,
  open: async (url) => {
    const app = appName('xact');
    const pool = new pg.Pool({ connectionString: withApp(url, app), max: 6 });
    let ended: Promise<void> | undefined;
    const inTransaction = async <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const value = await fn(client);
        await client.query('COMMIT');
        return value;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        client.release();
      }
    };
    return {
      withLock: (name, fn, opts) =>
        inTransaction(async (c) => {
          await xactLock(c, name, opts);
          return fn();
        }),
      tryWithLock: (name, fn, opts) =>
        inTransaction(async (c) => {
          if (!(await tryXactLock(c, name, opts))) return { acquired: false };
          return { acquired: true, value: await fn() };
        }),
      reenter: (name) =>
        inTransaction(async (c) => {
          await xactLock(c, name);
          return xactLock(c, name, { timeoutMs: 1000 }).then(() => new Error('re-entry was allowed'), (err: unknown) => err);
        }),
      waiting: () => lockWaits(url, app),
      close: () => (ended ??= pool.end()),
    };
  },
};

/** pg_advisory_xact_lock inside Kysely transactions. */
const xactKysely: LockKindUnderTest = {
  name: 'xact-kysely',
  shared: true,
  open: async (url) => {
    const app = appName('kysely');
    let destroyed: Promise<void> | undefined;
    const db = new Kysely<Record<string, never>>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: withApp(url, app), max: 6 }) }),
    });
    return {
      withLock: (name, fn, opts) =>
        db.transaction().execute(async (trx) => {
          await kyselyLocks.xactLock(trx, name, opts);
          return fn();
        }),
      tryWithLock: (name, fn, opts) =>
        db.transaction().execute(async (trx) => {
          if (!(await kyselyLocks.tryXactLock(trx, name, opts))) return { acquired: false };
          return { acquired: true, value: await fn() };
        }),
      reenter: (name) =>
        db.transaction().execute(async (trx) => {
          await kyselyLocks.xactLock(trx, name);
          return kyselyLocks.xactLock(trx, name, { timeoutMs: 1000 }).then(() => new Error('re-entry was allowed'), (err: unknown) => err);
        }),
      waiting: () => lockWaits(url, app),
      close: () => (destroyed ??= db.destroy()),
    };
  },
};

/** Table-backed leases (needs pgfence's schema). */
const lease: LockKindUnderTest = {
  name: 'lease',
  shared: false,
  open: async (url) => {
    const locker = createLocker({ connectionString: url });
    return {
      withLock: (name, fn, opts) => locker.withLease(name, () => fn(), { timeoutMs: opts?.timeoutMs, signal: opts?.signal }),
      tryWithLock: async (name, fn) => {
        const h = await locker.tryLease(name);
        if (!h) return { acquired: false };
        try {
          return { acquired: true, value: await fn() };
        } finally {
          await h.release();
        }
      },
      reenter: (name) =>
        locker.withLease(name, () => locker.lease(name, { timeoutMs: 1000 }).then(() => new Error('re-entry was allowed'), (err: unknown) => err)),
      waiting: async () => locker.stats().waiting,
      close: () => locker.close(),
    };
  },
  holdAndLose: async (url, name) => {
    const locker = createLocker({ connectionString: url });
    const lease = await locker.lease(name, { ttlMs: 400, renew: false });
    // A lease's loss is its expiry: here nobody renews it.
    return { signal: lease.signal, lose: async () => {}, close: () => locker.close() };
  },
};

export const lockKinds: LockKindUnderTest[] = [session, multiplexed, xactPg, xactKysely, lease];
