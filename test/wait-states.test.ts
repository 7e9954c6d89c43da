// The wait line's and the waiter's explicit states (issue 30, "Explicit states"): every move their tables
// refuse is refused by the real transition functions (the machines' and the objects' own `move`), every
// move they list is made; and a real locker's waiters pass the states the tables promise.
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocker, type Locker, LockTimeoutError, lockKey } from '../src/index.js';
import { Cancel, IllegalTransitionError, type StateMachine } from '../src/core/index.js';
import type { ReleaseListener, SessionPool } from '../src/session/index.js';
import { attempting, blocking, IDLE, type LineState, OPERATING, polling, WAIT_LINE_STATES } from '../src/wait/line-states.js';
import type { WaitStrategy } from '../src/wait/strategy.js';
import { WaitLine } from '../src/wait/wait-line.js';
import { EXPIRED, leaving, QUEUED, SETTLED, Waiter, WAITER_STATES, type WaiterState, WAITING } from '../src/wait/waiter.js';
import { eventually, sleep, track, useMigratedDatabase } from './support/db.js';

type LineKind = LineState<unknown>['kind'];
type WaiterKind = WaiterState['kind'];

const someWaiter = () => new Waiter<{ timeoutMs: number; signal: undefined }, never>({ timeoutMs: 0, signal: undefined }, 0, () => {}, () => {}, () => {});
const aTimer = (): NodeJS.Timeout => {
  const timer = setTimeout(() => {}, 60_000);
  clearTimeout(timer);
  return timer;
};

/** A value of each state, made the way the code makes it. */
const lineState: Record<LineKind, () => LineState<unknown>> = {
  idle: () => IDLE,
  operating: () => OPERATING,
  attempting: () => attempting(someWaiter(), false, null, null),
  blocking: () => blocking(someWaiter(), new Cancel()),
  polling: () => polling(aTimer()),
};
const waiterState: Record<WaiterKind, () => WaiterState> = {
  queued: () => QUEUED,
  waiting: () => WAITING,
  expired: () => EXPIRED,
  leaving: () => leaving(() => {}),
  settled: () => SETTLED,
};

/** Every pair the table lists. */
const legalMoves = <K extends string>(machine: StateMachine<K>): [K, K][] => machine.states.flatMap((from) => machine.table[from].map((to): [K, K] => [from, to]));

/** A shortest path of legal moves from `initial` to `target` (the states a test puts an object in first). */
function pathTo<K extends string>(machine: StateMachine<K>, initial: K, target: K): K[] {
  const before = new Map<K, K | null>([[initial, null]]);
  const todo = [initial];
  while (todo.length > 0) {
    const at = todo.shift()!;
    for (const next of machine.table[at]) {
      if (before.has(next)) continue;
      before.set(next, at);
      todo.push(next);
    }
  }
  if (!before.has(target)) throw new Error(`${target} cannot be reached from ${initial}`);
  const path: K[] = [];
  for (let at: K | null = target; at !== initial && at !== null; at = before.get(at)!) path.unshift(at);
  return path;
}

/** A real line (its collaborators are not used by `move`), its private state and transition function opened for the test. */
interface OpenLine {
  state: LineState<unknown>;
  move(next: LineState<unknown>): void;
}
const strategy = { idle: () => {} } as unknown as WaitStrategy<{ timeoutMs: number; signal: undefined }, never>;
const aLine = () => new WaitLine(1n, {} as SessionPool, {} as ReleaseListener, strategy) as unknown as OpenLine;

describe('the state tables', () => {
  it('name exactly the states of the tagged unions, and each can be reached from the initial state', () => {
    expect(WAIT_LINE_STATES.states).toEqual(Object.keys(lineState));
    expect(WAITER_STATES.states).toEqual(Object.keys(waiterState));
    for (const kind of WAIT_LINE_STATES.states) expect(() => pathTo(WAIT_LINE_STATES, 'idle', kind)).not.toThrow();
    for (const kind of WAITER_STATES.states) expect(() => pathTo(WAITER_STATES, 'queued', kind)).not.toThrow();
    expect(WAITER_STATES.table.settled).toEqual([]); // settled is final
  });

  describe('WaitLine', () => {
    it.each(WAIT_LINE_STATES.illegalMoves())('refuses %s -> %s, in the machine and in the line', (from, to) => {
      const err = (() => {
        try {
          WAIT_LINE_STATES.transition(lineState[from](), lineState[to]());
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(IllegalTransitionError);
      expect(err).toMatchObject({ machine: 'WaitLine', from, to });
      const line = aLine();
      for (const step of pathTo(WAIT_LINE_STATES, 'idle', from)) line.move(lineState[step]());
      expect(line.state.kind).toBe(from);
      expect(() => line.move(lineState[to]())).toThrow(IllegalTransitionError);
      expect(line.state.kind).toBe(from); // refused: unchanged
    });

    it.each(legalMoves(WAIT_LINE_STATES))('makes %s -> %s, in the machine and in the line', (from, to) => {
      const next = lineState[to]();
      expect(WAIT_LINE_STATES.transition(lineState[from](), next)).toBe(next);
      const line = aLine();
      for (const step of pathTo(WAIT_LINE_STATES, 'idle', from)) line.move(lineState[step]());
      line.move(next);
      expect(line.state).toBe(next);
    });

    it('clears the poll timer whenever it leaves polling', () => {
      let fired = false;
      const line = aLine();
      line.move(polling(setTimeout(() => (fired = true), 5)));
      line.move(IDLE);
      return sleep(30).then(() => expect(fired).toBe(false));
    });
  });

  describe('Waiter', () => {
    it.each(WAITER_STATES.illegalMoves())('refuses %s -> %s, in the machine and in the waiter', (from, to) => {
      expect(() => WAITER_STATES.transition(waiterState[from](), waiterState[to]())).toThrow(IllegalTransitionError);
      const waiter = someWaiter();
      for (const step of pathTo(WAITER_STATES, 'queued', from)) waiter.move(waiterState[step]());
      expect(waiter.state.kind).toBe(from);
      expect(() => waiter.move(waiterState[to]())).toThrow(new IllegalTransitionError('Waiter', from, to));
      expect(waiter.state.kind).toBe(from);
    });

    it.each(legalMoves(WAITER_STATES))('makes %s -> %s, in the machine and in the waiter', (from, to) => {
      const next = waiterState[to]();
      expect(WAITER_STATES.transition(waiterState[from](), next)).toBe(next);
      const waiter = someWaiter();
      for (const step of pathTo(WAITER_STATES, 'queued', from)) waiter.move(waiterState[step]());
      waiter.move(next);
      expect(waiter.state).toBe(next);
    });

    it('carries its leaving answer only while leaving', () => {
      const waiter = someWaiter();
      const answer = () => {};
      waiter.move(leaving(answer));
      expect(waiter.state).toEqual({ kind: 'leaving', answer });
      expect(waiter.settle()).toBe(true);
      expect(waiter.state).toEqual({ kind: 'settled' });
      expect(waiter.settle()).toBe(false); // settled once
    });
  });
});

// ---- a real locker's waiters ----

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
const open = (): Locker => track(createLocker({ connectionString: db.url }));

beforeAll(async () => {
  db = await useMigratedDatabase('wait_states');
  pool = new pg.Pool({ connectionString: db.url, max: 3 });
});
afterAll(async () => {
  await pool.end();
});

type Named = { target?: { name: string | null } };
interface Moves {
  /** Each waiter of `name`, in the order they were made: its states from queued on. */
  waiters(name: string): WaiterKind[][];
  /** Each line of `name`'s key (one per locker), in the order they first moved: the states it moved to. */
  lines(name: string): LineKind[][];
  /** Every state object a waiter of `name` was moved to. */
  waiterValues(name: string): WaiterState[];
}

/** Records every move of every waiter and line, by the waiter and line that made it. */
function recordMoves(): Moves {
  const waiterMove = vi.spyOn(Waiter.prototype, 'move');
  const lineMove = vi.spyOn(WaitLine.prototype as unknown as OpenLine, 'move');
  const movesOf = (name: string) =>
    waiterMove.mock.contexts
      .map((waiter, i) => ({ waiter: waiter as Waiter<Named, unknown>, next: waiterMove.mock.calls[i]![0] }))
      .filter(({ waiter }) => waiter.request.target?.name === name);
  return {
    waiters: (name) => {
      const byWaiter = new Map<Waiter<Named, unknown>, WaiterKind[]>();
      for (const { waiter, next } of movesOf(name)) {
        if (!byWaiter.has(waiter)) byWaiter.set(waiter, ['queued']);
        byWaiter.get(waiter)!.push(next.kind);
      }
      return [...byWaiter.values()];
    },
    waiterValues: (name) => movesOf(name).map(({ next }) => next),
    lines: (name) => {
      const byLine = new Map<unknown, LineKind[]>();
      lineMove.mock.contexts.forEach((line, i) => {
        if ((line as unknown as { key: bigint }).key !== lockKey(name)) return;
        if (!byLine.has(line)) byLine.set(line, []);
        byLine.get(line)!.push(lineMove.mock.calls[i]![0].kind);
      });
      return [...byLine.values()];
    },
  };
}

/** The waiters of a name that are in a state now. */
const waitersIn = (moves: Moves, name: string, kind: WaiterKind) => moves.waiters(name).filter((states) => states.at(-1) === kind).length;

describe('a real locker', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('an uncontended acquire goes queued -> settled, with the preallocated states only; its line attempts once, its release unlocks', async () => {
    const locker = open();
    await (await locker.acquire('ws:free')).release(); // connected
    const moves = recordMoves();
    const h = await locker.acquire('ws:free');
    await h.release();
    expect(moves.waiters('ws:free')).toEqual([['queued', 'settled']]);
    expect(moves.waiterValues('ws:free').every((s) => s === SETTLED)).toBe(true);
    expect(moves.lines('ws:free')).toEqual([['attempting', 'idle', 'operating', 'idle']]);
  });

  it('a waiter for a key held elsewhere goes queued -> waiting (blocked in the database queue) -> settled with the grant', async () => {
    const holder = open();
    const other = open();
    const held = await holder.acquire('ws:handoff');
    await (await other.acquire('ws:warm')).release();
    const moves = recordMoves();
    const waiting = other.acquire('ws:handoff', { timeoutMs: 20_000 });
    await eventually(() => waitersIn(moves, 'ws:handoff', 'waiting') === 1, 10_000, 'the waiter to wait');
    await eventually(() => moves.lines('ws:handoff')[0]?.includes('blocking') === true, 10_000, 'the blocking wait');
    await held.release();
    await (await waiting).release();
    expect(moves.waiters('ws:handoff')).toEqual([['queued', 'waiting', 'settled']]);
    expect(moves.lines('ws:handoff')).toEqual([
      // The waiter's: a try, the wait in PostgreSQL's queue that the holder's release ends with the grant, its own release.
      ['attempting', 'idle', 'blocking', 'idle', 'operating', 'idle'],
      // The holder's (another locker): the unlock.
      ['operating', 'idle'],
    ]);
  });

  it('a single try of a busy key goes queued -> settled (null)', async () => {
    const holder = open();
    const other = open();
    const held = await holder.acquire('ws:single');
    const moves = recordMoves();
    expect(await other.tryAcquire('ws:single')).toBeNull();
    expect(moves.waiters('ws:single')).toEqual([['queued', 'settled']]);
    await held.release();
  });

  it('a waiter behind a local holder stays queued, then is granted when the holder lets go', async () => {
    const locker = open();
    const held = await locker.acquire('ws:local');
    const moves = recordMoves();
    const next = locker.acquire('ws:local', { timeoutMs: 10_000 });
    await sleep(100);
    expect(moves.waiters('ws:local')).toEqual([]); // no move yet: queued behind the holder
    expect(moves.lines('ws:local')).toEqual([]); // nothing in flight for it
    await held.release();
    await (await next).release();
    expect(moves.waiters('ws:local')).toEqual([['queued', 'settled']]);
  });

  it('an abort while the blocking wait is in flight goes waiting -> leaving -> settled, answered once the wait is back', async () => {
    const holder = open();
    const other = open();
    const held = await holder.acquire('ws:abort');
    await (await other.acquire('ws:warm2')).release();
    const moves = recordMoves();
    const controller = new AbortController();
    const waiting = other.acquire('ws:abort', { timeoutMs: 20_000, signal: controller.signal });
    await eventually(() => moves.lines('ws:abort')[0]?.includes('blocking') === true, 10_000, 'the blocking wait');
    const reason = new Error('enough');
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    expect(moves.waiters('ws:abort')).toEqual([['queued', 'waiting', 'leaving', 'settled']]);
    expect(moves.lines('ws:abort')).toEqual([['attempting', 'idle', 'blocking', 'idle']]);
    await held.release();
    // Nothing of the cancelled wait is held: another locker takes the key at once.
    await (await open().acquire('ws:abort', { timeoutMs: 5000 })).release();
  });

  it('a timeout while the attempt is in flight goes queued -> leaving -> settled, and the late grant is given back', async () => {
    const locker = open();
    await (await locker.lease('ws:warm-lease')).release(); // connected, statements prepared
    const blocker = await pool.connect();
    try {
      await blocker.query('BEGIN');
      // Every lease statement now waits for this transaction: the attempt stays in flight past the timeout.
      await blocker.query('LOCK TABLE pgfence.leases IN ACCESS EXCLUSIVE MODE');
      const moves = recordMoves();
      const started = performance.now();
      await expect(locker.lease('ws:late', { timeoutMs: 200 })).rejects.toBeInstanceOf(LockTimeoutError);
      expect(performance.now() - started).toBeGreaterThanOrEqual(190);
      expect(moves.waiters('ws:late')).toEqual([['queued', 'leaving', 'settled']]);
      expect(moves.lines('ws:late')).toEqual([['attempting']]); // still in flight
      await blocker.query('COMMIT');
      // The attempt comes back with a grant that nobody wants: the line gives it back.
      await eventually(() => moves.lines('ws:late')[0]?.join() === 'attempting,idle,operating,idle', 10_000, 'the give-back');
    } finally {
      await blocker.query('ROLLBACK').catch(() => {}); // committed already, or the test failed before
      blocker.release();
    }
    const other = open();
    const taken = await other.tryLease('ws:late');
    expect(taken).not.toBeNull();
    await taken!.release();
  });
});
