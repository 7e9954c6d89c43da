import { LockerClosedError } from '../core/index.js';
import type { Logger } from '../observe/index.js';
import type { ConnectionSource } from './connection-source.js';
import type { OpStatements } from './op-statements.js';
import { Session, type StatementText } from './session.js';

/**
 * A session holding this many locks is heavy: single acquires keep off it while a lighter one exists.
 * PostgreSQL walks a backend's whole local lock table at the end of every statement, so a session
 * holding thousands of locks makes each of its statements slower.
 */
export const HEAVY_HOLDS = 256;
/** Lock tries placed in one synchronous run (one tick) beyond this many are a burst: they go to the bulk slot. */
export const BURST = 64;
/** A waiter session with nothing to do for this many keepalive periods is closed (opened again on need). */
export const WAITER_IDLE_PERIODS = 6;

/**
 * A fixed number of session slots. A key maps to a slot by its low bits, so a key's lock, its waiter
 * marker and the probe of that marker live on one backend (a backend's own locks never conflict with
 * each other). The last slot is also the bulk slot: acquireAll and bursts of acquires (more than BURST
 * in one tick, as when thousands are taken at once) put their locks there, and a single acquire whose
 * slot holds HEAVY_HOLDS or more goes to the lightest slot instead, so that a few sessions holding
 * thousands of locks do not slow every other acquire (with maxSessions 1 everything shares the one).
 * A key that has a marker is tried where its marker is (the lock manager sees to that). A dead session
 * is replaced the next time its slot is used.
 *
 * The waiter session is opened together with the first lock session, so a first contended acquire
 * does not connect on its way into PostgreSQL's queue; it is closed again after WAITER_IDLE_PERIODS
 * keepalive periods without use.
 */
export class SessionPool {
  private readonly slots: (Session | null)[];
  /** The session that blocks in pg_advisory_lock for one contended key at a time (PostgreSQL's FIFO queue). */
  private waiter: Session | null = null;
  /** performance.now() when the waiter session was last seen in use. */
  private waiterUsedAt = 0;
  private waiterIdleTimer: NodeJS.Timeout | null = null;
  private nextId = 1;
  private closed = false;
  /** Locks held per session id (the lock manager's handles), for placement. */
  private readonly holds = new Map<number, number>();
  /** Lock tries placed in the current synchronous run (reset at the next microtask). */
  private placedNow = 0;
  /** Whether the lock manager uses the waiter session now: a wait blocked on it, or a lock granted there. */
  waiterInUse: () => boolean = () => false;

  constructor(
    private readonly source: ConnectionSource,
    /** `statements`: what the sessions run (the owner's operations; see OpStatements). */
    private readonly opts: {
      size: number;
      keepaliveMs: number;
      deadlineMs: number;
      logger: Logger;
      statements: OpStatements;
      /** Run on a new waiter session ahead of its first wait (what a first wait would otherwise pay after its grant). */
      warmWaiter?: StatementText;
    },
    private readonly onLost: (session: Session, err: Error) => void,
  ) {
    this.slots = new Array<Session | null>(opts.size).fill(null);
  }

  slotOf(key: bigint): number {
    // Keys are hashes (or caller-chosen integers): the low bits spread them well enough.
    return Number(key & 0xffffn) % this.slots.length;
  }

  /** The live (or connecting) session of the key's slot, opening a new one if needed. */
  sessionFor(key: bigint): Session {
    return this.slotSession(this.slotOf(key));
  }

  /**
   * Where a session lock of `key` is tried: the bulk slot for acquireAll and bursts, else the key's
   * slot unless it is heavy, then the lightest. Opening a lock session opens the waiter session alongside.
   */
  lockSessionFor(key: bigint, bulk: boolean): Session {
    const n = this.slots.length;
    if (this.placedNow++ === 0) queueMicrotask(this.endRun);
    const many = bulk || this.placedNow > BURST;
    let slot = n === 1 ? 0 : many ? n - 1 : this.slotOf(key);
    if (n > 1 && !many && this.holdsOf(slot) >= HEAVY_HOLDS) slot = this.lightestSlot();
    const current = this.slots[slot];
    if (current && current.state !== 'dead') return current;
    const session = this.slotSession(slot);
    if (!this.waiter || this.waiter.state === 'dead') this.openWaiter();
    return session;
  }

  /** The lock manager's count of locks held on a session changed by `delta`. */
  noteHolds(sessionId: number, delta: number): void {
    const n = (this.holds.get(sessionId) ?? 0) + delta;
    if (n > 0) this.holds.set(sessionId, n);
    else this.holds.delete(sessionId);
  }

  private holdsOf(slot: number): number {
    const session = this.slots[slot];
    return session && session.state !== 'dead' ? (this.holds.get(session.id) ?? 0) : 0;
  }

  private lightestSlot(): number {
    let best = 0;
    for (let i = 1; i < this.slots.length; i++) if (this.holdsOf(i) < this.holdsOf(best)) best = i;
    return best;
  }

  private readonly endRun = (): void => {
    this.placedNow = 0;
  };

  private slotSession(slot: number): Session {
    const current = this.slots[slot];
    if (current && current.state !== 'dead') return current;
    const session = this.open();
    this.slots[slot] = session;
    return session;
  }

  /** The waiter session, opening a new one if needed. */
  waiterSession(): Session {
    this.waiterUsedAt = performance.now();
    if (this.waiter && this.waiter.state !== 'dead') return this.waiter;
    return this.openWaiter();
  }

  isWaiterSession(session: Session | null): boolean {
    return session !== null && session === this.waiter;
  }

  /**
   * The waiter session when it is open and the lock manager does not use it (for background writes such
   * as lock names, which then need no connection of their own), else null.
   */
  idleWaiter(): Session | null {
    const waiter = this.waiter;
    if (!waiter || waiter.state === 'dead' || this.waiterInUse()) return null;
    this.waiterUsedAt = performance.now();
    return waiter;
  }

  private openWaiter(): Session {
    this.waiter = this.open();
    const warm = this.opts.warmWaiter;
    // Only a warm-up: a first wait pays for it instead (a dead session is reported as lost anyway).
    if (warm) this.waiter.statement(warm, []).catch((err) => this.opts.logger.debug({ err }, 'pgfence: waiter session warm-up failed'));
    this.waiterUsedAt = performance.now();
    this.waiterIdleTimer ??= setInterval(this.closeIdleWaiter, this.opts.keepaliveMs);
    this.waiterIdleTimer.unref();
    return this.waiter;
  }

  /** Closes the waiter session once it has not been used for WAITER_IDLE_PERIODS keepalive periods. */
  private readonly closeIdleWaiter = (): void => {
    const waiter = this.waiter;
    const now = performance.now();
    if (!waiter || waiter.state === 'dead') {
      if (this.waiterIdleTimer) clearInterval(this.waiterIdleTimer);
      this.waiterIdleTimer = null;
      return;
    }
    if (this.waiterInUse()) this.waiterUsedAt = now;
    else if (now - this.waiterUsedAt >= WAITER_IDLE_PERIODS * this.opts.keepaliveMs) {
      this.waiter = null;
      waiter.close(); // it holds nothing: closing loses nothing
      this.opts.logger.debug({ session: waiter.id }, 'pgfence: idle waiter session closed');
    }
  };

  /** Interrupts the statement a session is running (a blocking wait), from another connection. */
  async cancel(session: Session): Promise<void> {
    const pid = session.processId;
    if (pid === null) return;
    // Without the cancel the wait still ends, at its lock_timeout (or with its session).
    await this.source.pool
      .query('SELECT pg_cancel_backend($1)', [pid])
      .catch((err) => this.opts.logger.debug({ err, session: session.id }, 'pgfence: could not cancel a blocking wait; it ends at its lock_timeout'));
  }

  private open(): Session {
    if (this.closed) throw new LockerClosedError();
    return new Session({
      id: this.nextId++,
      source: this.source,
      keepaliveMs: this.opts.keepaliveMs,
      deadlineMs: this.opts.deadlineMs,
      logger: this.opts.logger,
      statements: this.opts.statements,
      onLost: this.onLost,
    });
  }

  /** Sessions currently open or opening. */
  live(): Session[] {
    return [...this.slots, this.waiter].filter((s): s is Session => s !== null && s.state !== 'dead');
  }

  close(): void {
    this.closed = true;
    if (this.waiterIdleTimer) clearInterval(this.waiterIdleTimer);
    this.waiterIdleTimer = null;
    for (const s of this.slots) s?.close();
    this.waiter?.close();
  }
}
