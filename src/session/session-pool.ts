import type { Logger } from '../observe/logger.js';
import type { ConnectionSource } from './connection-source.js';
import { Session } from './session.js';

/**
 * A fixed number of session slots. A key always maps to the same slot, so a key's lock, its waiter
 * marker and the probe of that marker all live on one backend (a backend's own locks never conflict
 * with each other). A dead session is replaced the next time its slot is used.
 */
export class SessionPool {
  private readonly slots: (Session | null)[];
  private nextId = 1;
  private closed = false;

  constructor(
    private readonly source: ConnectionSource,
    private readonly opts: { size: number; keepaliveMs: number; deadlineMs: number; logger: Logger },
    private readonly onLost: (session: Session, err: Error) => void,
  ) {
    this.slots = new Array<Session | null>(opts.size).fill(null);
  }

  slotOf(key: bigint): number {
    // Keys are hashes (or caller-chosen integers): the low bits spread them well enough.
    return Number(BigInt.asUintN(32, key) % BigInt(this.slots.length));
  }

  /** The live (or connecting) session of the key's slot, opening a new one if needed. */
  sessionFor(key: bigint): Session {
    const slot = this.slotOf(key);
    const current = this.slots[slot];
    if (current && current.state !== 'dead') return current;
    if (this.closed) throw new Error('session pool closed');
    const session = new Session({
      id: this.nextId++,
      source: this.source,
      keepaliveMs: this.opts.keepaliveMs,
      deadlineMs: this.opts.deadlineMs,
      logger: this.opts.logger,
      onLost: this.onLost,
    });
    this.slots[slot] = session;
    return session;
  }

  /** The key's session as it is now (possibly dead), without opening one. */
  peek(key: bigint): Session | null {
    return this.slots[this.slotOf(key)] ?? null;
  }

  /** Sessions currently open or opening. */
  live(): Session[] {
    return this.slots.filter((s): s is Session => s !== null && s.state !== 'dead');
  }

  close(): void {
    this.closed = true;
    for (const s of this.slots) s?.close();
  }
}
