import type pg from 'pg';
import { describeType, InvalidArgumentError } from './core/index.js';
import { nameToBytes } from './keys.js';
import { jsonSafeLogger, type Logger, type Meter, silentLogger } from './observe/index.js';
import { durationMs, optionKeys, optionsObject, positiveInteger } from './options.js';

export interface LockerOptions {
  /**
   * A PostgreSQL URL or libpq keyword/value settings; the locker builds its own pool from it. Several
   * hosts (`postgresql://h1:5432,h2:5432/db?target_session_attrs=read-write`) send every new
   * connection to the current primary. What it leaves out comes from the PG* environment; without it
   * (and without `pool`), the PG* environment says where the database is, as for node-postgres and psql.
   */
  connectionString?: string;
  /**
   * Or a pool to pin the locker's connections from, for the locker's lifetime. Each check-out waits at
   * most the probe deadline (max(2 x keepaliveMs, 2000) ms), as the locker's own pool does, whatever the
   * pool's connectionTimeoutMillis: past it the call fails with LockUnavailableError, and a connection
   * that arrives later goes straight back to the pool.
   */
  pool?: pg.Pool;
  /**
   * For the locker's pinned sessions (session locks, semaphores, the waiter, the listener) when
   * connectionString/pool goes through a transaction pooler such as PgBouncer: a URL straight to
   * PostgreSQL (or a session-mode pool). Without it, session locks behind a transaction pooler are
   * refused with PGFENCE_POOLED_CONNECTION.
   */
  directConnectionString?: string;
  /** Prefix of every lock name (hashed together with it). */
  namespace?: string;
  /** Pinned connections for session locks; default 2. */
  maxSessions?: number;
  /**
   * Lock-table budget: the most advisory locks this locker holds or waits for at once; beyond it an
   * acquisition is refused (PGFENCE_LOCK_BUDGET) before touching the server. Default: a quarter of the
   * server's lock table, max_locks_per_transaction x (max_connections + max_prepared_transactions).
   */
  maxHeldLocks?: number;
  /**
   * A locker holding and waiting for nothing closes its last connection after this long unused
   * (opened again on the next call); default 30000. Infinity keeps it open.
   */
  idleTimeoutMs?: number;
  /** Loss-detection cadence; default 5000. Probes get max(2 x keepaliveMs, 2000 ms) to answer. */
  keepaliveMs?: number;
  /** Default acquire wait; default 10000. */
  defaultTimeoutMs?: number;
  logger?: Logger;
  /** An @opentelemetry/api Meter. */
  meter?: Meter;
}
const LOCKER_OPTION_KEYS = optionKeys<LockerOptions>({
  connectionString: true,
  pool: true,
  directConnectionString: true,
  namespace: true,
  maxSessions: true,
  maxHeldLocks: true,
  idleTimeoutMs: true,
  keepaliveMs: true,
  defaultTimeoutMs: true,
  logger: true,
  meter: true,
});

/** createLocker's options, checked, with their defaults filled in. */
export interface ResolvedLockerOptions {
  connectionString: string | undefined;
  pool: pg.Pool | undefined;
  directConnectionString: string | undefined;
  namespace: string | undefined;
  maxSessions: number;
  /** undefined: a share of the server's lock table, learnt from the first session. */
  maxHeldLocks: number | undefined;
  idleTimeoutMs: number;
  keepaliveMs: number;
  /** How long a probe, a statement or a connect may take before its session counts as lost. */
  deadlineMs: number;
  defaultTimeoutMs: number;
  logger: Logger;
  meter: Meter | undefined;
}

export function resolveLockerOptions(options: LockerOptions | undefined): ResolvedLockerOptions {
  const o = optionsObject<LockerOptions>(options, 'createLocker options', LOCKER_OPTION_KEYS);
  // Neither: the PG* environment (PGHOST, PGUSER, PGDATABASE, ...), as node-postgres and psql read it.
  if (o.connectionString !== undefined && o.pool !== undefined) {
    throw new InvalidArgumentError('createLocker options', 'pass connectionString or pool, not both (or neither, for the PG* environment)');
  }
  if (o.connectionString !== undefined && (typeof o.connectionString !== 'string' || o.connectionString.trim() === '')) {
    // node-postgres would quietly fall back to localhost and the PG* environment for a blank one.
    throw new InvalidArgumentError('connectionString', `expected a PostgreSQL URL, got ${describeType(o.connectionString)}`);
  }
  if (o.pool !== undefined && (typeof o.pool !== 'object' || o.pool === null || typeof o.pool.connect !== 'function')) {
    throw new InvalidArgumentError('pool', `expected a pg.Pool, got ${describeType(o.pool)}`);
  }
  if (o.directConnectionString !== undefined && (typeof o.directConnectionString !== 'string' || o.directConnectionString === '')) {
    throw new InvalidArgumentError('directConnectionString', `expected a PostgreSQL URL, got ${describeType(o.directConnectionString)}`);
  }
  if (o.namespace !== undefined) nameToBytes('namespace', o.namespace);
  const keepaliveMs = o.keepaliveMs === undefined ? 5000 : durationMs(o.keepaliveMs, 'keepaliveMs', { min: 10 });
  const idleTimeoutMs = o.idleTimeoutMs === undefined ? 30_000 : durationMs(o.idleTimeoutMs, 'idleTimeoutMs', { allowInfinity: true });
  const maxSessions = o.maxSessions === undefined ? 2 : positiveInteger(o.maxSessions, 'maxSessions', 64);
  const defaultTimeoutMs =
    o.defaultTimeoutMs === undefined ? 10_000 : durationMs(o.defaultTimeoutMs, 'defaultTimeoutMs', { allowInfinity: true });
  const logger = checkLogger(o.logger);
  if (o.meter !== undefined && (typeof o.meter !== 'object' || typeof o.meter?.createHistogram !== 'function')) {
    throw new InvalidArgumentError('meter', 'expected an @opentelemetry/api Meter');
  }
  return {
    connectionString: o.connectionString,
    pool: o.pool,
    directConnectionString: o.directConnectionString,
    namespace: o.namespace,
    maxSessions,
    maxHeldLocks: o.maxHeldLocks === undefined ? undefined : positiveInteger(o.maxHeldLocks, 'maxHeldLocks', 100_000_000),
    idleTimeoutMs,
    keepaliveMs,
    deadlineMs: Math.max(2 * keepaliveMs, 2000),
    defaultTimeoutMs,
    logger,
    meter: o.meter,
  };
}

function checkLogger(logger: unknown): Logger {
  if (logger === undefined) return silentLogger;
  const l = logger as Partial<Logger>;
  for (const level of ['debug', 'info', 'warn', 'error'] as const) {
    if (typeof l?.[level] !== 'function') {
      throw new InvalidArgumentError('logger', `expected a pino/console-shaped logger with a ${level}() method`);
    }
  }
  return jsonSafeLogger(l as Logger);
}
