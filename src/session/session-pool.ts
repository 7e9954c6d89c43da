import { LockerClosedError } from '../core/index.js';
import type { Logger } from '../observe/index.js';
import type { ConnectionSource } from './connection-source.js';
import type { OpStatements } from './op-statements.js';
import { Session } from './session.js';

/**
 * A fixed number of session slots. A key always maps to the same slot, so a key's lock, its waiter
 * marker and the probe of that marker all live on one backend (a backend's own locks never conflict
 * with each other). A dead session is replaced the next time its slot is used.
 */
export class SessionPool {
  private readonly slots: (Session | null)[];
  /** The session that blocks in pg_advisory_lock for one contended key at a time (PostgreSQL's FIFO queue). */
  private waiter: Session | null = null;
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly source: ConnectionSource,
    /** `statements`: what the sessions run (the owner's operations; see OpStatements). */
    private readonly opts: { size: number; keepaliveMs: number; deadlineMs: number; logger: Logger; statements: OpStatements },
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
    const slot = this.slotOf(key);
    const current = this.slots[slot];
    if (current && current.state !== 'dead') return current;
    const session = this.open();
    this.slots[slot] = session;
    return session;
  }

  /** The waiter session, opening a new one if needed. */
  waiterSession(): Session {
    if (this.waiter && this.waiter.state !== 'dead') return this.waiter;
    this.waiter = this.open();
    return this.waiter;
  }

  isWaiterSession(session: Session | null): boolean {
    return session !== null && session === this.waiter;
  }

  /** Interrupts the statement a session is running (a blocking wait), from another connection. */
  async cancel(session: Session): Promise<void> {
    const pid = session.processId;
    if (pid === null) return;
    await this.source.pool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => {});
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

  /** The key's session as it is now (possibly dead), without opening one. */
  peek(key: bigint): Session | null {
    return this.slots[this.slotOf(key)] ?? null;
  }

  /** Sessions currently open or opening. */
  live(): Session[] {
    return [...this.slots, this.waiter].filter((s): s is Session => s !== null && s.state !== 'dead');
  }

  close(): void {
    this.closed = true;
    for (const s of this.slots) s?.close();
    this.waiter?.close();
  }
}
