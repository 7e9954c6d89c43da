import { PooledConnectionError, withDeadline } from '../core/index.js';
import pg from 'pg';
import { checkOut } from './check-out.js';
import { openPool } from './multi-host.js';
import type { Logger } from '../observe/index.js';
import { clientLike, detectPinning, type Pinning } from './pooler-detection.js';
import type { PinnedSessionSettings } from './server-settings.js';

/** A connection pinned for a long time (a session or the listener) and how to give it back. */
export interface PinnedConnection {
  readonly client: pg.ClientBase;
  /** Ends the connection for good (so the server drops every lock it held). Idempotent. */
  destroy(): void;
}

/**
 * Where the locker's connections come from: a pool it builds itself from connectionString, or the
 * caller's pool, from which it pins connections for its whole lifetime. Short statements (leases,
 * tokens, inspect) also go through `query`.
 */
export class ConnectionSource {
  readonly pool: pg.Pool;
  readonly ownsPool: boolean;
  private readonly pinnedSettings: PinnedSessionSettings | undefined;
  /** How long a connection (a check-out, a pinned session's setup) may take: then LockUnavailableError. */
  readonly connectTimeoutMs: number;
  /** Where pinned connections come from: `pool`, or a pool of directConnectionString's (past a pooler). */
  private readonly pinPool: pg.Pool;
  readonly pinVia: 'connectionString' | 'directConnectionString';
  /** What the first pinned connection showed; null until then. */
  pinning: Pinning | null = null;
  /** Set when pinned connections go through a transaction pooler: every pin is refused with it. */
  refusal: PooledConnectionError | null = null;
  private detecting: Promise<void> | null = null;

  constructor(
    opts: {
      connectionString?: string;
      pool?: pg.Pool;
      /** For pinned connections only, when connectionString/pool goes through a transaction pooler. */
      directConnectionString?: string;
      poolSize: number;
      connectTimeoutMs: number;
      /** Applied to every pinned connection before it is used (dead-client detection, no idle timeouts). */
      pinnedSettings?: PinnedSessionSettings;
    },
    private readonly logger: Logger,
  ) {
    this.pinnedSettings = opts.pinnedSettings;
    this.connectTimeoutMs = opts.connectTimeoutMs;
    if (opts.pool) {
      this.pool = opts.pool;
      this.ownsPool = false;
    } else {
      // A URL or libpq keyword/value settings, one host or several; a bad one throws here, before any I/O.
      this.pool = openPool(opts.connectionString, {
        application_name: 'pgfence',
        max: opts.poolSize,
        connectionTimeoutMillis: opts.connectTimeoutMs,
        idleTimeoutMillis: 30_000,
        keepAlive: true,
      });
      this.ownsPool = true;
      // An idle pooled client that loses its server emits 'error' on the pool; never let it crash the process.
      this.pool.on('error', (err) => this.logger.warn({ err }, 'pgfence: idle pooled connection failed'));
    }
    if (opts.directConnectionString !== undefined) {
      this.pinPool = openPool(opts.directConnectionString, {
        application_name: 'pgfence',
        max: opts.poolSize,
        connectionTimeoutMillis: opts.connectTimeoutMs,
        keepAlive: true,
      });
      this.pinPool.on('error', (err) => this.logger.warn({ err }, 'pgfence: idle pooled connection failed'));
      this.pinVia = 'directConnectionString';
    } else {
      this.pinPool = this.pool;
      this.pinVia = 'connectionString';
    }
  }

  /** True once the first pinned connection showed one backend per connection (no check needed any more). */
  get pinningVerified(): boolean {
    return this.pinning !== null && this.refusal === null;
  }

  /** Once per source: is the pinning pool direct (or a session pool), or a transaction pooler? */
  private checkPinning(client: pg.ClientBase): Promise<void> {
    this.detecting ??= detectPinning(client, () => clientLike(this.pinPool, this.connectTimeoutMs)).then(
      (pinning) => {
        this.pinning = pinning;
        if (pinning === 'transaction-pooled') this.refusal = new PooledConnectionError(this.pinVia);
        else if (pinning === 'session-pooled') this.logger.info({}, 'pgfence: pinned sessions go through a session-mode pooler');
      },
      (err: unknown) => {
        this.detecting = null; // the next connection tries again
        throw err;
      },
    );
    return this.detecting;
  }

  /** Checks a connection out and keeps it; `onError` hears of every error the client emits afterwards. */
  async pin(onError: (err: Error) => void): Promise<PinnedConnection> {
    if (this.refusal) throw this.refusal;
    // Heard from the moment of checkout (see checkOut): a shutdown read with the startup answer is an 'error' event.
    // Bounded as the pool the locker builds is (connectionTimeoutMillis): a caller's pool may have no bound, or never answer.
    const { client } = await checkOut(this.pinPool, onError, this.connectTimeoutMs);
    let destroyed = false;
    const conn: PinnedConnection = {
      client,
      destroy: () => {
        if (destroyed) return;
        destroyed = true;
        // Destroy the socket rather than ending politely: a blackholed peer would never answer.
        const stream = (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream;
        stream?.destroy();
        // Keep a listener: errors can still surface after the pool has let go of the client.
        client.removeListener('error', onError);
        client.on('error', () => {});
        client.release(true);
      },
    };
    if (this.pinning === null || this.refusal) {
      try {
        await withDeadline(this.checkPinning(client), this.connectTimeoutMs, noAnswer(this.connectTimeoutMs));
      } catch (err) {
        conn.destroy();
        throw err;
      }
      if (this.refusal) {
        conn.destroy();
        throw this.refusal;
      }
    }
    if (this.pinnedSettings) {
      try {
        await withDeadline(this.pinnedSettings.apply(client), this.connectTimeoutMs, noAnswer(this.connectTimeoutMs));
      } catch (err) {
        conn.destroy();
        throw err;
      }
    }
    return conn;
  }

  async end(): Promise<void> {
    if (this.pinPool !== this.pool) await this.pinPool.end();
    if (this.ownsPool) await this.pool.end();
  }
}



const noAnswer = (ms: number) => () => new Error(`PostgreSQL did not answer within ${ms} ms`);
