import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { IllegalTransitionError, LockLostError, LockUnavailableError } from '../src/core/index.js';
import { createLocker, migrate } from '../src/index.js';
import type { Locker } from '../src/locker.js';
import { silentLogger } from '../src/observe/index.js';
import { ConnectionSource, type OpStatements, type PinnedConnection, Session, SessionLostError, type SessionPool } from '../src/session/index.js';
import { CONNECTING, SESSION_STATES, type SessionState, type SessionStateKind } from '../src/session/session-state.js';
import { appName, eventually, freePortUrl, killBackends, sleep, useTestDatabase } from './support/db.js';

/**
 * A Session keeps one tagged state and changes it only through SESSION_STATES (src/session/session-state.ts):
 * every move the table leaves out is refused, and a real session passes through the states the table names.
 */

let db: Awaited<ReturnType<typeof useTestDatabase>>;

beforeAll(async () => {
  db = await useTestDatabase('session_states');
});

afterEach(() => {
  vi.restoreAllMocks();
});

/** One state of each kind (the transition function reads only `kind`; the data is there for realism). */
function sampleStates(): Record<SessionStateKind, SessionState> {
  const conn = { client: {}, destroy() {} } as unknown as PinnedConnection;
  const idle = { kind: 'idle', conn, guarded: false, lookedAt: 0 } as const;
  return {
    connecting: CONNECTING,
    settingUp: { kind: 'settingUp', conn, batch: [], sentAt: 0, deadlineMs: 1000 },
    idle,
    flushing: { kind: 'flushing', idle, batch: [], sentAt: 0, deadlineMs: 1000 },
    reconciling: { kind: 'reconciling', idle, batch: [], sentAt: 0, deadlineMs: 1000 },
    dead: { kind: 'dead', cause: new Error('gone'), diedIn: 'idle' },
  };
}

/** A Session in state `from`, moved with its own transition function (private: reached for the test). */
function moveSession(from: SessionState, to: SessionState): SessionState {
  const session = Object.create(Session.prototype) as { current: SessionState; move(next: SessionState): void };
  session.current = from;
  session.move(to);
  return session.current;
}

describe('SESSION_STATES', () => {
  it('names every kind of SessionState, and lists 11 moves of the 36 pairs', () => {
    expect(SESSION_STATES.states).toEqual(Object.keys(sampleStates()));
    expect(SESSION_STATES.illegalMoves()).toHaveLength(36 - 11);
  });

  it("refuses every move it does not list, through the session's own transition function", () => {
    const states = sampleStates();
    const illegal = SESSION_STATES.illegalMoves();
    for (const [from, to] of illegal) {
      let thrown: unknown = null;
      try {
        moveSession(states[from], states[to]);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, `${from} -> ${to}`).toBeInstanceOf(IllegalTransitionError);
      expect(thrown).toMatchObject({ machine: 'Session', from, to });
    }
    // Dead is final; nothing goes back to connecting; nothing is sent before the setup statement succeeded.
    expect(illegal).toContainEqual(['dead', 'idle']);
    expect(illegal).toContainEqual(['idle', 'connecting']);
    expect(illegal).toContainEqual(['settingUp', 'flushing']);
    expect(illegal).toContainEqual(['connecting', 'idle']);
  });

  it('allows every move it lists', () => {
    const states = sampleStates();
    let legal = 0;
    for (const from of SESSION_STATES.states) {
      for (const to of SESSION_STATES.table[from]) {
        expect(moveSession(states[from], states[to]), `${from} -> ${to}`).toBe(states[to]);
        legal++;
      }
    }
    expect(legal).toBe(11);
  });
});

/** Every move any session made since the call, as "from -> to", and the states moved to. */
function recordMoves(): { moves(): string[]; reached(): SessionState[] } {
  const spy = vi.spyOn(SESSION_STATES, 'transition');
  return {
    moves: () => spy.mock.calls.map(([from, to]) => `${from.kind} -> ${to.kind}`),
    reached: () => spy.mock.calls.map(([, to]) => to as SessionState),
  };
}

const homeOf = (locker: Locker): Session => (locker as unknown as { sessions: SessionPool }).sessions.home();

describe('a session through a locker', () => {
  it('connecting -> settingUp -> idle <-> flushing, and dead when its backend is terminated', async () => {
    const { moves, reached } = recordMoves();
    const app = appName('states');
    const locker = createLocker({ connectionString: db.urlWith({ application_name: app }), maxSessions: 1, keepaliveMs: 60_000 });
    try {
      const lost: unknown[] = [];
      locker.on('lost', (info) => lost.push(info));
      const handle = await locker.acquire('states:1');
      const session = homeOf(locker);
      // Connected, set up (no schema here: unguarded), the try sent as the first statement after the setup, answered.
      expect(moves().slice(0, 4)).toEqual(['connecting -> settingUp', 'settingUp -> idle', 'idle -> flushing', 'flushing -> idle']);
      await sleep(100); // the name registry's write, a few ms after the grant
      expect(session.state).toMatchObject({ kind: 'idle', guarded: false });
      expect(session.processId).toBeGreaterThan(0);

      // The release is one statement out: the flushing state carries its batch; answered, the session is idle again.
      const before = reached().length;
      expect(await handle.release()).toBe(true);
      const during = reached().slice(before);
      expect(during.map((s) => s.kind)).toEqual(['flushing', 'idle']);
      expect(during[0]).toMatchObject({ kind: 'flushing', batch: [expect.objectContaining({ key: handle.key })] });
      expect(during[1]).toBe(session.state);

      const again = await locker.acquire('states:2');
      expect(await killBackends(db.url, app, 5000)).toBeGreaterThanOrEqual(1);
      await eventually(() => session.state.kind === 'dead', 10_000, 'the session to die');
      const dead = session.state;
      expect(dead).toMatchObject({ kind: 'dead', diedIn: 'idle' });
      if (dead.kind === 'dead') expect(dead.cause.message).toMatch(/terminat/);
      expect(session.processId).toBeNull();
      expect(session.deathCause).toBe(dead.kind === 'dead' ? dead.cause : undefined);
      expect(moves().at(-1)).toBe('idle -> dead');
      expect(again.signal.aborted).toBe(true);
      expect(again.signal.reason).toBeInstanceOf(LockLostError);
      await eventually(() => lost.length === 1, 5000, "the 'lost' event");
      // Every move it made is one the table lists (an unlisted one would have thrown).
      for (const move of moves()) {
        const [from, to] = move.split(' -> ') as [SessionStateKind, SessionStateKind];
        expect(SESSION_STATES.allows(from, to), move).toBe(true);
      }
      // The next acquire goes to a new session, which starts from connecting again.
      const third = await locker.acquire('states:3');
      expect(homeOf(locker)).not.toBe(session);
      expect(moves().filter((m) => m === 'connecting -> settingUp')).toHaveLength(2);
      await third.release();
    } finally {
      await locker.close();
    }
  });

  it('an unguarded idle session that finds the schema at its next look comes back idle and guarded', async () => {
    const migrated = await useTestDatabase('session_states_look');
    const locker = createLocker({ connectionString: migrated.url, maxSessions: 1, keepaliveMs: 300 });
    try {
      const handle = await locker.acquire('states:look');
      const session = homeOf(locker);
      await eventually(() => session.state.kind === 'idle', 5000, 'the session to be idle');
      expect(session.state).toMatchObject({ kind: 'idle', guarded: false });
      await migrate({ connectionString: migrated.url });
      await eventually(() => session.state.kind === 'idle' && session.state.guarded, 10_000, 'the session to find the schema');
      expect(await handle.release()).toBe(true);
    } finally {
      await locker.close();
    }
  });
});

/** Statements for a bare Session: op 1 fails on the server (division by zero), op 2 answers 1. */
function failingStatements(held: string): OpStatements {
  const flavour = {
    single: { 1: { name: 'states_fail', text: 'SELECT 1 / (0 * $1::int8) AS r' }, 2: { name: 'states_ok', text: 'SELECT 1 + 0 * $1::int8 AS r' } },
    batch: { name: 'states_batch', text: 'SELECT i, 1 / (c - 1) AS r FROM unnest($1::int[], $2::int8[]) WITH ORDINALITY AS t(c, k, i)' },
    fencedSingle: {},
    fencedBatch: { name: 'states_fbatch', text: 'SELECT i, 1 AS r, NULL AS token FROM unnest($1::int[], $2::int8[]) WITH ORDINALITY AS t(c, k, i)' },
  };
  return {
    setup: { name: 'states_setup', text: 'SELECT false AS guarded' },
    plain: flavour,
    guarded: flavour,
    held,
    undoFor: () => ({ codes: [], keys: [] }),
    undo: 'SELECT 1',
  };
}

/** A bare Session on its own ConnectionSource; `lost` collects what it reports. */
function bareSession(url: string, statements: OpStatements) {
  const source = new ConnectionSource({ connectionString: url, poolSize: 2, connectTimeoutMs: 5000 }, silentLogger);
  const lost: Error[] = [];
  const session = new Session({
    id: 1,
    source,
    keepaliveMs: 60_000,
    deadlineMs: 5000,
    logger: silentLogger,
    statements,
    onLost: (_s, err) => lost.push(err),
    onNotification: () => {},
  });
  return { session, lost, end: () => (session.close(), source.end()) };
}

/** Submits op `code`; every answer it gets, in order (exactly one is the contract). */
function submitted(session: Session, code: number): { answers: (number | Error)[]; settled: Promise<void> } {
  const answers: (number | Error)[] = [];
  let done!: () => void;
  const settled = new Promise<void>((resolve) => (done = resolve));
  session.submit(
    code,
    7n,
    (r) => (answers.push(r), done()),
    (err) => (answers.push(err), done()),
  );
  return { answers, settled };
}

describe('a bare session', () => {
  it('a batch that fails on a live connection: flushing -> reconciling -> idle, its operation failed once, the session usable', async () => {
    const { moves } = recordMoves();
    const { session, lost, end } = bareSession(db.url, failingStatements('SELECT 1'));
    try {
      const failing = submitted(session, 1);
      await failing.settled;
      expect(failing.answers).toHaveLength(1);
      expect(failing.answers[0]).toBeInstanceOf(LockUnavailableError);
      expect((failing.answers[0] as Error).message).toMatch(/division by zero/);
      expect(moves()).toEqual(['connecting -> settingUp', 'settingUp -> idle', 'idle -> flushing', 'flushing -> reconciling', 'reconciling -> idle']);
      const ok = submitted(session, 2);
      await ok.settled;
      expect(ok.answers).toEqual([1]);
      expect(lost).toEqual([]);
    } finally {
      await end();
    }
  });

  it('closed while it reconciles: the operation is answered once, with the statement error', async () => {
    const { moves } = recordMoves();
    const { session, end } = bareSession(db.url, failingStatements('SELECT pg_sleep(0.5)'));
    try {
      const failing = submitted(session, 1);
      await eventually(() => session.state.kind === 'reconciling', 5000, 'the reconcile');
      session.close();
      await failing.settled;
      await sleep(200); // a second answer would come now
      expect(failing.answers).toHaveLength(1);
      expect((failing.answers[0] as Error).message).toMatch(/division by zero/);
      expect(moves().at(-1)).toBe('reconciling -> dead');
    } finally {
      await end();
    }
  });

  it('an undo that fails ends the session: reconciling -> dead, the operation answered once', async () => {
    const { moves } = recordMoves();
    const { session, lost, end } = bareSession(db.url, failingStatements('SELECT pgfence_no_such_function()'));
    try {
      const failing = submitted(session, 1);
      await failing.settled;
      await eventually(() => session.state.kind === 'dead', 5000, 'the session to die');
      await sleep(200);
      expect(failing.answers).toHaveLength(1);
      expect((failing.answers[0] as Error).message).toMatch(/division by zero/);
      expect(session.state).toMatchObject({ kind: 'dead', diedIn: 'reconciling' });
      expect(moves().at(-1)).toBe('reconciling -> dead');
      expect(lost).toHaveLength(1);
    } finally {
      await end();
    }
  });

  it('a failed setup statement: settingUp -> dead, and what was queued behind it fails, never sent', async () => {
    const { moves } = recordMoves();
    const statements = { ...failingStatements('SELECT 1'), setup: { name: 'states_bad_setup', text: 'SELECT 1 / 0 AS guarded' } };
    const { session, end } = bareSession(db.url, statements);
    try {
      const queued = submitted(session, 2);
      await queued.settled;
      expect(queued.answers).toHaveLength(1);
      expect(queued.answers[0]).toBeInstanceOf(SessionLostError);
      expect(queued.answers[0]).toMatchObject({ connected: false, message: expect.stringMatching(/setup statement did not succeed/) });
      expect(moves()).toEqual(['connecting -> settingUp', 'settingUp -> dead']);
      expect(session.state).toMatchObject({ kind: 'dead', diedIn: 'settingUp' });
    } finally {
      await end();
    }
  });

  it('an unreachable server: connecting -> dead, the queued operation fails as not connected', async () => {
    const { moves } = recordMoves();
    const { session, end } = bareSession(await freePortUrl(db.url), failingStatements('SELECT 1'));
    try {
      const queued = submitted(session, 2);
      await queued.settled;
      expect(queued.answers[0]).toMatchObject({ connected: false, message: expect.stringMatching(/could not connect/) });
      expect(moves()).toEqual(['connecting -> dead']);
    } finally {
      await end();
    }
  });
});
