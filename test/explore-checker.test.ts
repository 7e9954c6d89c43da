// The exploration's checker on its own (no database): fed histories with one broken promise each,
// hand-made and injected into a recorded one (test/fixtures/explore-history.json), it names each one.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { check, type ViolationType } from './explore/checker.js';
import { emptyHistory, type ExploreConfig, type History, type HoldRecord, type OpRecord } from './explore/history.js';
import { parseHistory } from './explore/history-json.js';
import { ANSWER_WAIT_GRACE_MS, answerDeadline } from './explore/run.js';

const config: ExploreConfig = {
  seed: 0,
  lossWindowMs: { session: 3000, fenced: 3000, lease: 0, 'xact-pg': 3000, semaphore: 3000 },
  permits: { s0: 2 },
  knownNonExclusive: [],
  destroyedBy: { session: ['backend-kill', 'restart'], fenced: ['backend-kill', 'restart'], lease: [] },
  closeLingerMs: 0,
  statementLingerMs: { 'xact-pg': 100 },
  knownUntyped: [],
};

let ids = 0;
function hold(fields: Partial<HoldRecord> & { grantedAt: number }): HoldRecord {
  return {
    id: `h${++ids}`,
    actor: `a${ids}`,
    kind: 'fenced',
    family: 'session',
    name: 'n0',
    mode: 'exclusive',
    token: null,
    tokenDurable: true,
    requestedAt: fields.grantedAt - 1,
    ...fields,
  };
}

/** A hold released (answering `released`) at `releasedAt`. */
function released(fields: Partial<HoldRecord> & { grantedAt: number; releasedAt: number; released?: boolean }): HoldRecord {
  const { releasedAt, released: answer = true, ...rest } = fields;
  return hold({ ...rest, end: 'released', endedAt: releasedAt, releaseInvokedAt: releasedAt, released: answer });
}

/** A call (an acquire made at invokedAt, unless told otherwise). */
function op(fields: Partial<OpRecord>): OpRecord {
  return { id: `op${++ids}`, actor: 'a', kind: 'fenced', op: 'acquire', invokedAt: 0, calledAt: fields.invokedAt ?? 0, boundMs: 1000, settledAt: 10, outcome: 'ok', ...fields };
}

function history(parts: Partial<History>, overrides: Partial<ExploreConfig> = {}): History {
  return { ...emptyHistory({ ...config, ...overrides }), ...parts };
}

const types = (h: History): ViolationType[] => check(h).map((v) => v.type);

describe('the exploration checker, on hand-made histories', () => {
  it('passes a history that keeps every promise', () => {
    const a = released({ grantedAt: 0, releasedAt: 100, token: 1n });
    const b = released({ grantedAt: 101, releasedAt: 200, token: 2n, requestedAt: 50 });
    const h = history({
      holds: [a, b],
      acts: [
        { hold: a.id, from: 10, to: 10 },
        { hold: b.id, from: 150, to: 151 },
      ],
      writeLog: [
        { seq: 1, name: 'n0', token: 1n, writer: 'w1' },
        { seq: 2, name: 'n0', token: 1n, writer: 'w2' },
        { seq: 3, name: 'n0', token: 2n, writer: 'w3' },
      ],
      ops: [op({}), op({ op: 'release', error: { name: 'LockTimeoutError', code: 'PGFENCE_LOCK_TIMEOUT', message: 'x', typed: true, origin: 'pgfence' } })],
    });
    expect(check(h)).toEqual([]);
  });

  it('names an overlap of two holds that both answered release() true; shared with shared is no overlap', () => {
    const a = released({ grantedAt: 0, releasedAt: 100 });
    const b = released({ grantedAt: 50, releasedAt: 150 });
    expect(types(history({ holds: [a, b] }))).toEqual(['overlap']);
    const c = released({ grantedAt: 0, releasedAt: 100, mode: 'shared' });
    const d = released({ grantedAt: 50, releasedAt: 150, mode: 'shared' });
    expect(types(history({ holds: [c, d] }))).toEqual([]);
    const e = released({ grantedAt: 50, releasedAt: 150, kind: 'session' });
    expect(types(history({ holds: [c, e] }))).toEqual(['overlap']);
    // One name is one lock across families; other names are other locks.
    const lease = released({ grantedAt: 60, releasedAt: 70, kind: 'lease', family: 'lease' });
    expect(types(history({ holds: [a, lease] }))).toEqual(['overlap']);
    expect(types(history({ holds: [a, { ...lease, name: 'n1' }] }))).toEqual([]);
  });

  it('skips the family pairs known not to exclude each other yet', () => {
    const xact = released({ grantedAt: 0, releasedAt: 100, kind: 'xact-pg', family: 'xact' });
    const lease = released({ grantedAt: 50, releasedAt: 150, kind: 'lease', family: 'lease' });
    expect(types(history({ holds: [xact, lease] }))).toEqual(['overlap']);
    expect(types(history({ holds: [xact, lease] }, { knownNonExclusive: [['lease', 'xact']] }))).toEqual([]);
  });

  it('names a holder acting on a lock another certainly held, unless a fault hit it within its loss window', () => {
    // a was lost without knowing; it acted at 500, inside b's certain interval.
    const a = hold({ grantedAt: 0, end: 'lost', endedAt: 600, lostAt: 600, lostReason: 'session-lost' });
    const b = released({ grantedAt: 300, releasedAt: 800 });
    const acts = [
      { hold: a.id, from: 100, to: 100 },
      { hold: a.id, from: 500, to: 500 },
    ];
    // No fault reached a: its act at 500 is certain, so both held at once.
    expect(types(history({ holds: [a, b], acts }))).toEqual(['overlap']);
    const fault = { id: 'f1', type: 'backend-kill' as const, targets: [a.actor], at: 200, endedAt: 210, doneAt: 210 };
    expect(types(history({ holds: [a, b], acts, faults: [fault] }))).toEqual([]);
    // The same fault, but the act came after the loss window closed.
    expect(types(history({ holds: [a, b], acts, faults: [fault] }, { lossWindowMs: { fenced: 100 } }))).toEqual(['stale-act']);
    // A lease has no window at all: its holder must know before anyone else gets in.
    const leaseA = { ...a, kind: 'lease', family: 'lease' as const };
    expect(types(history({ holds: [leaseA, b], acts, faults: [{ ...fault, targets: [leaseA.actor] }] }))).toEqual(['stale-act']);
  });

  it('takes a lease grant for proof only through its acts or a release that found it live (an answer may come after its TTL)', () => {
    const lock = released({ grantedAt: 0, releasedAt: 100 });
    const late = hold({ grantedAt: 50, kind: 'lease', family: 'lease', end: 'lost', endedAt: 70, lostAt: 70, lostReason: 'lease-expired' });
    expect(types(history({ holds: [lock, late] }))).toEqual([]);
    expect(types(history({ holds: [lock, late], acts: [{ hold: late.id, from: 60, to: 60 }] }))).toEqual(['overlap']);
    // A session lock's answer does prove it: session locks do not run out...
    const sessionLate = { ...late, kind: 'fenced', family: 'session' as const, requestedAt: 10 };
    expect(types(history({ holds: [lock, sessionLate] }))).toEqual(['overlap']);
    // ...unless a fault reached its actor while it asked (the session may be gone behind a late answer).
    const cut = { id: 'f1', type: 'blackhole' as const, targets: [sessionLate.actor], at: 20, endedAt: 45 };
    expect(types(history({ holds: [lock, sessionLate], faults: [cut] }))).toEqual([]);
  });

  it('names more permits held at once than the semaphore has', () => {
    const permit = (grantedAt: number, releasedAt: number) => released({ grantedAt, releasedAt, kind: 'semaphore', family: 'permit', name: 's0' });
    expect(types(history({ holds: [permit(0, 100), permit(10, 100), permit(100, 200)] }))).toEqual([]);
    expect(types(history({ holds: [permit(0, 100), permit(10, 100), permit(50, 200)] }))).toEqual(['too-many-permits']);
  });

  it('names a reused token and a token not above one granted earlier, across kinds', () => {
    const a = released({ grantedAt: 0, releasedAt: 100, token: 5n });
    const b = released({ grantedAt: 200, releasedAt: 300, token: 5n, kind: 'lease', family: 'lease', requestedAt: 150 });
    expect(types(history({ holds: [a, b] }))).toEqual(['token-reused', 'token-order']);
    const c = released({ grantedAt: 200, releasedAt: 300, token: 4n, requestedAt: 150 });
    expect(types(history({ holds: [a, c] }))).toEqual(['token-order']);
    // Asked before the other was granted: no order between them, but still no reuse.
    const d = released({ grantedAt: 200, releasedAt: 300, token: 4n, requestedAt: -5 });
    expect(types(history({ holds: [a, d] }))).toEqual([]);
    // A transaction lock's token rolled back with its transaction: it may come again.
    const rolledBack = released({ grantedAt: 0, releasedAt: 100, token: 5n, tokenDurable: false, released: false, kind: 'xact-pg', family: 'xact' });
    expect(types(history({ holds: [rolledBack, b] }))).toEqual([]);
  });

  it('names a fenced write applied after one with a newer token', () => {
    const writeLog = [
      { seq: 1, name: 'n0', token: 3n, writer: 'w1' },
      { seq: 2, name: 'n1', token: 1n, writer: 'w2' },
      { seq: 3, name: 'n0', token: 2n, writer: 'w3' },
    ];
    expect(types(history({ writeLog }))).toEqual(['stale-write']);
  });

  it('names a release() that answered true for a lock a fault had ended, or that its holder had seen lost', () => {
    const a = released({ grantedAt: 0, releasedAt: 100 });
    const kill = { id: 'f1', type: 'backend-kill' as const, targets: [a.actor], at: 40, endedAt: 50, doneAt: 50 };
    expect(types(history({ holds: [a], faults: [kill] }))).toEqual(['release-lie']);
    expect(types(history({ holds: [{ ...a, released: false }], faults: [kill] }))).toEqual([]);
    // A lease outlives its session.
    expect(types(history({ holds: [{ ...a, kind: 'lease', family: 'lease' }], faults: [kill] }))).toEqual([]);
    expect(types(history({ holds: [{ ...a, lostAt: 80, lostReason: 'session-lost' }] }))).toEqual(['release-lie']);
  });

  it('names a lock left held after close (beyond the allowed linger) or held by an idle actor', () => {
    const afterClose = { actor: 'a1', kind: 'fenced', at: 0, afterClose: true, advisory: ['123/1'], leases: [] };
    expect(types(history({ held: [afterClose] }))).toEqual(['leak']);
    expect(types(history({ held: [{ ...afterClose, clearAfterMs: 30 }] }, { closeLingerMs: 50 }))).toEqual([]);
    expect(types(history({ held: [{ ...afterClose, clearAfterMs: 80 }] }, { closeLingerMs: 50 }))).toEqual(['leak']);
    // A lease row left live by a close is never a backend on its way out...
    const leaseLeft = { ...afterClose, advisory: [], leases: ['31'], clearAfterMs: 30 };
    expect(types(history({ held: [leaseLeft] }, { closeLingerMs: 50 }))).toEqual(['leak']);
    // ...unless the database could not be reached while the close ran (the lease then runs out by itself).
    const close = op({ actor: 'a1', op: 'close', invokedAt: 100, settledAt: 110 });
    const restart = { id: 'f2', type: 'restart' as const, targets: ['a1'], at: 90, endedAt: 105 };
    expect(types(history({ held: [leaseLeft], ops: [close], faults: [restart] }, { closeLingerMs: 50 }))).toEqual([]);
    expect(types(history({ held: [leaseLeft] }, { closeLingerMs: 50, leaseLingerKinds: ['fenced'] }))).toEqual([]);
    expect(types(history({ held: [{ actor: 'a2', kind: 'lease', at: 0, afterClose: false, advisory: [], leases: ['7'] }] }))).toEqual(['leak']);
    // A transaction's statement may still wait on the connection its close ended: its own timeout ends it.
    expect(types(history({ held: [{ ...afterClose, kind: 'xact-pg', clearAfterMs: 80 }] }))).toEqual([]);
    expect(types(history({ held: [{ ...afterClose, kind: 'xact-pg', clearAfterMs: 120 }] }))).toEqual(['leak']);
  });

  it('names a late answer and one that never came; time its process was stopped does not count', () => {
    expect(types(history({ ops: [op({ invokedAt: 0, settledAt: 1500, boundMs: 1000 })] }))).toEqual(['late']);
    expect(types(history({ ops: [op({ invokedAt: 0, settledAt: undefined, outcome: undefined })] }))).toEqual(['unsettled']);
    expect(types(history({ ops: [op({ invokedAt: 0, settledAt: undefined, outcome: 'killed' })] }))).toEqual([]);
    const stopped = { processOf: { a: 'child:1' }, stopped: { 'child:1': [{ from: 100, to: 700 }] } };
    expect(types(history({ ops: [op({ invokedAt: 0, settledAt: 1500, boundMs: 1000 })], ...stopped }))).toEqual([]);
  });

  it('tells a call stuck in the test\'s own preparation (before the pgfence call) from one pgfence never answered', () => {
    const pending = { settledAt: undefined, outcome: undefined };
    // Seed 1877999301: a Kysely try waited for a pool connection when its locker closed (pool.end() leaves that wait to its timeout).
    const preparing = op({ ...pending, op: 'try', kind: 'xact-kysely', invokedAt: 100, calledAt: undefined });
    expect(types(history({ ops: [preparing], takenAt: 3500 }))).toEqual(['harness-hang']);
    expect(check(history({ ops: [preparing], takenAt: 3500 }))[0]!.message).toMatch(/never reached pgfence.*3400\.0 ms/);
    // Once the call was made, a missing answer is pgfence's.
    expect(types(history({ ops: [op({ ...pending, op: 'try', invokedAt: 100, calledAt: 100 })], takenAt: 3500 }))).toEqual(['unsettled']);
    // Ops without a preparation of the kind's own (release, close, ...) are called at once.
    expect(types(history({ ops: [op({ ...pending, op: 'release', invokedAt: 100, calledAt: undefined })], takenAt: 3500 }))).toEqual(['unsettled']);
  });

  it('waits for a call in flight, before the history is taken, as long as its bound allows (the preparation too, before the pgfence call)', () => {
    const grace = ANSWER_WAIT_GRACE_MS;
    expect(answerDeadline(op({ op: 'try', invokedAt: 100, boundMs: 1000 }), [], 500)).toBe(1100 + grace);
    expect(answerDeadline(op({ op: 'try', invokedAt: 100, calledAt: undefined, boundMs: 1000 }), [], 500)).toBe(2100 + grace);
    expect(answerDeadline(op({ op: 'close', invokedAt: 100, calledAt: undefined, boundMs: 1000 }), [], 500)).toBe(1100 + grace);
    expect(answerDeadline(op({ invokedAt: 100, boundMs: 1000 }), [{ from: 0, to: 300 }, { from: 400, to: 500 }], 500)).toBe(1400 + grace);
  });

  describe('turns: a waiter seen in PostgreSQL\'s queue is passed over by no caller that asked after it had queued', () => {
    const turns = { kinds: { 'xact-pg': 'kept' as const, session: 'lost-to-lease' as const }, leaseKinds: ['lease'], leaseTtlMs: 2000 };
    /**
     * w (xact-pg) asked at 100 and entered the queue for n0 by 115 (seen waiting until 880), granted at 900. Ahead of
     * it: a0 held the name (granted at 50), a1 asked at 90; both hold once while it waits, as the bound allows.
     */
    const scene = (kind = 'xact-pg', mode: 'exclusive' | 'shared' = 'exclusive') => {
      const w = hold({ actor: 'w', kind, family: kind === 'session' ? 'session' : 'xact', mode, requestedAt: 100, grantedAt: 900 });
      const call = op({ actor: 'w', kind, name: 'n0', mode, timeoutMs: 3000, boundMs: 5000, invokedAt: 100, calledAt: 100, settledAt: 900, hold: w.id });
      const sighting = { actor: 'w', name: 'n0', mode, enteredFrom: 110, enteredBy: 115, firstSeenAt: 130, lastSentAt: 880 };
      const ahead = [released({ actor: 'a0', requestedAt: 0, grantedAt: 50, releasedAt: 300 }), released({ actor: 'a1', requestedAt: 90, grantedAt: 310, releasedAt: 500 })];
      return { w, call, sighting, ahead };
    };
    /** a2 asked at 200, after w had queued, and was granted at 510, before w. */
    const overtaker = (fields: Partial<HoldRecord> & { releasedAt?: number } = {}) => released({ actor: 'a2', requestedAt: 200, grantedAt: 510, releasedAt: 700, ...fields });
    const turnsHistory = (holds: HoldRecord[], parts: Partial<History> = {}) => {
      const { w, call, sighting } = scene();
      return history({ holds: [w, ...holds], ops: [call], queue: [sighting], ...parts }, { turns });
    };

    it('passes a waiter granted once the holders queued before it each held the name once (the bound: no overtake)', () => {
      const { ahead } = scene();
      expect(check(turnsHistory(ahead))).toEqual([]);
      // One that asked after it had queued and was granted after it is no overtake either.
      expect(check(turnsHistory([...ahead, overtaker({ grantedAt: 910, releasedAt: 950 })]))).toEqual([]);
    });

    it('names a waiter passed over by a grant to a caller that asked after it had queued', () => {
      const { ahead } = scene();
      const a2 = overtaker();
      const violations = check(turnsHistory([...ahead, a2]));
      expect(violations.map((v) => v.type)).toEqual(['overtaken']);
      expect(violations[0]!.message).toMatch(/^acquire by w \(xact-pg exclusive, timeoutMs 3000\) waited in PostgreSQL's queue for n0 from 115\.0 ms until its grant h\d+ was answered at 900\.0 ms, and 1 grant of n0 went meanwhile to callers that asked after it had queued \(bound 0\): h\d+ \(fenced exclusive, a2\) asked at 200\.0 ms, granted at 510\.0 ms$/);
      expect(violations[0]!.refs).toContain(a2.id);
      // Not granted (it timed out): judged until the last poll that still saw it waiting.
      const { call, sighting } = scene();
      const timedOut = { ...call, hold: undefined, outcome: 'null' as const, settledAt: 3100 };
      expect(types(history({ holds: [...ahead, a2], ops: [timedOut], queue: [sighting] }, { turns }))).toEqual(['overtaken']);
      expect(types(history({ holds: [...ahead, overtaker({ grantedAt: 890 })], ops: [timedOut], queue: [sighting] }, { turns }))).toEqual([]);
    });

    it('judges only what the queue promises: a waiter seen in it, its own wait, conflicting modes, no fault on it, no lease for kinds a lease sends out', () => {
      const { ahead, w, call, sighting } = scene();
      const a2 = overtaker();
      // Never seen in the queue, or only a wait that began before this call (a statement of an earlier call): not judged.
      expect(types(turnsHistory([...ahead, a2], { queue: [] }))).toEqual([]);
      expect(types(turnsHistory([...ahead, a2], { queue: [{ ...sighting, enteredFrom: 90, enteredBy: 95 }] }))).toEqual([]);
      // Shared with shared do not exclude each other.
      const shared = scene('xact-pg', 'shared');
      expect(types(history({ holds: [shared.w, ...ahead, overtaker({ mode: 'shared' })], ops: [shared.call], queue: [shared.sighting] }, { turns }))).toEqual([]);
      // A fault on the waiter's actor while it waited (its session may have gone: it waits again at the end of the queue).
      const kill = { id: 'f1', type: 'backend-kill' as const, targets: ['w'], at: 400, endedAt: 410 };
      expect(types(turnsHistory([...ahead, a2], { faults: [kill] }))).toEqual([]);
      // Kinds not in config.turns are not judged.
      expect(types(history({ holds: [w, ...ahead, a2], ops: [{ ...call, kind: 'leader' }], queue: [sighting] }, { turns }))).toEqual([]);
      // A lease live while it waited: a session-lock waiter leaves the queue for it (the first to look after the lease
      // gets in), a transaction-lock waiter keeps its place.
      const leaseCall = op({ actor: 'l', kind: 'lease', name: 'n0', invokedAt: 150, calledAt: 150, settledAt: 160, outcome: 'null' });
      const session = scene('session');
      expect(types(history({ holds: [session.w, ...ahead, a2], ops: [session.call], queue: [session.sighting] }, { turns }))).toEqual(['overtaken']);
      expect(types(history({ holds: [session.w, ...ahead, a2], ops: [session.call, leaseCall], queue: [session.sighting] }, { turns }))).toEqual([]);
      expect(types(history({ holds: [w, ...ahead, a2], ops: [call, leaseCall], queue: [sighting] }, { turns }))).toEqual(['overtaken']);
    });

    it('judges a call known to leave the queue between its waits (xactLock with a signal) one wait at a time', () => {
      const { ahead, w, call, sighting } = scene();
      // Two waits of one call: a2 asked between them and was granted while the second one waited.
      const first = { ...sighting, lastSentAt: 300 };
      const second = { ...sighting, enteredFrom: 350, enteredBy: 355, firstSeenAt: 370, lastSentAt: 880 };
      const a2 = overtaker({ requestedAt: 320, grantedAt: 600 });
      const signalled = { ...call, abortAfterMs: 5000 };
      const known = { ...turns, knownRequeuedWithSignal: ['xact-pg'] };
      const parts = { holds: [w, ...ahead, a2], ops: [signalled], queue: [first, second] };
      expect(types(history(parts, { turns }))).toEqual(['overtaken']);
      expect(types(history(parts, { turns: known }))).toEqual([]);
      // Within one wait it is still judged.
      expect(types(history({ ...parts, holds: [w, ...ahead, overtaker({ requestedAt: 360, grantedAt: 600 })] }, { turns: known }))).toEqual(['overtaken']);
      // Without a signal the call waits once: judged as a whole.
      expect(types(history({ ...parts, ops: [call] }, { turns: known }))).toEqual(['overtaken']);
    });
  });

  it('names an error that is not a PgfenceError (the test\'s own driver errors and the caller\'s abort reason aside)', () => {
    const raw = { name: 'Error', message: 'Connection terminated unexpectedly', typed: false, origin: 'pgfence' as const };
    expect(types(history({ ops: [op({ outcome: 'error', error: raw })] }))).toEqual(['untyped-error']);
    expect(types(history({ ops: [op({ outcome: 'error', error: { ...raw, origin: 'driver' } })] }))).toEqual([]);
    expect(types(history({ ops: [op({ outcome: 'error', error: { ...raw, origin: 'caller' } })] }))).toEqual([]);
    expect(types(history({ ops: [op({ op: 'write', outcome: 'error', error: raw })] }, { knownUntyped: ['write'] }))).toEqual([]);
  });
});

describe('the exploration checker, on a recorded history', () => {
  const recorded = (): History => parseHistory(readFileSync(new URL('./fixtures/explore-history.json', import.meta.url), 'utf8'));

  it('passes it as recorded', () => {
    expect(check(recorded())).toEqual([]);
  });

  it('names an overlap injected into it', () => {
    const h = recorded();
    // Two exclusive session locks or leases of one name, both released true: move the later one's request and grant into the earlier one.
    const exclusive = h.holds.filter((x) => (x.family === 'session' || x.family === 'lease') && x.mode === 'exclusive' && x.released === true);
    const [a, b] = [exclusive[0]!, exclusive.find((x) => x.name === exclusive[0]!.name && x.grantedAt > exclusive[0]!.releaseInvokedAt!)!];
    b.grantedAt = (a.grantedAt + a.releaseInvokedAt!) / 2;
    b.requestedAt = b.grantedAt - 1;
    expect(check(h).map((v) => [v.type, v.refs.sort()])).toContainEqual(['overlap', [a.id, b.id].sort()]);
  });

  it('names a token reused in it', () => {
    const h = recorded();
    const tokened = h.holds.filter((x) => x.token !== null && x.tokenDurable).sort((x, y) => x.grantedAt - y.grantedAt);
    const later = tokened.find((x) => x.name === tokened[0]!.name && x !== tokened[0])!;
    later.token = tokened[0]!.token;
    expect(types(h)).toContain('token-reused');
  });

  it('names a lock leaked in it', () => {
    const h = recorded();
    h.held.push({ actor: h.holds[0]!.actor, kind: h.holds[0]!.kind, at: 0, afterClose: true, advisory: ['42/1'], leases: [] });
    expect(types(h)).toEqual(['leak']);
  });

  it('names a late answer in it', () => {
    const h = recorded();
    const settled = h.ops.find((o) => o.settledAt !== undefined)!;
    settled.settledAt = settled.invokedAt + settled.boundMs + 1;
    expect(types(h)).toEqual(['late']);
  });

  it('names an untyped error in it', () => {
    const h = recorded();
    const failed = h.ops.find((o) => o.error?.origin === 'pgfence')!;
    failed.error!.typed = false;
    expect(types(h)).toEqual(['untyped-error']);
  });
});
