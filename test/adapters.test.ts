import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLocker,
  DeadlockError,
  InvalidArgumentError,
  LockTimeoutError,
  LockUnavailableError,
  lockKey,
  NestedLockError,
  NotInTransactionError,
  PgfenceError,
  TransactionAbortedError,
  xactLock,
  type Locker,
} from '../src/index.js';
import { eventually, useMigratedDatabase } from './support/db.js';
import { advisoryLocksOf } from './support/server-locks.js';
import { proxyTo } from './support/tcp-proxy.js';
import type { AdapterClient, AdapterUnderTest } from './support/adapters/adapter.js';
import { adaptersUnderTest } from './support/adapters/index.js';

/**
 * One conformance suite over every data-layer adapter (after madelson/DistributedLock, which runs one
 * suite over every provider): the same behaviours through node-postgres, Kysely, postgres.js, Prisma,
 * Drizzle (both drivers), TypeORM and Knex, each on its own library's transaction object. Each describe
 * is named `adapter (library version)`; scripts/adapter-matrix.mjs prints the adapter x test matrix.
 */

/** A lock taken in a transaction of `client`'s that stays open until release(). */
async function holdIn(client: AdapterClient, name: string, opts: { fencing?: boolean } = {}): Promise<{ token: bigint | null; release(): Promise<void> }> {
  let letGo!: () => void;
  const held = new Promise<void>((r) => (letGo = r));
  let granted!: (token: bigint | null) => void;
  const got = new Promise<bigint | null>((r) => (granted = r));
  const done = client.transaction(async (tx) => {
    const r = await client.xactLock(tx, name, opts);
    granted(r.token);
    await held;
  });
  const token = await Promise.race([got, done.then(() => Promise.reject(new Error(`${name}: the holder's transaction ended before it was let go`)))]);
  return {
    token,
    release: async () => {
      letGo();
      await done;
    },
  };
}

/** What a promise settled with: its value, or the error it rejected with. */
const settled = <T>(p: Promise<T>): Promise<T | unknown> => p.then((v) => v, (e: unknown) => e);

function conformance(adapter: AdapterUnderTest): void {
  let url: string;
  let a: AdapterClient;
  let b: AdapterClient;
  let observer: pg.Pool;
  let locker: Locker;
  const names = new Set<string>();
  /** A name of this test's own (databases are per adapter; names per test keep tests apart). */
  const fresh = (label: string) => {
    const name = `conf:${label}:${names.size}`;
    names.add(name);
    return name;
  };
  const waiters = (name: string) => advisoryLocksOf(url, lockKey(name), false);
  const held = async (name: string) => (await advisoryLocksOf(url, lockKey(name), true)) > 0;
  const rows = async (id: number) =>
    (await observer.query<{ label: string | null; n: number; fencing_token: string | null; version: string }>(`SELECT label, n, fencing_token, version FROM conformance_items WHERE id = $1`, [id])).rows;
  let nextId = 1;
  /** A row of conformance_items of the test's own. */
  const row = async (values: { n?: number; token?: bigint | null; version?: bigint } = {}) => {
    const id = nextId++;
    await observer.query(`INSERT INTO conformance_items (id, label, n, fencing_token, version) VALUES ($1, 'new', $2, $3, $4)`, [
      id,
      values.n ?? 0,
      values.token === undefined || values.token === null ? null : String(values.token),
      String(values.version ?? 0n),
    ]);
    return id;
  };

  beforeAll(async () => {
    url = (await useMigratedDatabase(`adapters_${adapter.name}`)).url;
    observer = new pg.Pool({ connectionString: url, max: 3 });
    await observer.query(`CREATE TABLE conformance_items (id int PRIMARY KEY, label text, n int NOT NULL DEFAULT 0, fencing_token bigint, version bigint NOT NULL DEFAULT 0)`);
    locker = createLocker({ connectionString: url });
    [a, b] = await Promise.all([adapter.open(url), adapter.open(url)]);
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close(), locker?.close()]);
    await observer?.end();
  });

  describe('transaction locks', () => {
    it('holds the lock until COMMIT', async () => {
      const name = fresh('commit');
      let inside = false;
      await a.transaction(async (tx) => {
        expect(await a.xactLock(tx, name)).toMatchObject({ key: lockKey(name), token: null });
        expect(await held(name)).toBe(true);
        // Another transaction (another process, in effect) cannot take it meanwhile.
        expect(await b.transaction((tx2) => b.tryXactLock(tx2, name))).toBeNull();
        inside = true;
      });
      expect(inside).toBe(true);
      expect(await held(name)).toBe(false);
      expect(await b.transaction((tx2) => b.tryXactLock(tx2, name))).not.toBeNull();
    });

    it('lets the lock go at ROLLBACK', async () => {
      const name = fresh('rollback');
      const failure = new Error('the caller’s own failure');
      const outcome = await settled(
        a.transaction(async (tx) => {
          await a.xactLock(tx, name);
          throw failure;
        }),
      );
      expect(outcome).toBe(failure);
      expect(await held(name)).toBe(false);
      expect(await b.transaction((tx) => b.tryXactLock(tx, name))).not.toBeNull();
    });

    it('tries once and answers null when the name is busy', async () => {
      const name = fresh('busy');
      const holder = await holdIn(a, name);
      try {
        expect(await b.transaction((tx) => b.tryXactLock(tx, name))).toBeNull();
      } finally {
        await holder.release();
      }
    });

    it('bounds the wait: LockTimeoutError, and the transaction goes on', async () => {
      const name = fresh('timeout');
      const holder = await holdIn(a, name);
      try {
        const after = await b.transaction(async (tx) => {
          const err = await settled(b.xactLock(tx, name, { timeoutMs: 200 }));
          expect(err).toBeInstanceOf(LockTimeoutError);
          expect(err).toMatchObject({ code: 'PGFENCE_LOCK_TIMEOUT' });
          await b.execute(tx, 'SELECT 1'); // still usable: the wait was undone, not the transaction
          return 'committed';
        });
        expect(after).toBe('committed');
      } finally {
        await holder.release();
      }
    });

    it('waits for a busy name and gets it once the holder commits', async () => {
      const name = fresh('wait');
      const holder = await holdIn(a, name);
      const waiting = b.transaction((tx) => b.xactLock(tx, name, { timeoutMs: 30_000 }));
      try {
        await eventually(async () => (await waiters(name)) === 1, 15_000, 'the waiter to queue in the server');
      } finally {
        await holder.release();
      }
      expect(await waiting).toMatchObject({ key: lockKey(name) });
    });

    it('one name is one lock: a live lease keeps the transaction lock out, and the other way round', async () => {
      const name = fresh('lease');
      const lease = await locker.lease(name, { ttlMs: 60_000, renew: false });
      try {
        await b.transaction(async (tx) => {
          expect(await b.tryXactLock(tx, name)).toBeNull();
          expect(await settled(b.xactLock(tx, name, { timeoutMs: 200 }))).toBeInstanceOf(LockTimeoutError);
        });
      } finally {
        await lease.release();
      }
      const holder = await holdIn(a, name);
      try {
        expect(await locker.tryLease(name)).toBeNull();
      } finally {
        await holder.release();
      }
      await b.transaction(async (tx) => expect(await b.tryXactLock(tx, name)).not.toBeNull());
    });

    it('fencing tokens strictly increase on one name across this adapter, node-postgres and a locker', async () => {
      const name = fresh('tokens');
      const tokens: bigint[] = [];
      const viaAdapter = () => a.transaction(async (tx) => (await a.xactLock(tx, name, { fencing: true })).token!);
      const viaPg = async () => {
        const c = await observer.connect();
        try {
          await c.query('BEGIN');
          const { token } = await xactLock(c, name, { fencing: true });
          await c.query('COMMIT');
          return token;
        } finally {
          c.release();
        }
      };
      const viaLocker = async () => {
        const h = await locker.acquire(name, { fencing: true });
        await h.release();
        return h.token;
      };
      for (const take of [viaAdapter, viaPg, viaAdapter, viaLocker, viaAdapter, viaAdapter]) tokens.push(await take());
      for (const t of tokens) expect(typeof t).toBe('bigint');
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    });
  });

  describe('guarded writes', () => {
    it('fencedUpdate: applied for the holder, stale for an older token, missing for no row', async () => {
      const id = await row();
      // Tokens are per name: the older and the newer holder of one name.
      const name = fresh('fenced');
      const older = await holdIn(a, name, { fencing: true });
      await older.release();
      const newer = await a.transaction(async (tx) => (await a.xactLock(tx, name, { fencing: true })).token!);
      expect(newer > older.token!).toBe(true);
      expect(await a.transaction((tx) => a.fencedUpdate(tx, { where: { id }, set: { label: 'by newer' }, token: newer }))).toEqual({ applied: true, written: 1, refused: 0 });
      // The same holder may write again.
      expect(await a.transaction((tx) => a.fencedUpdate(tx, { where: { id }, set: { label: 'by newer again' }, token: newer }))).toMatchObject({ applied: true });
      expect(await a.transaction((tx) => a.fencedUpdate(tx, { where: { id }, set: { label: 'by older' }, token: older.token! }))).toEqual({
        applied: false,
        written: 0,
        refused: 1,
        reason: 'stale',
        currentToken: newer,
      });
      expect(await rows(id)).toEqual([{ label: 'by newer again', n: 0, fencing_token: String(newer), version: '0' }]);
      expect(await a.transaction((tx) => a.fencedUpdate(tx, { where: { id: 1_000_000 }, set: { label: 'nobody' }, token: newer }))).toEqual({
        applied: false,
        written: 0,
        refused: 0,
        reason: 'missing',
      });
    });

    it("fencedClaim then fencedUpdate: a claim by a newer holder refuses the older holder's write", async () => {
      const id = await row({ n: 5 });
      const name = fresh('claim');
      const older = (await holdIn(a, name, { fencing: true })) as { token: bigint; release(): Promise<void> };
      await older.release();
      const newerToken = await a.transaction(async (tx) => (await a.xactLock(tx, name, { fencing: true })).token!);
      const claim = await a.transaction((tx) => a.fencedClaim(tx, { where: { id }, token: newerToken }));
      expect(claim).toEqual({ claimed: true, refused: 0, n: [5] });
      expect(await a.transaction((tx) => a.fencedUpdate(tx, { where: { id }, set: { label: 'late' }, token: older.token }))).toMatchObject({
        applied: false,
        reason: 'stale',
        currentToken: newerToken,
      });
      // The older holder's claim is refused too; the newer holder writes.
      expect(await a.transaction((tx) => a.fencedClaim(tx, { where: { id }, token: older.token }))).toEqual({ claimed: false, refused: 1, reason: 'stale', currentToken: newerToken, n: [] });
      expect(await a.transaction((tx) => a.fencedUpdate(tx, { where: { id }, set: { label: 'claimed' }, token: newerToken }))).toMatchObject({ applied: true });
      expect(await a.transaction((tx) => a.fencedClaim(tx, { where: { id: 1_000_000 }, token: newerToken }))).toEqual({ claimed: false, refused: 0, reason: 'missing', n: [] });
    });

    // Only for libraries with an update builder (not node-postgres, postgres.js or Prisma).
    if (adapter.updateBuilder) it("the library's update builder, guarded (fenced(builder, token)): applied, stale, missing", async () => {
      expect(a.fencedBuilder).toBeTypeOf('function');
      const id = await row();
      const older = 10n;
      const newer = 20n;
      expect(await a.transaction((tx) => a.fencedBuilder!(tx, { where: { id }, set: { label: 'by newer' }, token: newer }))).toEqual({ applied: true, written: 1, refused: 0 });
      expect(await a.transaction((tx) => a.fencedBuilder!(tx, { where: { id }, set: { label: 'by older' }, token: older }))).toEqual({
        applied: false,
        written: 0,
        refused: 1,
        reason: 'stale',
        currentToken: newer,
      });
      expect(await rows(id)).toEqual([{ label: 'by newer', n: 0, fencing_token: String(newer), version: '0' }]);
      expect(await a.transaction((tx) => a.fencedBuilder!(tx, { where: { id: 1_000_000 }, set: { label: 'x' }, token: newer }))).toMatchObject({ applied: false, reason: 'missing' });
    });

    it('versionedUpdate: applied with the next version, conflict after another write, missing for no row', async () => {
      const id = await row({ version: 3n });
      expect(await a.transaction((tx) => a.versionedUpdate(tx, { where: { id }, set: { label: 'first' }, version: 3n }))).toEqual({ applied: true, currentVersion: 4n });
      // A second writer that read version 3 too.
      expect(await b.transaction((tx) => b.versionedUpdate(tx, { where: { id }, set: { label: 'second' }, version: 3n }))).toEqual({
        applied: false,
        reason: 'conflict',
        currentVersion: 4n,
      });
      expect(await rows(id)).toEqual([{ label: 'first', n: 0, fencing_token: null, version: '4' }]);
      expect(await a.transaction((tx) => a.versionedUpdate(tx, { where: { id: 1_000_000 }, set: { label: 'x' }, version: 0n }))).toEqual({ applied: false, reason: 'missing' });
    });
  });

  describe('errors: typed PgfenceErrors, never the library’s own', () => {
    const typed = (err: unknown, type: abstract new (...args: never[]) => PgfenceError, code: string) => {
      expect(err).toBeInstanceOf(type);
      expect(err).toMatchObject({ code });
    };

    it('outside a transaction: NotInTransactionError', async () => {
      typed(await settled(a.xactLock(a.outside(), fresh('outside'))), NotInTransactionError, 'PGFENCE_NOT_IN_TRANSACTION');
    });

    it('the same name twice in one transaction: NestedLockError', async () => {
      const name = fresh('nested');
      await a.transaction(async (tx) => {
        await a.xactLock(tx, name);
        typed(await settled(a.xactLock(tx, name)), NestedLockError, 'PGFENCE_NESTED_LOCK');
      });
    });

    it('a deadlock: DeadlockError in one transaction, which stays usable, and the other gets its lock', async () => {
      const [first, second] = [fresh('deadlock-a'), fresh('deadlock-b')];
      let bothHold!: () => void;
      const gate = new Promise<void>((r) => (bothHold = r));
      let holders = 0;
      const cross = (c: AdapterClient, mine: string, theirs: string) =>
        c.transaction(async (tx) => {
          await c.xactLock(tx, mine);
          if (++holders === 2) bothHold();
          await gate;
          const outcome = await settled(c.xactLock(tx, theirs, { timeoutMs: 30_000 }));
          if (outcome instanceof Error) await c.execute(tx, 'SELECT 1'); // the transaction survived the deadlock
          return outcome;
        });
      const outcomes = await Promise.all([cross(a, first, second), cross(b, second, first)]);
      const errors = outcomes.filter((o) => o instanceof Error);
      expect(errors).toHaveLength(1);
      typed(errors[0], DeadlockError, 'PGFENCE_DEADLOCK');
      expect(outcomes.filter((o) => !(o instanceof Error))).toHaveLength(1);
    });

    it('an aborted transaction: TransactionAbortedError from a lock and from a guarded write', async () => {
      const id = await row();
      const seen: unknown[] = [];
      // The library then rolls back (or reports the failed commit): what matters is what pgfence threw.
      await settled(
        a.transaction(async (tx) => {
          await settled(a.execute(tx, 'SELECT 1/0'));
          seen.push(await settled(a.xactLock(tx, fresh('aborted'))));
          seen.push(await settled(a.fencedUpdate(tx, { where: { id }, set: { label: 'x' }, token: 1n })));
          seen.push(await settled(a.versionedUpdate(tx, { where: { id }, set: { label: 'x' }, version: 0n })));
        }),
      );
      expect(seen).toHaveLength(3);
      for (const err of seen) typed(err, TransactionAbortedError, 'PGFENCE_TRANSACTION_ABORTED');
      expect(await rows(id)).toEqual([{ label: 'new', n: 0, fencing_token: null, version: '0' }]);
    });

    it('bad input is refused before any I/O (also on a transaction that has ended)', async () => {
      // A transaction object used after its transaction ended: any statement through it would fail in
      // the library's own way, so an InvalidArgumentError shows that validation came first.
      const ended = await a.transaction(async (tx) => tx);
      const refusals = [
        () => a.xactLockUnchecked(ended, ''),
        () => a.xactLockUnchecked(ended, 'x\u0000y'),
        () => a.xactLockUnchecked(ended, 'n', { timeoutMs: -1 }),
        () => a.xactLockUnchecked(ended, 'n', { tmeoutMs: 5 }),
        () => a.xactLockUnchecked(ended, 'n', { mode: 'shared', fencing: true }),
        () => a.xactLockUnchecked(42, 'n'),
        () => a.xactLockUnchecked(null, 'n'),
        () => a.fencedUpdate(ended, { where: { id: 1 }, set: { label: 'x' }, token: 0n }),
        () => a.fencedClaim(ended, { where: { id: 1 }, token: -1n }),
        () => a.versionedUpdate(ended, { where: { id: 1 }, set: { label: 'x' }, version: -1n }),
      ];
      for (const refusal of refusals) typed(await settled(refusal()), InvalidArgumentError, 'PGFENCE_INVALID_ARGUMENT');
    });
  });

  it('a doomed transaction: when PostgreSQL does not answer, LockUnavailableError, and nothing of the transaction commits', async () => {
    const name = fresh('doomed');
    const id = 2_000_000 + nextId++;
    const holder = await holdIn(b, name);
    const { proxy, url: via } = await proxyTo(url);
    const cut = await adapter.open(via);
    let later: unknown = 'not tried';
    let lockOutcome: unknown = 'not tried';
    try {
      const outcome = await settled(
        cut.transaction(async (tx) => {
          await cut.execute(tx, `INSERT INTO conformance_items (id, label) VALUES (${id}, 'before the cut')`);
          const waiting = settled(cut.xactLock(tx, name, { timeoutMs: 1000 }));
          await eventually(async () => (await waiters(name)) === 1, 15_000, 'the wait to reach the server');
          proxy.stall(); // held, not lost: delivered once the network heals
          try {
            // The server grants the wait, but its answer is stuck in the network.
            await holder.release();
            await eventually(async () => (await waiters(name)) === 0, 15_000, 'the server to grant the wait');
            lockOutcome = await waiting;
          } finally {
            proxy.heal();
          }
          // A caller that carries on anyway: its statement is refused, it never commits.
          later = await settled(cut.execute(tx, `INSERT INTO conformance_items (id, label) VALUES (${id + 1}, 'after giving up')`));
          return 'carried on';
        }),
      );
      void outcome; // the library's COMMIT of a doomed transaction: an error, or a rollback it reports as done
      expect(lockOutcome).toBeInstanceOf(LockUnavailableError);
      expect(lockOutcome).toMatchObject({ code: 'PGFENCE_UNAVAILABLE', message: expect.stringMatching(/doomed|discard/) });
      expect(later).toBeInstanceOf(Error);
    } finally {
      proxy.heal();
      await holder.release().catch(() => {}); // released in the test already, unless it failed before
      await cut.close().catch(() => {}); // its connection may be gone
      await proxy.close();
    }
    await eventually(async () => (await observer.query(`SELECT 1 FROM conformance_items WHERE id IN ($1, $2)`, [id, id + 1])).rowCount === 0, 15_000, 'nothing of the doomed transaction to be kept');
  });
}

for (const adapter of adaptersUnderTest()) {
  describe(`${adapter.name} (${adapter.library()})`, () => conformance(adapter));
}

// Every adapter the suite knows of is run: a registry that lost one would shrink the matrix silently.
it.runIf(!process.env.PGFENCE_ADAPTERS)('runs every adapter', () => {
  const names = adaptersUnderTest().map((a) => a.name);
  for (const expected of ['node-postgres', 'kysely', 'postgres.js', 'prisma', 'drizzle/node-postgres', 'drizzle/postgres-js', 'typeorm', 'knex']) {
    expect(names).toContain(expected);
  }
});
