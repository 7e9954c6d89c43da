import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockLostError, LockTimeoutError, NestedLockError } from '../src/index.js';
import { eventually, sleep, useMigratedDatabase } from './support/db.js';
import { lockKinds, type LockKindUnderTest, type Participant } from './support/kinds.js';

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
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    const holder = p.a.withLock('conformance:try', async () => {
      entered();
      await held;
    });
    await inside;
    expect((await p.b.tryWithLock('conformance:try', async () => 1)).acquired).toBe(false);
    release();
    await holder;
    expect(await p.b.tryWithLock('conformance:try', async () => 7)).toEqual({ acquired: true, value: 7 });
  });

  it('times out with LockTimeoutError, and the lock is still usable afterwards', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    const holder = p.a.withLock('conformance:timeout', async () => {
      entered();
      await held;
    });
    await inside;
    const started = performance.now();
    const err = await p.b.withLock('conformance:timeout', async () => 'ran', { timeoutMs: 300 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockTimeoutError);
    expect(performance.now() - started).toBeGreaterThanOrEqual(250); // it did wait
    release();
    await holder;
    expect(await p.b.withLock('conformance:timeout', async () => 'ran', { timeoutMs: 10_000 })).toBe('ran');
  });

  it('a signal cancels the wait with its reason, and leaves nothing behind', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    const holder = p.a.withLock('conformance:cancel', async () => {
      entered();
      await held;
    });
    await inside;
    const controller = new AbortController();
    const reason = new Error('caller gave up');
    const waiting = p.b.withLock('conformance:cancel', async () => 'ran', { timeoutMs: 60_000, signal: controller.signal });
    await eventually(async () => (await p.b.waiting()) === 1, 15_000, 'the wait to start');
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    release();
    await holder;
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

/** `a` takes `name` and keeps it until `release()`; resolves once it holds it. */
async function hold(a: Participant, name: string): Promise<{ release(): void; done: Promise<unknown> }> {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let entered!: () => void;
  const inside = new Promise<void>((r) => (entered = r));
  const done = a.withLock(name, async () => {
    entered();
    await held;
  });
  await inside;
  return { release, done };
}

/** Pauses between the holder's release and the waiter's close / cancel / timeout, cycled over the iterations. */
const RACE_DELAYS_MS = [0, 0, 1, 2, 3, 5, 10];

describe.each(lockKinds)('conformance, late grants: $name', (kind) => {
  let url: string;
  let c: Participant;
  beforeAll(async () => {
    url = (await useMigratedDatabase(`conf_late_${kind.name}`)).url;
    c = await kind.open(url);
  });
  afterAll(async () => {
    await c?.close();
  });

  /** Nothing of `name` is left held: a third participant takes it at once (or, after a late give-back, soon). */
  async function expectFree(name: string, soonMs = 0): Promise<void> {
    if (soonMs === 0) {
      expect(await c.tryWithLock(name, async () => 'free')).toEqual({ acquired: true, value: 'free' });
      return;
    }
    // Far shorter than a leaked lease's TTL (15 s) or a leaked session lock's life (forever).
    await eventually(async () => (await c.tryWithLock(name, async () => 'free')).acquired, soonMs, `${name} to be free`);
  }

  it('a grant that lands during close is released, never leaked', async () => {
    for (let i = 0; i < 30; i++) {
      const name = `conformance:late:close:${i}`;
      const [a, b] = await Promise.all([kind.open(url), kind.open(url)]);
      try {
        const holder = await hold(a, name);
        const waiting = b.withLock(name, async () => 'ran', { timeoutMs: 60_000 }).catch((err: unknown) => err);
        await eventually(async () => (await b.waiting()) === 1, 15_000, 'the wait to start');
        holder.release();
        await holder.done;
        await sleep(RACE_DELAYS_MS[i % RACE_DELAYS_MS.length]!);
        await b.close();
        await waiting;
        await expectFree(name);
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    }
  });

  it('a grant that lands as the wait times out is released, never leaked', async () => {
    const [a, b] = await Promise.all([kind.open(url), kind.open(url)]);
    try {
      for (let i = 0; i < 14; i++) {
        const name = `conformance:late:timeout:${i}`;
        const holder = await hold(a, name);
        const timeoutMs = 300;
        const started = performance.now();
        const waiting = b.withLock(name, async () => 'ran', { timeoutMs }).catch((err: unknown) => err);
        await eventually(async () => (await b.waiting()) === 1, 15_000, 'the wait to start');
        // Release within a few ms of the timeout, on either side of it.
        await sleep(Math.max(0, started + timeoutMs - performance.now() - 5 + RACE_DELAYS_MS[i % RACE_DELAYS_MS.length]!));
        holder.release();
        await holder.done;
        const outcome = await waiting;
        expect(outcome === 'ran' || outcome instanceof LockTimeoutError, String(outcome)).toBe(true);
        await expectFree(name, 5000);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a grant that lands as the wait is cancelled is released, never leaked', async () => {
    const [a, b] = await Promise.all([kind.open(url), kind.open(url)]);
    try {
      for (let i = 0; i < 14; i++) {
        const name = `conformance:late:cancel:${i}`;
        const holder = await hold(a, name);
        const controller = new AbortController();
        const reason = new Error('cancelled');
        const waiting = b.withLock(name, async () => 'ran', { timeoutMs: 60_000, signal: controller.signal }).catch((err: unknown) => err);
        await eventually(async () => (await b.waiting()) === 1, 15_000, 'the wait to start');
        holder.release();
        await holder.done;
        await sleep(RACE_DELAYS_MS[i % RACE_DELAYS_MS.length]!);
        controller.abort(reason);
        const outcome = await waiting;
        expect(outcome === 'ran' || outcome === reason, String(outcome)).toBe(true);
        await expectFree(name, 5000);
      }
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe.each(lockKinds.filter((k) => k.shared))('conformance, shared mode: $name', (kind) => {
  const p = participants(kind, 'rw');

  it('shared holders coexist; an exclusive request waits for all of them', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered = 0;
    let bothIn!: () => void;
    const both = new Promise<void>((r) => (bothIn = r));
    const reader = (p: Participant) =>
      p.withLock(
        'conformance:rw',
        async () => {
          if (++entered === 2) bothIn();
          await held;
        },
        { mode: 'shared' },
      );
    const readers = [reader(p.a), reader(p.b)];
    await both; // two shared holders at once
    expect((await p.c.tryWithLock('conformance:rw', async () => 1)).acquired).toBe(false);
    const order: string[] = [];
    const writer = p.c.withLock('conformance:rw', async () => order.push('writer'), { timeoutMs: 30_000 });
    await eventually(async () => (await p.c.waiting()) === 1, 15_000, 'the writer to wait');
    order.push('readers done');
    release();
    await Promise.all(readers);
    await writer;
    expect(order).toEqual(['readers done', 'writer']);
  });

  it('an exclusive holder keeps shared requests out', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    const holder = p.a.withLock('conformance:ex', async () => {
      entered();
      await held;
    });
    await inside;
    expect((await p.b.tryWithLock('conformance:ex', async () => 1, { mode: 'shared' })).acquired).toBe(false);
    release();
    await holder;
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
