import pg from 'pg';
import type { Logger } from '../observe/logger.js';
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
  private readonly connectTimeoutMs: number;

  constructor(
    opts: {
      connectionString?: string;
      pool?: pg.Pool;
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
      this.pool = new pg.Pool({
        connectionString: opts.connectionString,
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
  }

  /** Checks a connection out and keeps it; `onError` hears of every error the client emits afterwards. */
  async pin(onError: (err: Error) => void): Promise<PinnedConnection> {
    const client = await this.pool.connect();
    let destroyed = false;
    client.on('error', onError);
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
    if (this.pinnedSettings) {
      try {
        await withDeadline(this.pinnedSettings.apply(client), this.connectTimeoutMs);
      } catch (err) {
        conn.destroy();
        throw err;
      }
    }
    return conn;
  }

  async end(): Promise<void> {
    if (this.ownsPool) await this.pool.end();
  }
}

function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`PostgreSQL did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Is this error the end of the connection (rather than a failed statement on a live one)? */
export function isConnectionError(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return true;
  const e = err as { code?: unknown; severity?: unknown };
  if (typeof e.severity !== 'string') return true; // socket errors, "Connection terminated", timeouts
  const code = typeof e.code === 'string' ? e.code : '';
  return code.startsWith('08') || code.startsWith('57P') || e.severity === 'FATAL' || e.severity === 'PANIC';
}
