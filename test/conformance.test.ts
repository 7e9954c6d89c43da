import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockerClosedError, LockLostError, LockTimeoutError, NestedLockError } from '../src/index.js';
import { eventually, sleep, useMigratedDatabase } from './support/db.js';
import { lockKinds, type LockKindUnderTest, type LockOpts, type Participant } from './support/kinds.js';

/**
 * The same behaviours over every lock kind (after madelson/DistributedLock's conformance suite).
 * Participants stand for processes: each has its own connections.
 */
/** Three participants of `kind`, each with its own connections, for the tests of one describe block. */
function participants(kind: LockKindUnderTest, label: string): { a: Participant; b: Participant; c: Participant } {
  const p = {} as { a: Participant; b: Participant; c: Participant };
  beforeAll(async () => {
    const db = await useMigratedDatabase(`conf_${label}_${kind.name}`);
    [p.a, p.b, p.c] = await Promise.all([kind.open(db.url), kind.open(db.url), kind.open(db.url)]);
  });
  afterAll(async () => {
    await Promise.all([p.a?.close(), p.b?.close(), p.c?.close()]);
  });
  return p;
}

/**
 * `a` takes `name` and keeps it until `release()`, which lets go and resolves once its critical section
 * has ended. Resolves once it holds it; rejects if taking it failed. Tests let go in `finally`: a holder
 * left holding after a failed expect would keep its connection (a transaction participant's close would
 * then wait for it) and every later request for the name waiting.
 */
async function hold(a: Participant, name: string, opts?: LockOpts): Promise<{ release(): Promise<unknown> }> {
  let letGo!: () => void;
  const held = new Promise<void>((r) => (letGo = r));
  let entered!: () => void;
  const inside = new Promise<void>((r) => (entered = r));
  const done = a.withLock(
    name,
    async () => {
      entered();
      await held;
    },
    opts,
  );
  await Promise.race([inside, done.then(() => Promise.reject(new Error(`${name}: the holder's critical section ended before it was let go`)))]);
  return {
    release: () => {
      letGo();
      return done;
    },
  };
}

/** One participant of `kind` and its database's URL, for the tests of one describe block. */
function oneParticipant(kind: LockKindUnderTest, label: string): { url: string; p: Participant } {
  const one = {} as { url: string; p: Participant };
  beforeAll(async () => {
    one.url = (await useMigratedDatabase(`conf_${label}_${kind.name}`)).url;
    one.p = await kind.open(one.url);
  });
  afterAll(async () => {
    await one.p?.close();
  });
  return one;
}

describe.each(lockKinds)('conformance: $name', (kind) => {
  const p = participants(kind, 'all');

  it('keeps an unsynchronised counter exact under 60 concurrent workers', async () => {
    let counter = 0;
    let inside = 0;
    let maxInside = 0;
    const all = [p.a, p.b, p.c];
    await Promise.all(
      Array.from({ length: 60 }, async (_, w) => {
        for (let i = 0; i < 4; i++) {
          await all[w % 3]!.withLock(
            'conformance:counter',
            async () => {
              inside++;
              maxInside = Math.max(maxInside, inside);
              const read = counter;
              await sleep(Math.random() < 0.5 ? 0 : 1); // let others run between read and write
              counter = read + 1;
              inside--;
            },
            { timeoutMs: 120_000 },
          );
        }
      }),
    );
    expect(maxInside).toBe(1);
    expect(counter).toBe(240);
  });

  it('try fails while another holds the lock and succeeds once it is released', async () => {
    const holder = await hold(p.a, 'conformance:try');
    try {
      expect((await p.b.tryWithLock('conformance:try', async () => 1)).acquired).toBe(false);
    } finally {
      await holder.release();
    }
    expect(await p.b.tryWithLock('conformance:try', async () => 7)).toEqual({ acquired: true, value: 7 });
  });

  it('times out with LockTimeoutError, and the lock is still usable afterwards', async () => {
    const holder = await hold(p.a, 'conformance:timeout');
    try {
      const started = performance.now();
      const err = await p.b.withLock('conformance:timeout', async () => 'ran', { timeoutMs: 300 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LockTimeoutError);
      expect(performance.now() - started).toBeGreaterThanOrEqual(250); // it did wait
    } finally {
      await holder.release();
    }
    expect(await p.b.withLock('conformance:timeout', async () => 'ran', { timeoutMs: 10_000 })).toBe('ran');
  });

  it('a signal cancels the wait with its reason, and leaves nothing behind', async () => {
    const holder = await hold(p.a, 'conformance:cancel');
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const waiting = p.b.withLock('conformance:cancel', async () => 'ran', { timeoutMs: 60_000, signal: controller.signal });
    try {
      await eventually(async () => (await p.b.waiting()) === 1, 15_000, 'the wait to start');
      controller.abort(reason);
      await expect(waiting).rejects.toBe(reason);
    } finally {
      controller.abort(reason);
      await waiting.catch(() => {});
      await holder.release();
    }
    // Neither the cancelled waiter nor the holder left the lock held.
    expect(await p.c.tryWithLock('conformance:cancel', async () => 'free')).toEqual({ acquired: true, value: 'free' });
    expect(await p.b.tryWithLock('conformance:cancel', async () => 'free')).toEqual({ acquired: true, value: 'free' });
  });

  it('refuses re-entry by the holder', async () => {
    expect(await p.a.reenter('conformance:reenter')).toBeInstanceOf(NestedLockError);
    // And the refused attempt left the lock free.
    expect((await p.b.tryWithLock('conformance:reenter', async () => 1)).acquired).toBe(true);
  });
});


/** Pauses between the holder's release and the waiter's close / cancel / timeout, cycled over the iterations. */
const RACE_DELAYS_MS = [0, 0, 1, 2, 3, 5, 10];

describe.each(lockKinds)('conformance, late grants: $name', (kind) => {
  const third = oneParticipant(kind, 'late');

  /** Nothing of `name` is left held: a third participant takes it at once (or, after a late give-back, soon). */
  async function expectFree(name: string, soonMs = 0): Promise<void> {
    if (soonMs === 0) {
      expect(await third.p.tryWithLock(name, async () => 'free')).toEqual({ acquired: true, value: 'free' });
      return;
    }
    // Far shorter than a leaked lease's TTL (15 s) or a leaked session lock's life (forever).
    await eventually(async () => (await third.p.tryWithLock(name, async () => 'free')).acquired, soonMs, `${name} to be free`);
  }

  it('a grant that lands during close is released, never leaked', async () => {
    for (let i = 0; i < 30; i++) {
      const name = `conformance:late:close:${i}`;
      const [a, b] = await Promise.all([kind.open(third.url), kind.open(third.url)]);
      try {
        const holder = await hold(a, name);
        try {
          const waiting = b.withLock(name, async () => 'ran', { timeoutMs: 60_000 }).catch((err: unknown) => err);
          await eventually(async () => (await b.waiting()) === 1, 15_000, 'the wait to start');
          await holder.release();
          await sleep(RACE_DELAYS_MS[i % RACE_DELAYS_MS.length]!);
          await b.close();
          await waiting;
        } finally {
          await holder.release();
        }
        await expectFree(name);
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    }
  });

  it('a grant that lands as the wait times out is released, never leaked', async () => {
    const [a, b] = await Promise.all([kind.open(third.url), kind.open(third.url)]);
    try {
      for (let i = 0; i < 14; i++) {
        const name = `conformance:late:timeout:${i}`;
        const holder = await hold(a, name);
        try {
          const timeoutMs = 300;
          const started = performance.now();
          const waiting = b.withLock(name, async () => 'ran', { timeoutMs }).catch((err: unknown) => err);
          await eventually(async () => (await b.waiting()) === 1, 15_000, 'the wait to start');
          // Release within a few ms of the timeout, on either side of it.
          await sleep(Math.max(0, started + timeoutMs - performance.now() - 5 + RACE_DELAYS_MS[i % RACE_DELAYS_MS.length]!));
          await holder.release();
          const outcome = await waiting;
          expect(outcome === 'ran' || outcome instanceof LockTimeoutError, String(outcome)).toBe(true);
        } finally {
          await holder.release();
        }
        await expectFree(name, 5000);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a grant that lands as the wait is cancelled is released, never leaked', async () => {
    const [a, b] = await Promise.all([kind.open(third.url), kind.open(third.url)]);
    try {
      for (let i = 0; i < 14; i++) {
        const name = `conformance:late:cancel:${i}`;
        const holder = await hold(a, name);
        const controller = new AbortController();
        const reason = new Error('cancelled');
        try {
          const waiting = b.withLock(name, async () => 'ran', { timeoutMs: 60_000, signal: controller.signal }).catch((err: unknown) => err);
          await eventually(async () => (await b.waiting()) === 1, 15_000, 'the wait to start');
          await holder.release();
          await sleep(RACE_DELAYS_MS[i % RACE_DELAYS_MS.length]!);
          controller.abort(reason);
          const outcome = await waiting;
          expect(outcome === 'ran' || outcome === reason, String(outcome)).toBe(true);
        } finally {
          controller.abort(reason);
          await holder.release();
        }
        await expectFree(name, 5000);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

/**
 * The same late grants, made certain: the server grants b's request while b cannot hear of it yet (see
 * LateGrantLab), b gives up, then the grant lands. Whatever it granted must be given back before the
 * caller hears of it, and before close() resolves: the server is looked at in those very moments, with
 * b still open (a cancel) or with its server sessions kept open behind it (a close), so that ending its
 * connections cannot hide a leak.
 */
describe.each(lockKinds.filter((k) => k.lateGrant))('conformance, a grant that lands after its caller gave up: $name', (kind) => {
  const holding = oneParticipant(kind, 'held_up');

  it('cancelled: the grant is given back before the caller hears of the cancel', async () => {
    const name = 'conformance:held-up:cancel';
    const lab = await kind.lateGrant!(holding.url);
    const holder = await hold(holding.p, name);
    const controller = new AbortController();
    const reason = new Error('cancelled');
    try {
      const waiting = lab.b.withLock(name, async () => 'ran', { timeoutMs: 60_000, signal: controller.signal });
      const answered = waiting.then(
        (value) => ({ value, heldThen: lab.held(name) }),
        (err: unknown) => ({ value: err, heldThen: lab.held(name) }),
      );
      await eventually(async () => (await lab.b.waiting()) === 1, 15_000, 'the wait to start');
      await lab.holdUpGrant(name, () => holder.release());
      controller.abort(reason);
      await lab.deliver();
      const { value, heldThen } = await answered;
      expect(value).toBe(reason);
      expect(await heldThen).toBe(false);
    } finally {
      controller.abort(reason);
      await lab.deliver();
      await holder.release();
      await lab.close();
    }
  });

  it('closed: the grant is given back before the caller hears of the close, and before close() resolves', async () => {
    const name = 'conformance:held-up:close';
    const lab = await kind.lateGrant!(holding.url);
    const holder = await hold(holding.p, name);
    try {
      const waiting = lab.b.withLock(name, async () => 'ran', { timeoutMs: 60_000 });
      const answered = waiting.then(
        (value) => ({ value, heldThen: lab.held(name) }),
        (err: unknown) => ({ value: err, heldThen: lab.held(name) }),
      );
      await eventually(async () => (await lab.b.waiting()) === 1, 15_000, 'the wait to start');
      await lab.holdUpGrant(name, () => holder.release());
      lab.keepSessionsAfterClose();
      const closed = lab.b.close();
      await lab.deliver();
      await closed;
      expect(await lab.held(name)).toBe(false);
      const { value, heldThen } = await answered;
      expect(value).toBeInstanceOf(LockerClosedError);
      expect(await heldThen).toBe(false);
    } finally {
      await lab.deliver();
      await holder.release();
      await lab.close();
    }
  });
});

describe.each(lockKinds.filter((k) => k.shared))('conformance, shared mode: $name', (kind) => {
  const p = participants(kind, 'rw');

  it('shared holders coexist; an exclusive request waits for all of them', async () => {
    // Both readers hold at once (hold() resolves once each is inside; the second would wait behind an exclusive hold).
    const readers = [await hold(p.a, 'conformance:rw', { mode: 'shared' })];
    const order: string[] = [];
    let writer: Promise<unknown> | undefined;
    try {
      readers.push(await hold(p.b, 'conformance:rw', { mode: 'shared', timeoutMs: 5000 }));
      expect((await p.c.tryWithLock('conformance:rw', async () => 1)).acquired).toBe(false);
      writer = p.c.withLock('conformance:rw', async () => order.push('writer'), { timeoutMs: 30_000 });
      await eventually(async () => (await p.c.waiting()) === 1, 15_000, 'the writer to wait');
      order.push('readers done');
    } finally {
      writer?.catch(() => {}); // awaited below, unless the test already failed
      await Promise.all(readers.map((r) => r.release()));
    }
    await writer;
    expect(order).toEqual(['readers done', 'writer']);
  });

  it('an exclusive holder keeps shared requests out', async () => {
    const holder = await hold(p.a, 'conformance:ex');
    try {
      expect((await p.b.tryWithLock('conformance:ex', async () => 1, { mode: 'shared' })).acquired).toBe(false);
    } finally {
      await holder.release();
    }
    expect((await p.b.tryWithLock('conformance:ex', async () => 1, { mode: 'shared' })).acquired).toBe(true);
  });
});

describe.each(lockKinds.filter((k) => k.holdAndLose))('conformance, loss signalling: $name', (kind) => {
  let url: string;
  beforeAll(async () => {
    url = (await useMigratedDatabase(`conf_lossdb_${kind.name}`)).url;
  });

  it('aborts the holder’s signal with a LockLostError, and others can then take the lock', async () => {
    const held = await kind.holdAndLose!(url, 'conformance:loss');
    try {
      expect(held.signal.aborted).toBe(false);
      await held.lose();
      await eventually(() => held.signal.aborted, 15_000, 'the loss to be signalled');
      expect(held.signal.reason).toBeInstanceOf(LockLostError);
      const other = await kind.open(url);
      try {
        expect(await other.withLock('conformance:loss', async () => 'taken', { timeoutMs: 15_000 })).toBe('taken');
      } finally {
        await other.close();
      }
    } finally {
      await held.close();
    }
  });
});
