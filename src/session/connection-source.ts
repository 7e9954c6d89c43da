import pg from 'pg';
import { openPool } from './multi-host.js';
import type { Logger } from '../observe/logger.js';

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

  constructor(
    opts: { connectionString?: string; pool?: pg.Pool; poolSize: number; connectTimeoutMs: number },
    private readonly logger: Logger,
  ) {
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
  }

  /** Checks a connection out and keeps it; `onError` hears of every error the client emits afterwards. */
  async pin(onError: (err: Error) => void): Promise<PinnedConnection> {
    const client = await this.pool.connect();
    let destroyed = false;
    client.on('error', onError);
    return {
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
  }

  async end(): Promise<void> {
    if (this.ownsPool) await this.pool.end();
  }
}

/** Is this error the end of the connection (rather than a failed statement on a live one)? */
export function isConnectionError(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return true;
  const e = err as { code?: unknown; severity?: unknown };
  if (typeof e.severity !== 'string') return true; // socket errors, "Connection terminated", timeouts
  const code = typeof e.code === 'string' ? e.code : '';
  return code.startsWith('08') || code.startsWith('57P') || e.severity === 'FATAL' || e.severity === 'PANIC';
}
