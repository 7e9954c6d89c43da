// Turns across kinds (docs/concepts.md): a waiter in PostgreSQL's queue for a name is granted once the
// holders queued before it have each held the name once, whatever their kinds, and nobody who asks
// after it gets the name first. Each test of the first two groups sets the queue up in order (a holder,
// the contenders queued ahead of the waiter, the waiter, the contenders queued behind it; each one seen
// waiting in pg_locks before the next one asks), then lets the holder go: from then on every contender
// loops on the name, handing it over among themselves continuously, while the waiter waits. The bound
// is counted, not timed: the contenders' grants between the waiter's start and its grant number at
// most the contenders queued ahead of it, and none of them went to a request made after the waiter
// started. Then a known gap, the same way (xactLock with a signal). Last, a round-robin of every kind
// on one name: each kind gets its turns, no two sections overlap.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, lockKey, xactLock } from '../src/index.js';
import { eventually, sleep, track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;

beforeAll(async () => {
  db = await useMigratedDatabase('fairness');
  pool = new pg.Pool({ connectionString: db.url, max: 16 });
});
afterAll(async () => {
  await pool.end();
});

/** A few milliseconds of work inside a section (a statement of its own, as real work would be). */
const work = () => pool.query('SELECT pg_sleep(0.005)');

/** One way to take the name, hold it through `fn` and give it back; its connections carry the application_name `app`. */
type Taker = { kind: string; app: string; take(name: string, fn: () => Promise<void>): Promise<void>; close(): Promise<void> };

let apps = 0;
const appFor = (kind: string) => `fair_${kind.replace(/-/g, '_')}_${++apps}`;

function sessionTaker(): Taker {
  const app = appFor('session');
  const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }) }));
  return { kind: 'session', app, take: (name, fn) => locker.withLock(name, fn, { timeoutMs: 20_000 }), close: () => locker.close() };
}

function leaseTaker(): Taker {
  const app = appFor('lease');
  const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }) }));
  return { kind: 'lease', app, take: (name, fn) => locker.withLease(name, fn, { timeoutMs: 20_000, ttlMs: 5000 }), close: () => locker.close() };
}

async function clientOf(app: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: db.urlWith({ application_name: app }) });
  await c.connect();
  return c;
}

/**
 * A taker on a client of its own: `enter` takes the name (returning what `leave` needs), `leave` gives it
 * back after the section. Transaction kinds enter with BEGIN and leave with COMMIT (ROLLBACK on failure).
 */
async function clientTaker<T>(
  kind: string,
  enter: (c: pg.Client, key: bigint, name: string) => Promise<T>,
  leave: (c: pg.Client, key: bigint, taken: T) => Promise<unknown>,
  onFailure: (c: pg.Client) => Promise<unknown> = async () => {},
): Promise<Taker> {
  const app = appFor(kind);
  const c = await clientOf(app);
  return {
    kind,
    app,
    async take(name, fn) {
      const key = lockKey(name);
      let taken: T;
      try {
        taken = await enter(c, key, name);
        await fn();
      } catch (err) {
        await onFailure(c);
        throw err;
      }
      await leave(c, key, taken);
    },
    close: () => c.end(),
  };
}

const inTransaction = async (c: pg.Client, take: () => Promise<unknown>) => {
  await c.query('BEGIN');
  await c.query(`SET LOCAL lock_timeout = '20s'`);
  await take();
};
const commit = (c: pg.Client) => c.query('COMMIT');
const rollback = (c: pg.Client) => c.query('ROLLBACK');

const xactTaker = () => clientTaker('xact', (c, _key, name) => inTransaction(c, () => xactLock(c, name, { timeoutMs: 20_000 })), commit, rollback);
const sqlXactTaker = () => clientTaker('sql-xact', (c, key) => inTransaction(c, () => c.query('SELECT pgfence.xact_lock_fenced($1)', [key])), commit, rollback);
const sqlLockTaker = () =>
  clientTaker(
    'sql-lock',
    async (c, key) => {
      await c.query(`SET lock_timeout = '20s'`);
      await c.query('SELECT pgfence.lock_fenced($1)', [key]);
    },
    (c, key) => c.query('SELECT pgfence.unlock($1)', [key]),
    (c) => c.query('SELECT pg_advisory_unlock_all()'), // a failed section: nothing of it stays held
  );
const sqlLeaseTaker = () =>
  clientTaker(
    'sql-lease',
    async (c, key) => {
      const { rows } = await c.query<{ t: string | null }>('SELECT pgfence.lease($1, 5000, 20000)::text AS t', [key]);
      if (rows[0]!.t === null) throw new Error('sql-lease: pgfence.lease timed out');
      return rows[0]!.t;
    },
    (c, key, token) => c.query('SELECT pgfence.release_lease($1, $2)', [key, token]),
  );

/** A grant to a contender: when its request was made and when it was granted, on the test's clock. */
interface Grant {
  who: string;
  requestedAt: number;
  grantedAt: number;
}

/**
 * Contenders looping on `name` from the moment each is started, each section a few ms of work: their
 * grants, overlaps (the waiter's section counts too) and waits that ended without a turn.
 */
class Contenders {
  readonly grants: Grant[] = [];
  readonly missed: string[] = [];
  overlaps = 0;
  private inside = 0;
  private stopped = false;
  private readonly runs: Promise<void>[] = [];

  constructor(private readonly name: string) {}

  /** Starts `t` looping; its first section lasts until `letGo` (if given). Resolves at its first grant. */
  start(t: Taker, letGo?: Promise<void>): Promise<void> {
    let firstGrant!: () => void;
    const granted = new Promise<void>((resolve) => (firstGrant = resolve));
    let first = true;
    this.runs.push(
      (async () => {
        while (!this.stopped) {
          const requestedAt = performance.now();
          await t
            .take(this.name, () =>
              this.section(async () => {
                this.grants.push({ who: t.app, requestedAt, grantedAt: performance.now() });
                firstGrant();
                if (first && letGo) await letGo;
                first = false;
                await work();
              }),
            )
            .catch((err: unknown) => this.missed.push(`${t.app}: ${String(err)}`));
        }
      })(),
    );
    return granted;
  }

  /** A section on the name: overlaps with any other are counted. */
  async section(fn: () => Promise<void>): Promise<void> {
    if (++this.inside > 1) this.overlaps++;
    try {
      await fn();
    } finally {
      this.inside--;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.runs);
  }
}

/** Resolves once a backend of `app` is seen waiting in PostgreSQL's queue for `key` (pg_locks, not granted). */
async function seenWaiting(app: string, key: bigint, timeoutMs = 10_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    const { rows } = await pool.query(
      `SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.objsubid = 1 AND NOT l.granted
          AND ((l.classid::int8 << 32) | l.objid::int8) = $2::int8`,
      [app, String(key)],
    );
    if (rows.length > 0) return;
    await sleep(2);
  }
  throw new Error(`${app} was not seen waiting in PostgreSQL's queue within ${timeoutMs} ms`);
}

/**
 * Sets the queue up on `name` in order (holder; then each of `ahead`, the waiter and each of `behind`,
 * each seen waiting before the next asks), lets the holder go, and waits for the waiter's grant while
 * every contender loops. What the contenders got while the waiter waited.
 */
async function turnsWhileWaiting(o: { name: string; holder: Taker; ahead: Taker[]; waiter: Taker; behind: Taker[] }) {
  const key = lockKey(o.name);
  const contenders = new Contenders(o.name);
  let letGo!: () => void;
  const holderLetsGo = new Promise<void>((resolve) => (letGo = resolve));
  const waiter = { startedAt: NaN, grantedAt: Infinity, error: null as string | null };
  let waiting: Promise<void> = Promise.resolve();
  try {
    await contenders.start(o.holder, holderLetsGo);
    for (const t of o.ahead) {
      void contenders.start(t);
      await seenWaiting(t.app, key);
    }
    waiter.startedAt = performance.now();
    waiting = o.waiter
      .take(o.name, () =>
        contenders.section(async () => {
          waiter.grantedAt = performance.now();
          await work();
        }),
      )
      .catch((err: unknown) => void (waiter.error = String(err)));
    await seenWaiting(o.waiter.app, key);
    for (const t of o.behind) {
      void contenders.start(t);
      await seenWaiting(t.app, key);
    }
  } finally {
    letGo();
    await waiting;
    await contenders.stop();
  }
  // The holder holds until every one is queued: nothing is granted between the waiter's start and its place in the queue.
  const meanwhile = contenders.grants.filter((g) => g.grantedAt > waiter.startedAt && g.grantedAt < waiter.grantedAt);
  const fmt = (g: Grant) => `${g.who} (asked ${(g.requestedAt - waiter.startedAt).toFixed(1)} ms after the waiter, granted ${(g.grantedAt - waiter.startedAt).toFixed(1)} ms after)`;
  return {
    /** Grants to contenders that asked after the waiter, before it: the documented bound is none. */
    overtakes: meanwhile.filter((g) => g.requestedAt > waiter.startedAt).map(fmt),
    /** Every grant to a contender while the waiter waited: at most one per contender queued ahead of it. */
    turnsBefore: meanwhile.map(fmt),
    waiterError: waiter.error,
    overlaps: contenders.overlaps,
    missed: contenders.missed,
  };
}

/** The documented bound: nobody who asked later, and each contender queued ahead at most once. */
function expectWithinBound(r: Awaited<ReturnType<typeof turnsWhileWaiting>>, ahead: number): void {
  expect({ overtakes: r.overtakes, waiterError: r.waiterError, overlaps: r.overlaps }).toEqual({ overtakes: [], waiterError: null, overlaps: 0 });
  expect(r.turnsBefore.length, `grants while the waiter waited: ${r.turnsBefore.join('; ')}`).toBeLessThanOrEqual(ahead);
}

const lockers: [string, () => Taker | Promise<Taker>][] = [
  ['session lockers', sessionTaker],
  ['SQL lock_fenced loops', sqlLockTaker],
  ['xactLock loops', xactTaker],
];
const leaseWaiters: [string, () => Taker | Promise<Taker>][] = [
  ['Node lease()', leaseTaker],
  ['SQL pgfence.lease', sqlLeaseTaker],
];

describe('a lease waiter while lockers hand the name over among themselves', () => {
  for (const [label, open] of lockers) {
    for (const [waiterLabel, openWaiter] of leaseWaiters) {
      it(`${label}: ${waiterLabel} is granted after the one locker queued ahead of it, before any locker that asked later`, async () => {
        const [holder, ahead, waiter] = [await open(), await open(), await openWaiter()];
        try {
          const r = await turnsWhileWaiting({ name: `fair:lease-waiter:${label}:${waiterLabel}`, holder, ahead: [ahead], waiter, behind: [] });
          expectWithinBound(r, 1);
        } finally {
          await Promise.all([holder, ahead, waiter].map((t) => t.close()));
        }
      });
    }
  }
});

// A live lease is no lock PostgreSQL can queue on. A transaction-lock waiter (xactLock, SQL
// xact_lock_fenced) or an SQL lock_fenced waiter that the queue reaches while one holds the name keeps
// the name's lock while it looks at the lease again, so nobody takes the name past it. (A transaction-
// lock waiter that gave the lock back instead went to the end of the queue each time: both transaction
// kinds of the round-robin below then got 0 or 1 turns in 120 s, in 3 of 5 runs.) Here the lease waiter
// queued just ahead of it takes its lease as the holder lets go: the waiter is reached while that lease
// is live, with two lock_fenced loops queued behind it.
const leaseKeepers: [string, () => Promise<Taker>][] = [
  ['xactLock', xactTaker],
  ['SQL xact_lock_fenced', sqlXactTaker],
  ['SQL lock_fenced', sqlLockTaker],
];

describe('a lock waiter that the queue reaches while a lease holds the name keeps its turn', () => {
  for (const [label, openWaiter] of leaseKeepers) {
    it(`${label}: granted after the lease queued ahead of it, before the lockers queued behind it`, async () => {
      const takers = [await sqlLockTaker(), leaseTaker(), await openWaiter(), await sqlLockTaker(), await sqlLockTaker()];
      const [holder, lease, waiter, ...behind] = takers;
      try {
        const r = await turnsWhileWaiting({ name: `fair:lease-ahead:${label}`, holder: holder!, ahead: [lease!], waiter: waiter!, behind });
        expectWithinBound(r, 1);
      } finally {
        await Promise.all(takers.map((t) => t.close()));
      }
    });
  }
});

/** `t`, holding the name `ms` longer in each section. */
const holdingLonger = (t: Taker, ms: number): Taker => ({
  ...t,
  take: (name, fn) =>
    t.take(name, async () => {
      await fn();
      await sleep(ms);
    }),
});

// Known gap (reported; remove `.fails` once fixed): with a signal, xactLock waits in slices of 250 ms
// (so that an abort is seen promptly), and each slice leaves PostgreSQL's queue and enters it again at
// its end. Behind lockers that hold the name longer than a slice in all, it is passed over again and
// again, until its timeout: here about 20 grants in its 3 s went to lockers that asked after it, and it
// timed out (the same waiter without a signal is granted after the one locker queued ahead of it).
describe('an xactLock waiter with a signal', () => {
  it.fails('keeps its turn while session lockers holding the name 120 ms each hand it over (known gap: it loses its place every 250 ms)', async () => {
    const signalled = await clientTaker(
      'xact-signal',
      (c, _key, name) => inTransaction(c, () => xactLock(c, name, { timeoutMs: 3000, signal: new AbortController().signal })),
      commit,
      rollback,
    );
    const takers = [sessionTaker(), sessionTaker(), signalled, sessionTaker(), sessionTaker()].map((t) => (t === signalled ? t : holdingLonger(t, 120)));
    const [holder, ahead, waiter, ...behind] = takers;
    try {
      const r = await turnsWhileWaiting({ name: 'fair:xact-signal', holder: holder!, ahead: [ahead!], waiter: waiter!, behind });
      expectWithinBound(r, 1);
    } finally {
      await Promise.all(takers.map((t) => t.close()));
    }
  });
});

/** Takers loop on `name` until stop() (each section checked for overlap); `turns` counts each one's sections. */
function loop(takers: Taker[], name: string) {
  let stopped = false;
  let inside = 0;
  let overlaps = 0;
  const turns = takers.map(() => 0);
  /** Waits that ended without a turn (each bounded at 20 s), by kind: reported, never an unhandled rejection. */
  const missed: string[] = [];
  const runs = takers.map(async (t, i) => {
    while (!stopped) {
      await t
        .take(name, async () => {
          if (++inside > 1) overlaps++;
          await work();
          inside--;
          turns[i]!++;
        })
        .catch((err: unknown) => missed.push(`${t.kind}: ${String(err)}`));
    }
  });
  return {
    turns,
    missed,
    get overlaps() {
      return overlaps;
    },
    async stop() {
      stopped = true;
      await Promise.all(runs);
    },
  };
}

describe('a round-robin of every kind on one name', () => {
  it('each kind (session, lease, xact, SQL lock, SQL lease, SQL xact) gets its turns; no two sections overlap', async () => {
    const name = 'fair:round-robin';
    const takers = [sessionTaker(), leaseTaker(), await xactTaker(), await sqlLockTaker(), await sqlLeaseTaker(), await sqlXactTaker()];
    const running = loop(takers, name);
    try {
      // Every kind takes turns (in about 1-2 s; the turns themselves are bounded above). A wait that still ends at
      // its 20 s bound is reported in the message, and tried again.
      await eventually(() => running.turns.every((n) => n >= 3), 120_000, 'every kind to get 3 turns').catch((err: Error) => {
        throw new Error(`${err.message} (turns: ${running.turns}; missed: ${running.missed.join('; ')})`);
      });
    } finally {
      await running.stop();
      await Promise.all(takers.map((t) => t.close()));
    }
    expect(running.overlaps).toBe(0);
    expect(Object.fromEntries(takers.map((t, i) => [t.kind, running.turns[i]! >= 3]))).toEqual(Object.fromEntries(takers.map((t) => [t.kind, true])));
  }, 180_000);
});
