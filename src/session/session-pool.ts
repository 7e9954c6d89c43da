import type pg from 'pg';
import { LockerClosedError } from '../core/index.js';
import type { Logger } from '../observe/index.js';
import type { ConnectionSource } from './connection-source.js';
import type { OpStatements } from './op-statements.js';
import { Session, type StatementText } from './session.js';
import { cancelBackendSql } from './session-sql.js';

/**
 * A session holding this many locks is heavy: single acquires keep off it while a lighter one exists.
 * PostgreSQL walks a backend's whole local lock table at the end of every statement, so a session
 * holding thousands of locks makes each of its statements slower.
 */
export const HEAVY_HOLDS = 256;
/** Lock tries placed in one synchronous run (one tick) beyond this many are a burst: they go to the bulk slot. */
export const BURST = 64;
/** A session with this many operations queued behind its statement in flight is congested: a try spills to another slot. */
const CONGESTED = 16;

/** What a SessionPool is built with: its settings, and its owner's answers to what it asks. */
export interface SessionPoolOptions {
  size: number;
  keepaliveMs: number;
  deadlineMs: number;
  /** A locker holding and waiting for nothing closes its last session after this long unused. */
  idleTimeoutMs: number;
  logger: Logger;
  /** What the sessions run: the owner's operations (see OpStatements). */
  statements: OpStatements;
  /** Run on a new waiter session ahead of its first wait (what a first wait would otherwise pay after its grant). */
  warmWaiter?: StatementText;
  /** A session died (not when closed): what it held is lost. */
  onLost(session: Session, err: Error): void;
  /** A NOTIFY arrived on a session that LISTENs (the release listener's). */
  onNotification(msg: pg.Notification): void;
  /** A blocking wait is in flight on the waiter session. */
  waiterBlocked(): boolean;
  /** The locker holds or waits for something (its last session then stays open). */
  needed(): boolean;
  /** Something waits (a marker may be registered on any lock session, and LISTEN on home is in use). */
  waiting(): boolean;
}

/**
 * The locker's pinned sessions: lock sessions in up to `size` slots, and the waiter session.
 *
 * Slot 0 is the **home** session: every lock try goes there under ordinary load, and it also carries
 * what needs no connection of its own (lease statements, LISTEN, the name registry, inspect, a cancel),
 * so a locker holding any mix of locks, leases, permits and leadership keeps one connection. A try
 * spills to another slot, within `size`, when home is heavy (HEAVY_HOLDS) or congested; bursts (more
 * than BURST tries in one tick, as when thousands are taken at once) and acquireAll sets of more than
 * BURST keys go to the last slot, the bulk slot.
 * A key that has a marker is tried where its marker is (the lock manager sees to that). A dead session
 * is replaced the next time its slot is used.
 *
 * The waiter session is opened by the first blocking wait (never together with a lock session), and
 * carries nothing else. Every keepalive period the pool closes what is no longer needed: the waiter
 * session once unused for a keepalive period and holding nothing; while nothing waits, a lock session
 * that holds nothing and was unused for a keepalive period (home moves to the next live session, or to
 * the waiter session when that is the one holding the locks); and the last session once unused for
 * `idleTimeoutMs` with nothing held or waited for.
 */
export class SessionPool {
  private readonly slots: (Session | null)[];
  /** The session that blocks in pg_advisory_lock for one contended key at a time (PostgreSQL's FIFO queue). */
  private waiter: Session | null = null;
  /** Closes sessions no longer needed, every keepalive period while any is open. */
  private reaper: NodeJS.Timeout | null = null;
  private nextId = 1;
  private closed = false;
  /** Server-side holds (locks, permits) per session id, as the lock kinds report them: placement and closing go by it. */
  private readonly holds = new Map<number, number>();
  /** Lock tries placed in the current synchronous run (reset at the next microtask). */
  private placedNow = 0;

  constructor(
    private readonly source: ConnectionSource,
    private readonly opts: SessionPoolOptions,
  ) {
    this.slots = new Array<Session | null>(opts.size).fill(null);
  }

  /** Why pinned sessions are refused (a transaction pooler), once known. */
  get refusal(): Error | null {
    return this.source.refusal;
  }

  /** The home session (slot 0), opening one if needed. */
  home(): Session {
    return this.slotSession(0);
  }

  /** Where a key's announcements and semaphore slots go: the home session. */
  sessionFor(_key: bigint): Session {
    return this.home();
  }

  /**
   * Where a session lock of `key` is tried: home, unless it is heavy or congested (then a lighter slot,
   * within maxSessions); bursts and large acquireAll sets (`bulk`) go to the bulk slot.
   */
  lockSessionFor(_key: bigint, bulk: boolean): Session {
    const n = this.slots.length;
    if (this.placedNow++ === 0) queueMicrotask(this.endRun);
    if (n === 1) return this.home();
    if (bulk || this.placedNow > BURST) return this.slotSession(n - 1);
    if (this.holdsOf(0) < HEAVY_HOLDS && !this.congested(0)) return this.home();
    return this.slotSession(this.spillSlot());
  }

  /** Server-side holds on a session changed by `delta` (a lock taken or given back, a permit). */
  noteHolds(sessionId: number, delta: number): void {
    const n = (this.holds.get(sessionId) ?? 0) + delta;
    if (n > 0) this.holds.set(sessionId, n);
    else this.holds.delete(sessionId);
  }

  private holdsOn(session: Session | null): number {
    return session && session.state.kind !== 'dead' ? (this.holds.get(session.id) ?? 0) : 0;
  }

  private holdsOf(slot: number): number {
    return this.holdsOn(this.slots[slot]!);
  }

  private live(slot: number): Session | null {
    const s = this.slots[slot];
    return s && s.state.kind !== 'dead' ? s : null;
  }

  private congested(slot: number): boolean {
    return (this.live(slot)?.queued ?? 0) >= CONGESTED;
  }

  /** A slot other than home for a try: an open one neither heavy nor congested, else a free one, else the lightest. */
  private spillSlot(): number {
    let best = -1;
    for (let i = 1; i < this.slots.length; i++) {
      if (!this.live(i) || this.holdsOf(i) >= HEAVY_HOLDS || this.congested(i)) continue;
      if (best < 0 || this.holdsOf(i) < this.holdsOf(best)) best = i;
    }
    if (best >= 0) return best;
    for (let i = 1; i < this.slots.length; i++) if (!this.live(i)) return i;
    best = 0;
    for (let i = 1; i < this.slots.length; i++) if (this.holdsOf(i) < this.holdsOf(best)) best = i;
    return best;
  }

  private readonly endRun = (): void => {
    this.placedNow = 0;
  };

  private slotSession(slot: number): Session {
    const current = this.live(slot);
    if (current) return current;
    const session = this.open();
    this.slots[slot] = session;
    return session;
  }

  /** The waiter session, opening one if needed (only a blocking wait asks for it). */
  waiterSession(): Session {
    if (this.waiter && this.waiter.state.kind !== 'dead') return this.waiter;
    this.waiter = this.open();
    const warm = this.opts.warmWaiter;
    // Only a warm-up: a first wait pays for it instead (a dead session is reported as lost anyway).
    if (warm) this.waiter.statement(warm, []).catch((err) => this.opts.logger.debug({ err }, 'pgfence: waiter session warm-up failed'));
    return this.waiter;
  }

  isWaiterSession(session: Session | null): boolean {
    return session !== null && session === this.waiter;
  }

  /** A lock (or permit) is held on the waiter session: no blocking wait may go there (it would hold up its release). */
  waiterHolds(): boolean {
    return this.holdsOn(this.waiter) > 0;
  }

  /** Interrupts the statement a session is running (a blocking wait), from another connection: home when it is up. */
  async cancel(session: Session): Promise<void> {
    const pid = session.processId;
    // Still running its setup statement: the wait has not been sent (it is withdrawn), and a cancel would kill the setup.
    if (pid === null || !session.usable) return;
    const home = this.live(0);
    // Without the cancel the wait still ends, at its lock_timeout (or with its session).
    await (home && home !== session ? home.statement(cancelBackendSql, [pid]) : this.source.pool.query(cancelBackendSql, [pid])).catch((err) =>
      this.opts.logger.debug({ err, session: session.id }, 'pgfence: could not cancel a blocking wait; it ends at its lock_timeout'),
    );
  }

  private open(): Session {
    if (this.closed) throw new LockerClosedError();
    const session = new Session({
      id: this.nextId++,
      source: this.source,
      keepaliveMs: this.opts.keepaliveMs,
      deadlineMs: this.opts.deadlineMs,
      logger: this.opts.logger,
      statements: this.opts.statements,
      onLost: (s, err) => {
        this.holds.delete(s.id);
        this.opts.onLost(s, err);
      },
      onNotification: (msg) => this.opts.onNotification(msg),
    });
    if (!this.reaper) {
      this.reaper = setInterval(this.reap, this.opts.keepaliveMs);
      this.reaper.unref();
    }
    return session;
  }

  /** Closes what is no longer needed (see the class comment); stops once no session is open. */
  private readonly reap = (): void => {
    const now = performance.now();
    const unusedFor = (s: Session, ms: number) => s.state.kind === 'idle' && s.queued === 0 && now - s.usedAt >= ms;
    const waiter = this.waiter;
    if (waiter?.state.kind === 'dead') this.waiter = null;
    else if (waiter && !this.opts.waiterBlocked() && this.holdsOn(waiter) === 0 && unusedFor(waiter, this.opts.keepaliveMs)) {
      this.waiter = null;
      this.retire(waiter, 'idle waiter session');
    }
    // While something waits, a marker may be on any lock session and LISTEN on home is in use.
    if (!this.opts.waiting()) {
      for (let i = 0; i < this.slots.length; i++) {
        const s = this.live(i);
        if (!s || this.holdsOn(s) > 0 || !unusedFor(s, this.opts.keepaliveMs)) continue;
        const last = this.sessions().length === 1;
        if (last && (this.opts.needed() || !unusedFor(s, this.opts.idleTimeoutMs))) continue;
        this.slots[i] = null;
        this.retire(s, last ? 'idle locker: its last session' : 'lock session holding nothing');
      }
      this.moveHome();
    }
    if (this.sessions().length === 0 && this.reaper) {
      clearInterval(this.reaper);
      this.reaper = null;
    }
  };

  /** Home closed: the next live lock session becomes home, or the waiter session when it holds the locks. */
  private moveHome(): void {
    if (this.live(0)) return;
    for (let i = 1; i < this.slots.length; i++) {
      const s = this.live(i);
      if (!s) continue;
      this.slots[0] = s;
      this.slots[i] = null;
      return;
    }
    const waiter = this.waiter;
    if (waiter && waiter.state.kind !== 'dead' && this.holdsOn(waiter) > 0 && !this.opts.waiterBlocked()) {
      this.slots[0] = waiter;
      this.waiter = null;
    }
  }

  private retire(session: Session, why: string): void {
    session.close(); // it holds nothing: closing loses nothing
    this.opts.logger.debug({ session: session.id }, `pgfence: closed an unused session (${why})`);
  }

  /** Sessions currently open or opening. */
  sessions(): Session[] {
    return [...this.slots, this.waiter].filter((s): s is Session => s !== null && s.state.kind !== 'dead');
  }

  close(): void {
    this.closed = true;
    if (this.reaper) clearInterval(this.reaper);
    this.reaper = null;
    for (const s of this.slots) s?.close();
    this.waiter?.close();
  }
}
