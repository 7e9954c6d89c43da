/**
 * The checker of an exploration's history: pure, no database. It names every broken promise it can
 * prove from the records, and nothing it cannot: each interval it trusts is one the lock was certainly
 * held through on the server.
 *
 * A hold is certainly held from its grant's answer until
 *  - its release was invoked, when release() answered true (release claims exactly that), else
 *  - the last instant its holder acted on it (a signal read unaborted, a statement answered in its
 *    transaction) before any fault reached its actor.
 * Two conflicting holds whose certain intervals meet break exclusion. A holder acting later than its
 * certain interval (it may have lost the lock without knowing yet) must not act inside another's
 * certain interval, except within its kind's documented loss window after a fault that hit it.
 *
 * Turns (bounded waiting across kinds): a waiter seen in PostgreSQL's queue for its name is passed
 * over by no grant of that name to a caller that asked after it had entered the queue (see turns()).
 */
import type { ActRecord, ExploreConfig, FaultRecord, History, HoldRecord, OpRecord, Mode, TurnConfig } from './history.js';

export type ViolationType =
  | 'overlap'
  | 'stale-act'
  | 'too-many-permits'
  | 'token-order'
  | 'token-reused'
  | 'stale-write'
  | 'release-lie'
  | 'leak'
  | 'late'
  | 'unsettled'
  /** A call stuck in the test's own preparation (a pool connection, BEGIN): it never reached pgfence. */
  | 'harness-hang'
  | 'untyped-error'
  /** A waiter in PostgreSQL's queue passed over by a caller that asked after it had queued. */
  | 'overtaken';

export interface Violation {
  type: ViolationType;
  message: string;
  /** Ids of the records involved (holds, ops, faults, writes). */
  refs: string[];
}

interface Interval {
  hold: HoldRecord;
  from: number;
  to: number;
}

/** When a lease call's lease may have held its name. */
interface LeaseWindow {
  op: string;
  from: number;
  to: number;
}

const ms = (t: number): string => `${t.toFixed(1)} ms`;

export function check(history: History): Violation[] {
  const ctx = new CheckContext(history);
  return [...ctx.exclusion(), ...ctx.permits(), ...ctx.tokens(), ...ctx.writes(), ...ctx.releases(), ...ctx.leaks(), ...ctx.calls(), ...ctx.turns()];
}

class CheckContext {
  private readonly config: ExploreConfig;
  private readonly actsOf = new Map<string, ActRecord[]>();
  private readonly faultsOf = new Map<string, FaultRecord[]>();
  private readonly certain = new Map<string, Interval>();

  constructor(private readonly h: History) {
    this.config = h.config;
    for (const act of h.acts) push(this.actsOf, act.hold, act);
    for (const fault of h.faults) for (const actor of fault.targets) push(this.faultsOf, actor, fault);
    for (const hold of h.holds) {
      const to = this.certainEnd(hold);
      if (to >= hold.grantedAt) this.certain.set(hold.id, { hold, from: hold.grantedAt, to });
    }
  }

  /** The first fault that reached the hold's actor while it held (or was still going on at the grant). */
  private firstFaultAt(hold: HoldRecord): number {
    let first = Infinity;
    for (const f of this.faultsOf.get(hold.actor) ?? []) {
      if ((f.endedAt ?? Infinity) < hold.grantedAt) continue;
      first = Math.min(first, Math.max(f.at, hold.grantedAt));
    }
    return first;
  }

  private faultedWhileAsking(hold: HoldRecord): boolean {
    return (this.faultsOf.get(hold.actor) ?? []).some((f) => f.at < hold.grantedAt && (f.endedAt ?? Infinity) >= hold.requestedAt);
  }

  /** A fault reached the actor while its close ran (the database may not have heard it: a lease then runs out on its own). */
  private faultedWhileClosing(actor: string): boolean {
    const close = this.h.ops.find((o) => o.actor === actor && o.op === 'close');
    if (!close) return false;
    const end = close.settledAt ?? Infinity;
    return (this.faultsOf.get(actor) ?? []).some((f) => f.at <= end && (f.endedAt ?? Infinity) >= close.invokedAt);
  }

  /**
   * Where the certain interval ends; -Infinity when there is none. A lease's grant may be answered
   * after its TTL ran out (its answer was held up on the way): only its acts, or a release that found
   * it live, prove it held.
   */
  private certainEnd(hold: HoldRecord): number {
    if (hold.released === true && hold.releaseInvokedAt !== undefined) return hold.releaseInvokedAt;
    const cutoff = Math.min(this.firstFaultAt(hold), hold.endedAt ?? Infinity);
    // Nor does any grant answered after a fault reached its actor while it asked: the answer may have
    // been on its way (or waiting to be read) while the fault ended the session behind it.
    let last = hold.family === 'lease' || this.faultedWhileAsking(hold) ? -Infinity : hold.grantedAt;
    for (const act of this.actsOf.get(hold.id) ?? []) if (act.to <= cutoff && act.from > last) last = act.from;
    return last;
  }

  private knownNonExclusive(a: HoldRecord, b: HoldRecord): boolean {
    return this.config.knownNonExclusive.some(([x, y]) => (a.family === x && b.family === y) || (a.family === y && b.family === x));
  }

  /** Two holds of one lock that cannot be held together. */
  private conflict(a: HoldRecord, b: HoldRecord): boolean {
    if (a.id === b.id || a.name !== b.name) return false;
    if ((a.family === 'permit') !== (b.family === 'permit')) return false;
    if (a.family === 'permit') return false; // counted apart
    if (a.mode === 'shared' && b.mode === 'shared') return false;
    return !this.knownNonExclusive(a, b);
  }

  /** A fault that hit the actor at or before `at`, recently enough that the kind may not know of its loss yet. */
  private excusingFault(hold: HoldRecord, at: number): FaultRecord | undefined {
    const window = this.config.lossWindowMs[hold.kind] ?? 0;
    return (this.faultsOf.get(hold.actor) ?? []).find((f) => f.at <= at && at <= Math.max(f.at, f.endedAt ?? f.at) + window && (f.endedAt ?? Infinity) >= hold.grantedAt);
  }

  private byName(filter: (h: HoldRecord) => boolean): Map<string, HoldRecord[]> {
    const out = new Map<string, HoldRecord[]>();
    for (const hold of this.h.holds) if (filter(hold)) push(out, hold.name, hold);
    return out;
  }

  *exclusion(): Generator<Violation> {
    for (const holds of this.byName((h) => h.family !== 'permit').values()) {
      const intervals = holds.flatMap((h) => this.certain.get(h.id) ?? []).sort((a, b) => a.from - b.from);
      for (let i = 0; i < intervals.length; i++) {
        const a = intervals[i]!;
        for (let j = i + 1; j < intervals.length; j++) {
          const b = intervals[j]!;
          if (b.from >= a.to) break; // sorted by grant: no later hold meets a
          if (!this.conflict(a.hold, b.hold)) continue;
          yield {
            type: 'overlap',
            message:
              `${describe(a.hold)} and ${describe(b.hold)} were both held on ${a.hold.name} from ${ms(b.from)} to ${ms(Math.min(a.to, b.to))}` +
              ` (certain intervals ${ms(a.from)}..${ms(a.to)} and ${ms(b.from)}..${ms(b.to)})`,
            refs: [a.hold.id, b.hold.id],
          };
        }
      }
      // Acts after a hold's certain end: the holder still believed; nobody else may certainly hold then.
      for (const hold of holds) {
        const ownEnd = this.certain.get(hold.id)?.to ?? -Infinity;
        for (const act of this.actsOf.get(hold.id) ?? []) {
          if (act.from <= ownEnd) continue;
          const other = holds.find((o) => this.conflict(hold, o) && this.containsAct(o, act));
          if (!other || this.excusingFault(hold, act.from)) continue;
          yield {
            type: 'stale-act',
            message: `${describe(hold)} acted on ${hold.name} at ${ms(act.from)}..${ms(act.to)} while ${describe(other)} certainly held it, outside any loss window of ${hold.kind}`,
            refs: [hold.id, other.id],
          };
        }
      }
    }
  }

  private containsAct(hold: HoldRecord, act: ActRecord): boolean {
    const c = this.certain.get(hold.id);
    return c !== undefined && c.from < act.from && act.to < c.to;
  }

  *permits(): Generator<Violation> {
    for (const [name, holds] of this.byName((h) => h.family === 'permit')) {
      const permits = this.config.permits[name] ?? 1;
      const points: [number, number, HoldRecord][] = [];
      for (const hold of holds) {
        const c = this.certain.get(hold.id);
        if (!c || c.to <= c.from) continue;
        points.push([c.from, 1, hold], [c.to, -1, hold]);
      }
      // Ends before starts at one instant: touching intervals do not overlap.
      points.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      const live = new Set<HoldRecord>();
      let reported = false;
      for (const [at, delta, hold] of points) {
        if (delta < 0) live.delete(hold);
        else live.add(hold);
        if (live.size > permits && !reported) {
          reported = true;
          yield {
            type: 'too-many-permits',
            message: `${live.size} permits of ${name} (of ${permits}) were certainly held at once at ${ms(at)}: ${[...live].map(describe).join(', ')}`,
            refs: [...live].map((h) => h.id),
          };
        }
      }
      for (const hold of holds) {
        const ownEnd = this.certain.get(hold.id)?.to ?? -Infinity;
        for (const act of this.actsOf.get(hold.id) ?? []) {
          if (act.from <= ownEnd) continue;
          const others = holds.filter((o) => o !== hold && this.containsAct(o, act));
          if (others.length < permits || this.excusingFault(hold, act.from)) continue;
          yield {
            type: 'stale-act',
            message: `${describe(hold)} acted on a permit of ${name} at ${ms(act.from)} while ${others.length} others certainly held all ${permits}`,
            refs: [hold.id, ...others.map((o) => o.id)],
          };
        }
      }
    }
  }

  *tokens(): Generator<Violation> {
    for (const [name, holds] of this.byName((h) => h.token !== null)) {
      const durable = holds.filter((h) => h.tokenDurable).sort((a, b) => a.grantedAt - b.grantedAt);
      const seen = new Map<bigint, HoldRecord>();
      for (const hold of durable) {
        const twin = seen.get(hold.token!);
        if (twin) yield { type: 'token-reused', message: `${describe(twin)} and ${describe(hold)} on ${name} both got token ${hold.token}`, refs: [twin.id, hold.id] };
        seen.set(hold.token!, hold);
      }
      for (const hold of holds) {
        // Every durable token granted (answered) before this grant was asked for must be lower.
        let newest: HoldRecord | null = null;
        for (const earlier of durable) {
          if (earlier.grantedAt >= hold.requestedAt) break;
          if (!newest || earlier.token! > newest.token!) newest = earlier;
        }
        if (newest && hold.token! <= newest.token!) {
          yield {
            type: 'token-order',
            message: `${describe(hold)} on ${name} asked at ${ms(hold.requestedAt)} got token ${hold.token}, not above ${newest.token} granted earlier to ${describe(newest)}`,
            refs: [newest.id, hold.id],
          };
        }
      }
    }
  }

  *writes(): Generator<Violation> {
    const newest = new Map<string, { token: bigint; writer: string }>();
    for (const row of [...this.h.writeLog].sort((a, b) => a.seq - b.seq)) {
      const before = newest.get(row.name);
      if (before && row.token < before.token) {
        yield {
          type: 'stale-write',
          message: `a write with token ${row.token} (${row.writer}) was applied to ${row.name} after one with token ${before.token} (${before.writer})`,
          refs: [before.writer, row.writer],
        };
        continue;
      }
      newest.set(row.name, { token: row.token, writer: row.writer });
    }
  }

  *releases(): Generator<Violation> {
    for (const hold of this.h.holds) {
      if (hold.released !== true || hold.releaseInvokedAt === undefined) continue;
      if (hold.lostAt !== undefined && hold.lostAt < hold.releaseInvokedAt) {
        yield {
          type: 'release-lie',
          message: `release() of ${describe(hold)} answered true at ${ms(hold.releaseInvokedAt)}, after its holder was told at ${ms(hold.lostAt)} that it was lost (${hold.lostReason})`,
          refs: [hold.id],
        };
        continue;
      }
      const kinds = this.config.destroyedBy[hold.kind] ?? [];
      const fault = (this.faultsOf.get(hold.actor) ?? []).find((f) => {
        const done = f.doneAt ?? f.endedAt;
        return kinds.includes(f.type) && f.at > hold.grantedAt && done !== undefined && done < hold.releaseInvokedAt!;
      });
      if (!fault) continue;
      yield {
        type: 'release-lie',
        message: `release() of ${describe(hold)} answered true at ${ms(hold.releaseInvokedAt)}, but a ${fault.type} (${fault.id}) had ended it at ${ms(fault.doneAt ?? fault.endedAt!)}`,
        refs: [hold.id, fault.id],
      };
    }
  }

  *leaks(): Generator<Violation> {
    for (const seen of this.h.held) {
      if (seen.advisory.length === 0 && seen.leases.length === 0) continue;
      // Advisory locks may outlive a close by a backend's exit (the allowance); a lease row lives until released or expired.
      const allowedMs = this.config.closeLingerMs + (this.config.statementLingerMs[seen.kind] ?? 0);
      const cleared = seen.clearAfterMs !== undefined && seen.clearAfterMs <= allowedMs;
      const leaseExcused = seen.leases.length === 0 || this.faultedWhileClosing(seen.actor) || (this.config.leaseLingerKinds ?? []).includes(seen.kind);
      if (seen.afterClose && cleared && leaseExcused) continue;
      const what = [...seen.advisory.map((k) => `advisory ${k}`), ...seen.leases.map((t) => `lease token ${t}`)].join(', ');
      const when = seen.afterClose
        ? `after its close${seen.clearAfterMs === undefined ? ', and still at the end of the wait' : ` (for ${ms(seen.clearAfterMs)})`}`
        : 'that none of its holders believed held';
      yield { type: 'leak', message: `${seen.actor} still held ${what} ${when}`, refs: [seen.actor] };
    }
  }

  private stoppedDuring(op: OpRecord, until: number): number {
    const process = this.h.processOf[op.actor];
    let total = 0;
    for (const w of (process && this.h.stopped[process]) || []) total += Math.max(0, Math.min(w.to, until) - Math.max(w.from, op.invokedAt));
    return total;
  }

  *calls(): Generator<Violation> {
    for (const op of this.h.ops) {
      if (op.outcome === 'killed') continue;
      if (op.settledAt === undefined) {
        const pending = this.h.takenAt === undefined ? '' : ` (still pending ${ms(this.h.takenAt - op.invokedAt)} later, when the round ended; its bound ${ms(op.boundMs)})`;
        // acquire and try record the moment the kind makes the pgfence call (after its own connection and BEGIN).
        if ((op.op === 'acquire' || op.op === 'try') && op.calledAt === undefined) {
          const message = `${op.op} by ${op.actor} (${op.kind}) invoked at ${ms(op.invokedAt)} never reached pgfence: the test's own preparation (a connection, BEGIN) never settled${pending}`;
          yield { type: 'harness-hang', message, refs: [op.id] };
        } else {
          yield { type: 'unsettled', message: `${op.op} by ${op.actor} (${op.kind}) invoked at ${ms(op.invokedAt)} never settled${pending}`, refs: [op.id] };
        }
        continue;
      }
      const took = op.settledAt - op.invokedAt - this.stoppedDuring(op, op.settledAt);
      // The test's own statements failing slowly (a connect through a blackhole) say nothing of pgfence's bounds.
      if (took > op.boundMs && op.error?.origin !== 'driver') {
        yield {
          type: 'late',
          message: `${op.op} by ${op.actor} (${op.kind}${op.timeoutMs === undefined ? '' : `, timeoutMs ${op.timeoutMs}`}) settled after ${ms(took)}, past its bound of ${ms(op.boundMs)}`,
          refs: [op.id],
        };
      }
      const err = op.error;
      if (err && err.origin === 'pgfence' && !err.typed && !this.config.knownUntyped.includes(op.op)) {
        yield { type: 'untyped-error', message: `${op.op} by ${op.actor} (${op.kind}) threw ${err.name}${err.code ? ` [${err.code}]` : ''}, not a PgfenceError: ${err.message}`, refs: [op.id] };
      }
    }
  }

  /**
   * Bounded waiting across kinds (docs/concepts.md, "Turns across kinds"). PostgreSQL's queue for a key
   * is first in, first out for every kind and lets nobody barge past a queued waiter: a waiter in it is
   * granted once the holders queued before it have each held the name once. So the bound is 0
   * overtakes: no grant of its name (in a mode that conflicts with its own) goes to a caller that asked
   * after the waiter entered the queue, while the waiter still waits.
   *
   * Judged for acquire calls of the kinds in config.turns, from the wait's first sighting in the queue
   * (the latest moment the wait can have begun: pg_locks.waitstart on this clock) until the waiter's
   * grant was answered, or, when it was not granted, the last poll that still saw it waiting. Not
   * judged when a fault reached the waiter's actor meanwhile (a lost session waits again at the end of
   * the queue), and, for kinds whose waiter a live lease sends out of the queue ('lost-to-lease'), when
   * a lease may have held the name meanwhile (the first to look after a lease gets in). A call known to
   * leave the queue between its waits (turns.knownRequeuedWithSignal) is judged one wait at a time.
   */
  *turns(): Generator<Violation> {
    const turns = this.config.turns;
    const queue = this.h.queue ?? [];
    if (!turns || queue.length === 0) return;
    const holdById = new Map(this.h.holds.map((h) => [h.id, h]));
    const familyOf = new Map(this.h.holds.map((h) => [h.kind, h.family]));
    const lossWindow = Math.max(0, ...Object.values(this.config.lossWindowMs));
    const leases = this.leaseWindows(turns, holdById, lossWindow);
    for (const w of this.h.ops) {
      const turn = turns.kinds[w.kind];
      if (!turn || w.op !== 'acquire' || w.name === undefined || w.calledAt === undefined) continue;
      const until = w.settledAt ?? this.h.takenAt ?? Infinity;
      // Its own waits: begun after the call was made (a statement of an earlier call may still be queued).
      const seen = queue.filter((s) => s.actor === w.actor && s.name === w.name && s.enteredFrom >= w.invokedAt && s.enteredBy <= until);
      if (seen.length === 0) continue;
      const hold = w.hold === undefined ? undefined : holdById.get(w.hold);
      // A call that leaves the queue between its waits (a known gap) is judged one wait at a time, each while it was seen.
      const requeued = w.abortAfterMs !== undefined && (turns.knownRequeuedWithSignal ?? []).includes(w.kind);
      const waits = requeued
        ? seen.map((s) => ({ entry: s.enteredBy, end: Math.min(until, s.lastSentAt), granted: undefined }))
        : [{ entry: Math.min(...seen.map((s) => s.enteredBy)), end: hold ? hold.grantedAt : Math.min(until, Math.max(...seen.map((s) => s.lastSentAt))), granted: hold }];
      for (const { entry, end, granted } of waits) {
        if (end <= entry) continue;
        const violation = this.overtaken(w, turn, entry, end, granted, { leases, familyOf, lossWindow });
        if (violation) yield violation;
      }
    }
  }

  /** The grants that passed over `w` while it waited from `entry` to `end` (answered its grant `hold`, if given): a violation, or null. */
  private overtaken(
    w: OpRecord,
    turn: 'kept' | 'lost-to-lease',
    entry: number,
    end: number,
    hold: HoldRecord | undefined,
    ctx: { leases: Map<string, LeaseWindow[]>; familyOf: Map<string, string>; lossWindow: number },
  ): Violation | null {
    const meets = (from: number, to: number) => from <= end && to >= entry;
    if ((this.faultsOf.get(w.actor) ?? []).some((f) => meets(f.at, (f.endedAt ?? Infinity) + ctx.lossWindow))) return null;
    if (turn === 'lost-to-lease' && (ctx.leases.get(w.name!) ?? []).some((l) => l.op !== w.id && meets(l.from, l.to))) return null;
    const mode: Mode = w.mode ?? 'exclusive';
    const family = ctx.familyOf.get(w.kind);
    const knownNonExclusive = (h: HoldRecord) => family !== undefined && this.config.knownNonExclusive.some(([x, y]) => (family === x && h.family === y) || (family === y && h.family === x));
    const overtakes = this.h.holds
      .filter(
        (h) =>
          h.name === w.name &&
          h.family !== 'permit' &&
          h.actor !== w.actor &&
          !(h.mode === 'shared' && mode === 'shared') &&
          !knownNonExclusive(h) &&
          h.requestedAt > entry &&
          h.grantedAt < end,
      )
      .sort((a, b) => a.grantedAt - b.grantedAt);
    if (overtakes.length === 0) return null;
    const waited = hold ? `until its grant ${hold.id} was answered at ${ms(end)}` : `until at least ${ms(end)}${w.hold === undefined ? ` (not granted: ${w.outcome ?? 'pending'})` : ''}`;
    return {
      type: 'overtaken',
      message:
        `acquire by ${w.actor} (${w.kind} ${mode}, timeoutMs ${w.timeoutMs}${w.abortAfterMs === undefined ? '' : `, abort after ${w.abortAfterMs} ms`}) waited in PostgreSQL's queue for ${w.name}` +
        ` from ${ms(entry)} ${waited}, and ${overtakes.length} grant${overtakes.length === 1 ? '' : 's'} of ${w.name} went meanwhile to callers that asked after it had queued (bound 0): ` +
        overtakes.map((h) => `${describe(h)} asked at ${ms(h.requestedAt)}, granted at ${ms(h.grantedAt)}`).join('; '),
      refs: [w.id, ...(hold ? [hold.id] : []), ...overtakes.map((h) => h.id)],
    };
  }

  /**
   * Per name, when a lease may have held it: from each lease call until its lease was released (the
   * release answered), or, unreleased, until its TTL ran out after its holder's last belief (its renewals
   * stop by then); a call that got nothing may have been granted too late to keep it (handed back, or
   * left to its TTL).
   */
  private leaseWindows(turns: TurnConfig, holdById: Map<string, HoldRecord>, lossWindow: number): Map<string, LeaseWindow[]> {
    const out = new Map<string, LeaseWindow[]>();
    for (const o of this.h.ops) {
      if (!turns.leaseKinds.includes(o.kind) || (o.op !== 'acquire' && o.op !== 'try') || o.name === undefined) continue;
      const hold = o.hold === undefined ? undefined : holdById.get(o.hold);
      const faulted = (this.faultsOf.get(o.actor) ?? []).some((f) => f.at <= (o.settledAt ?? Infinity) && (f.endedAt ?? Infinity) >= o.invokedAt);
      let to: number;
      if (hold?.released === true && hold.releaseSettledAt !== undefined) to = hold.releaseSettledAt;
      else if (hold) to = (hold.endedAt ?? Infinity) + turns.leaseTtlMs + lossWindow;
      else to = (o.settledAt ?? Infinity) + turns.leaseTtlMs + (faulted ? lossWindow : 0);
      push(out, o.name, { op: o.id, from: o.invokedAt, to });
    }
    return out;
  }
}

function describe(h: HoldRecord): string {
  return `${h.id} (${h.kind} ${h.mode}${h.token === null ? '' : ` token ${h.token}`}, ${h.actor})`;
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
