import { withDeadline } from '../core/index.js';
import type pg from 'pg';
import type { Logger } from '../observe/index.js';
import type { ConnectionSource, PinnedConnection } from './connection-source.js';

/** The channel releases NOTIFY when someone waits (the payload is the key); the listener LISTENs on it. */
export const NOTIFY_CHANNEL = 'pgfence_release';

/**
 * One LISTEN connection per locker, opened the first time something waits. A release that finds
 * waiters NOTIFYs the key; the listener hands it to `onRelease`. If the connection fails, waiters
 * fall back on their polls until the next `ensure()` opens a new one.
 */
export class ReleaseListener {
  private conn: PinnedConnection | null = null;
  private opening: Promise<boolean> | null = null;
  private keepaliveTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly source: ConnectionSource,
    private readonly opts: { keepaliveMs: number; deadlineMs: number; logger: Logger },
    private readonly onRelease: (key: bigint) => void,
  ) {}

  /** Resolves true once LISTEN is in effect, false if it could not be set up (waiters then poll). */
  ensure(): Promise<boolean> {
    if (this.conn) return Promise.resolve(true);
    if (this.closed) return Promise.resolve(false);
    this.opening ??= this.open().finally(() => {
      this.opening = null;
    });
    return this.opening;
  }

  private async open(): Promise<boolean> {
    let conn: PinnedConnection | null = null;
    try {
      conn = await this.source.pin((err) => this.fail(conn, err));
      const client = conn.client as pg.Client;
      client.on('notification', (msg) => {
        if (msg.channel !== NOTIFY_CHANNEL || !msg.payload) return;
        try {
          this.onRelease(BigInt(msg.payload));
        } catch {
          // a payload that is not a key was not sent by pgfence
        }
      });
      client.once('end', () => this.fail(conn, new Error('listener connection ended')));
      await withDeadline(client.query(`LISTEN ${NOTIFY_CHANNEL}`), this.opts.deadlineMs, () => new Error(`no answer within ${this.opts.deadlineMs} ms`));
      if (this.closed) {
        conn.destroy();
        return false;
      }
      this.conn = conn;
      this.armKeepalive();
      return true;
    } catch (err) {
      // Behind a transaction pooler there is no LISTEN by design: waiters poll, and that is no news.
      if ((err as { code?: unknown }).code === 'PGFENCE_POOLED_CONNECTION') this.opts.logger.debug({ err }, 'pgfence: no release listener behind a pooler; waiters poll');
      else this.opts.logger.warn({ err }, 'pgfence: release listener unavailable; waiters poll');
      conn?.destroy();
      return false;
    }
  }

  private armKeepalive(): void {
    let probing = false;
    this.keepaliveTimer = setInterval(() => {
      const conn = this.conn;
      // One probe at a time: an unanswered one fails at its deadline (a query sent while the client still
      // executes another is deprecated by node-postgres, and gone in pg 9).
      if (!conn || probing) return;
      probing = true;
      withDeadline(conn.client.query('SELECT 1'), this.opts.deadlineMs, () => new Error(`no answer within ${this.opts.deadlineMs} ms`))
        .catch((err) => this.fail(conn, err))
        .finally(() => (probing = false));
    }, this.opts.keepaliveMs);
    this.keepaliveTimer.unref();
  }

  private fail(conn: PinnedConnection | null, err: Error): void {
    if (!conn || this.conn !== conn) {
      conn?.destroy();
      return;
    }
    this.opts.logger.warn({ err }, 'pgfence: release listener lost; waiters poll until it is back');
    this.conn = null;
    if (this.keepaliveTimer) clearInterval(this.keepaliveTimer);
    conn.destroy();
  }

  close(): void {
    this.closed = true;
    if (this.keepaliveTimer) clearInterval(this.keepaliveTimer);
    this.conn?.destroy();
    this.conn = null;
  }
}

