import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { createLocker, lockKey, tryXactLock, xactLock, type Locker } from '../../src/index.js';
import * as kyselyLocks from '../../src/adapters/kysely/index.js';
import { appName, eventually, killBackends, queryOnce } from './db.js';
import { advisoryLocksOf, leaseLive } from './server-locks.js';
import { proxyTo } from './tcp-proxy.js';

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
  /**
   * For kinds whose waits run on a locker, where a grant can land after its caller gave up (timeout,
   * abort, close): a participant whose grant can be held up on its way (see LateGrantLab).
   */
  lateGrant?(url: string): Promise<LateGrantLab>;
}

/**
 * A participant `b` whose grant the test holds up on its way, so that b gives up while its request is
 * in flight and the grant lands afterwards, every time (a race left to chance almost never hits).
 */
export interface LateGrantLab {
  readonly b: Participant;
  /**
   * With b waiting for `name`: lets the holder go (`letGo`) so that the server grants b's request, but b
   * does not hear of the grant until deliver(). Resolves once the request is granted or bound to be.
   */
  holdUpGrant(name: string, letGo: () => Promise<unknown>): Promise<void>;
  /** Lets the grant through to b. */
  deliver(): Promise<void>;
  /** From now on b's server sessions outlive b's close(), so that what they still hold stays visible. */
  keepSessionsAfterClose(): void;
  /** Whether the server holds `name` for anyone now, read without taking it. */
  held(name: string): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * Session locks: b, behind a proxy, waits in PostgreSQL's queue; the proxy holds what the server sends
 * while b's holder lets go, so the server grants b and the answer waits in the network.
 */
async function heldUpReplies(kind: LockKindUnderTest, url: string): Promise<LateGrantLab> {
  const { proxy, url: via } = await proxyTo(url);
  const b = await kind.open(via);
  // Connected beforehand: a look sent the moment b's caller is answered reaches the server before anything b sends next.
  const watcher = new pg.Client({ connectionString: url });
  await watcher.connect();
  const locks = (name: string, granted: boolean) => advisoryLocksOf(watcher, lockKey(name), granted);
  return {
    b,
    async holdUpGrant(name, letGo) {
      await eventually(async () => (await locks(name, false)) > 0, 15_000, `b to wait in the server's queue for ${name}`);
      proxy.holdReplies();
      await letGo();
      await eventually(async () => (await locks(name, true)) > 0, 15_000, `the server to grant ${name} to b`);
    },
    deliver: async () => proxy.heal(),
    keepSessionsAfterClose: () => proxy.keepServerSessions(),
    held: async (name) => (await locks(name, true)) > 0,
    async close() {
      proxy.heal();
      await b.close();
      await proxy.close();
      await watcher.end();
    },
  };
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

/** Past this, closing a participant whose transaction is still open cuts it and fails (see boundedClose). */
const CLOSE_BOUND_MS = 10_000;

/**
 * Closes a transaction-lock participant's pool within CLOSE_BOUND_MS. Ending a pool waits for every client
 * still checked out, and a test that failed while its critical section was open (say, its lock did not
 * exclude, an expect threw, and the holder was never let go) keeps one forever: the run would hang instead
 * of failing. Past the bound the clients still out are cut (their transactions, and the locks in them,
 * end on the server) and handed back to the pool, which then ends; the close fails, saying so.
 */
function boundedClose(pool: pg.Pool, end: () => Promise<void>): () => Promise<void> {
  const out = new Set<pg.PoolClient>();
  pool.on('acquire', (client) => out.add(client));
  pool.on('release', (_err, client) => out.delete(client));
  let closing: Promise<void> | undefined;
  return () =>
    (closing ??= (async () => {
      const ending = end();
      let timer: NodeJS.Timeout | undefined;
      const inTime = await Promise.race([ending.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), CLOSE_BOUND_MS)))]);
      clearTimeout(timer);
      if (inTime) return;
      const left = out.size;
      for (const client of out) {
        client.on('error', () => {}); // reported by the close itself
        (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
        client.release(true); // its holder may never let go (it awaits something that will not come)
      }
      await ending;
      throw new Error(`${left} client(s) were still checked out ${CLOSE_BOUND_MS} ms after close: a transaction (and its locks) was left open`);
    })());
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
  lateGrant: (url) => heldUpReplies(session, url),
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
  lateGrant: (url) => heldUpReplies(multiplexed, url),
};

/** pg_advisory_xact_lock on node-postgres clients, one transaction per critical section. */
const xactPg: LockKindUnderTest = {
  name: 'xact-pg',
  shared: true,
  open: async (url) => {
    const app = appName('xact');
    const pool = new pg.Pool({ connectionString: withApp(url, app), max: 6 });
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
      close: boundedClose(pool, () => pool.end()),
    };
  },
};

/** pg_advisory_xact_lock inside Kysely transactions. */
const xactKysely: LockKindUnderTest = {
  name: 'xact-kysely',
  shared: true,
  open: async (url) => {
    const app = appName('kysely');
    const pool = new pg.Pool({ connectionString: withApp(url, app), max: 6 });
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
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
      close: boundedClose(pool, () => db.destroy()),
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
  lateGrant: async (url) => {
    const b = await lease.open(url);
    // A transaction that locks the key's token row: b's lease_acquire, which issues a token as it takes
    // the lease, waits for it inside the server, and takes the lease once it ends.
    const tokenRow = new pg.Client({ connectionString: url });
    const watcher = new pg.Client({ connectionString: url }); // as in heldUpReplies
    await Promise.all([tokenRow.connect(), watcher.connect()]);
    let open = false;
    const deliver = async () => {
      if (open) await tokenRow.query('COMMIT');
      open = false;
    };
    return {
      b,
      async holdUpGrant(name, letGo) {
        await tokenRow.query('BEGIN');
        open = true;
        const { rowCount } = await tokenRow.query('SELECT 1 FROM pgfence.fencing_tokens WHERE key = $1 FOR UPDATE', [String(lockKey(name))]);
        if (rowCount !== 1) throw new Error(`no token row for ${name}: the holder's lease issued none`);
        await letGo();
        await eventually(
          async () =>
            (
              await queryOnce(url, `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%lease_acquire%'`)
            ).length > 0,
          15_000,
          `b's lease_acquire of ${name} to wait for the token row`,
        );
      },
      deliver,
      keepSessionsAfterClose: () => {}, // a lease lives in its row, not in a session
      held: (name) => leaseLive(watcher, lockKey(name)),
      async close() {
        await deliver();
        await Promise.all([tokenRow.end(), watcher.end()]);
        await b.close();
      },
    };
  },
};

export const lockKinds: LockKindUnderTest[] = [session, multiplexed, xactPg, xactKysely, lease];
