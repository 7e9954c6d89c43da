import type pg from 'pg';
import type { Logger } from '../observe/index.js';
import type { Session } from './session.js';
import type { SessionPool } from './session-pool.js';
import { listenSql, NOTIFY_CHANNEL } from './session-sql.js';

/**
 * LISTEN on the locker's home session (no connection of its own), set up the first time something
 * waits. A release that finds waiters NOTIFYs the key (on NOTIFY_CHANNEL); the pool hands every
 * notification to `notified`, which hands the key to `onRelease`. When home goes (lost, or closed once
 * nothing waits), waiters fall back on their polls until the next `ensure()` LISTENs on the new home.
 */
export class ReleaseListener {
  /** LISTEN in effect (true), failed (false) or on its way, per session. */
  private readonly listening = new WeakMap<Session, Promise<boolean>>();
  private closed = false;

  constructor(
    private readonly sessions: SessionPool,
    private readonly logger: Logger,
    private readonly onRelease: (key: bigint) => void,
  ) {}

  /** A NOTIFY arrived on a session (the pool's `onNotification`). */
  notified(msg: pg.Notification): void {
    if (msg.channel !== NOTIFY_CHANNEL || !msg.payload) return;
    try {
      this.onRelease(BigInt(msg.payload));
    } catch {
      // a payload that is not a key was not sent by pgfence
    }
  }

  /** Resolves true once LISTEN is in effect, false if it could not be set up (waiters then poll). */
  ensure(): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    // Behind a transaction pooler there is no LISTEN by design: waiters poll, and that is no news.
    if (this.sessions.refusal) return Promise.resolve(false);
    let home: Session;
    try {
      home = this.sessions.home();
    } catch {
      return Promise.resolve(false); // closed
    }
    let listening = this.listening.get(home);
    if (!listening) {
      listening = home.statement(listenSql, []).then(
        () => true,
        (err: unknown) => {
          this.listening.delete(home); // the next ensure() tries again (on a new home if this one died)
          if (this.sessions.refusal) this.logger.debug({ err }, 'pgfence: no release listener behind a pooler; waiters poll');
          else this.logger.warn({ err }, 'pgfence: release listener unavailable; waiters poll');
          return false;
        },
      );
      this.listening.set(home, listening);
    }
    return listening;
  }

  close(): void {
    this.closed = true;
  }
}
