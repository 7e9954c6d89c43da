import type { Session } from '../session/session.js';

/**
 * One kind of lock a locker offers (session locks, leases, semaphores), as the locker sees it. The
 * locker keeps a list of parts and tells each the same facts in turn, rather than wiring each by hand.
 */
export interface LockerPart {
  /** Locks of this part held now. */
  readonly held: number;
  /** Requests of this part waiting now. */
  readonly waiting: number;
  /** A release of `key` was announced: its waiters may try again. */
  onRelease?(key: bigint): void;
  /** A pinned session died: what was held or waited for on it is gone. */
  onSessionLost?(session: Session, err: Error): void;
  /** This locker's server-side locks, by `${pid}:${key}`, with their grant (for inspect). */
  ownLocks?(into: Map<string, Date>): void;
  /** Fails the waiters and gives back what is held. */
  close(): Promise<void>;
}

/** A locker's parts, told every fact in the order they were added. */
export class LockerParts {
  private readonly parts: LockerPart[] = [];

  add<P extends LockerPart>(part: P): P {
    this.parts.push(part);
    return part;
  }

  onRelease(key: bigint): void {
    for (const part of this.parts) part.onRelease?.(key);
  }

  onSessionLost(session: Session, err: Error): void {
    for (const part of this.parts) part.onSessionLost?.(session, err);
  }

  ownLocks(into: Map<string, Date>): void {
    for (const part of this.parts) part.ownLocks?.(into);
  }

  get held(): number {
    let n = 0;
    for (const part of this.parts) n += part.held;
    return n;
  }

  get waiting(): number {
    let n = 0;
    for (const part of this.parts) n += part.waiting;
    return n;
  }

  /** Closes every part at once. */
  async close(): Promise<void> {
    await Promise.all(this.parts.map((part) => part.close()));
  }
}
