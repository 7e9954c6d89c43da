import { bigintAsString } from './json.js';
import { isSchemaMissing, sqlState, SQLSTATE } from './sqlstate.js';
import type { LockKind, LockLostReason } from './vocabulary.js';

/** Every `code` a PgfenceError can carry, for exhaustive switches (also at run time, for checks). */
export const PGFENCE_ERROR_CODES = [
  // Locks
  'PGFENCE_LOCK_TIMEOUT',
  'PGFENCE_LOCK_LOST',
  'PGFENCE_NESTED_LOCK',
  'PGFENCE_NOT_IN_TRANSACTION',
  'PGFENCE_TRANSACTION_ABORTED',
  'PGFENCE_DEADLOCK',
  'PGFENCE_STALE_TOKEN',
  'PGFENCE_TOKENS_EXHAUSTED',
  'PGFENCE_INVALID_ARGUMENT',
  'PGFENCE_CLOSED',
  'PGFENCE_RESIGNED',
  // The database
  'PGFENCE_UNAVAILABLE',
  'PGFENCE_POOLED_CONNECTION',
  'PGFENCE_LOCK_BUDGET',
  'PGFENCE_LOCK_TABLE_FULL',
  'PGFENCE_NOT_MIGRATED',
  // Migrations
  'PGFENCE_MIGRATION_EDITED',
  'PGFENCE_MIGRATION_FAILED',
  'PGFENCE_MIGRATION_INVALID',
  'PGFENCE_MIGRATION_LOCK_TIMEOUT',
  // pgfence/pg-boss
  'PGFENCE_KEY_BUSY',
  'PGFENCE_JOB_EXPIRED',
  'PGFENCE_BOSS_STOPPED',
  'PGFENCE_JOB_ABORTED',
  'PGFENCE_BATCH_UNSETTLED',
] as const;
export type PgfenceErrorCode = (typeof PGFENCE_ERROR_CODES)[number];

/**
 * Every error pgfence throws is a PgfenceError with a stable `code`, so callers can branch on
 * `err.code` (or `instanceof`) without parsing messages.
 */
export class PgfenceError extends Error {
  readonly code: PgfenceErrorCode;
  constructor(code: PgfenceErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }

  /**
   * JSON loggers serialise errors too: keys and tokens (bigints) become strings.
   *
   * @example
   * ```ts fragment
   * try {
   *   await locker.acquire('order:123', { timeoutMs: 0 });
   * } catch (err) {
   *   console.log(JSON.stringify(err)); // {"name":"LockTimeoutError","code":"PGFENCE_LOCK_TIMEOUT",...,"key":"-2046217617591970219"}
   * }
   * ```
   */
  toJSON(): Record<string, unknown> {
    const out: Record<string, unknown> = { name: this.name, code: this.code, message: this.message };
    for (const [k, v] of Object.entries(this)) out[k] = bigintAsString(k, v);
    return out;
  }
}

/** The wait for a lock outlasted its timeoutMs. */
export class LockTimeoutError extends PgfenceError {
  declare readonly code: 'PGFENCE_LOCK_TIMEOUT';
  readonly lockName: string | null;
  readonly key: bigint;
  readonly timeoutMs: number;
  /** What was waited for: a session lock, a transaction lock, a lease, a semaphore permit, a leader's lock. */
  readonly kind: LockKind;
  /** `call` names the method when its fix differs from its kind's (acquireAll has no try variant). */
  constructor(lockName: string | null, key: bigint, timeoutMs: number, kind: LockKind = 'lock', call?: 'acquireAll') {
    super(
      'PGFENCE_LOCK_TIMEOUT',
      `${kindOf(kind, lockName, key)} was not acquired within ${timeoutMs} ms; raise timeoutMs${call === 'acquireAll' ? '' : `, or ${TIMEOUT_FIX[kind]}`}`,
    );
    this.lockName = lockName;
    this.key = key;
    this.timeoutMs = timeoutMs;
    this.kind = kind;
  }
}

/** The call that skips the work instead of waiting, for each kind (the fix a LockTimeoutError names). */
const TIMEOUT_FIX: Record<LockKind, string> = {
  lock: 'use tryAcquire() or tryWithLock() to skip work when the lock is busy',
  xact: 'use tryXactLock() to skip work when the lock is busy',
  lease: 'use tryLease() or tryWithLease() to skip work when the lease is held',
  semaphore: "use the semaphore's tryAcquire() to skip work when every permit is taken",
  leader: "the election retries by itself: wait for 'elected'",
};

/** A lock described with its kind: `lease "x" (key 42)`, `a permit of semaphore "x" (key 42)`. */
function kindOf(kind: LockKind, name: string | null, key: bigint | null): string {
  const lock = describeLock(name, key);
  if (kind === 'semaphore') return `a permit of semaphore ${lock}`;
  return `${{ lock: 'lock', xact: 'transaction lock', lease: 'lease', leader: "leader's lock" }[kind]} ${lock}`;
}

/**
 * A held lock was lost: its session died, its TTL ran out, or its lease was taken over. A callback
 * helper (withLock, withLease, withPermit, ...) rejects with one when the lock was lost before its
 * callback settled, with what the callback resolved with as `value`.
 */
export class LockLostError extends PgfenceError {
  declare readonly code: 'PGFENCE_LOCK_LOST';
  readonly lockName: string | null;
  readonly key: bigint;
  readonly reason: LockLostReason;
  /**
   * Set (possibly to undefined) by a callback helper whose callback resolved although the lock was lost
   * before it settled: its result, of work that did not hold the lock to its end. Left out of toJSON
   * (it is the caller's value, of any shape).
   */
  declare readonly value?: unknown;
  constructor(lockName: string | null, key: bigint, reason: LockLostReason, options?: { cause?: unknown; value?: unknown }) {
    const inCallback = options !== undefined && 'value' in options;
    super(
      'PGFENCE_LOCK_LOST',
      `lock ${describeLock(lockName, key)} was lost (${reason})` +
        (inCallback
          ? " before its callback settled: the callback's work did not hold the lock to its end (its result is this error's value)"
          : '; stop work that relies on it'),
      { cause: options?.cause },
    );
    this.lockName = lockName;
    this.key = key;
    this.reason = reason;
    if (inCallback) Object.defineProperty(this, 'value', { value: options.value, enumerable: false });
  }
}

/**
 * A request would wait inside a callback of the same locker where waiting can deadlock: for a lock or
 * a lease inside any callback, for anything inside a semaphore permit's (see the nesting rules).
 */
export class NestedLockError extends PgfenceError {
  declare readonly code: 'PGFENCE_NESTED_LOCK';
  constructor(
    lockName: string | null,
    key: bigint,
    heldName: string | null,
    heldKey: bigint,
    /** What was asked for ('lock' by default), what the callback holds, and who runs it (default "a callback"). */
    opts: { kind?: 'lock' | 'lease' | 'semaphore'; heldKind?: LockKind; context?: string } = {},
  ) {
    const kind = opts.kind ?? 'lock';
    // A permit's key is its slot's: the semaphore's name says more.
    const held = kindOf(opts.heldKind ?? 'lock', heldName, opts.heldKind === 'semaphore' && heldName !== null ? null : heldKey);
    // acquireAll takes session locks only: a permit or a lease is taken outside the callback instead.
    const fix = {
      lock: 'take both with acquireAll(), or use tryAcquire() (a try never waits)',
      lease: 'take the lease outside it, or use tryLease() (a try never waits)',
      semaphore: "take the permit outside it, or use the semaphore's tryAcquire() (a try never waits)",
    }[kind];
    super(
      'PGFENCE_NESTED_LOCK',
      `${kindOf(kind, lockName, key)} was requested inside ${opts.context ?? 'a callback'}, which holds ${held}; waiting there can deadlock: ` +
        `${fix}, or pass { allowNested: true } to the inner call if every caller takes them in this order`,
    );
  }
}

/** A transaction-scoped lock was requested on a connection that is not inside a transaction. */
export class NotInTransactionError extends PgfenceError {
  declare readonly code: 'PGFENCE_NOT_IN_TRANSACTION';
  constructor() {
    super(
      'PGFENCE_NOT_IN_TRANSACTION',
      'xactLock() needs an open transaction (an autocommit transaction lock would be released at once); ' +
        "call it after BEGIN, or inside your data layer's transaction callback (Kysely: db.transaction().execute(); postgres.js: sql.begin(); " +
        'Prisma: prisma.$transaction(); Drizzle: db.transaction(); TypeORM: dataSource.transaction(); Knex: knex.transaction())',
    );
  }
}

/**
 * A transaction-scoped lock was requested in a transaction that an earlier statement already failed
 * (SQLSTATE 25P02): nothing runs in it any more. Roll it back (and retry in a new one).
 */
export class TransactionAbortedError extends PgfenceError {
  declare readonly code: 'PGFENCE_TRANSACTION_ABORTED';
  constructor(options?: { cause?: unknown }) {
    super(
      'PGFENCE_TRANSACTION_ABORTED',
      'the transaction is aborted (an earlier statement in it failed): ROLLBACK it, then take the lock in a new transaction',
      options,
    );
  }
}

/** A guarded write carried a fencing token older than the one the row has already seen. */
export class StaleTokenError extends PgfenceError {
  declare readonly code: 'PGFENCE_STALE_TOKEN';
  readonly token: bigint;
  readonly currentToken: bigint | undefined;
  constructor(token: bigint, currentToken: bigint | undefined, message?: string) {
    super(
      'PGFENCE_STALE_TOKEN',
      message ?? `fencing token ${token} is older than ${currentToken ?? 'the current one'}; another holder took over`,
    );
    this.token = token;
    this.currentToken = currentToken;
  }
}

/**
 * An argument was rejected: before any I/O, or (with the server's error as the cause) when it names
 * something the database does not have, such as a guarded write's table.
 */
export class InvalidArgumentError extends PgfenceError {
  declare readonly code: 'PGFENCE_INVALID_ARGUMENT';
  readonly argument: string;
  constructor(argument: string, message: string, options?: { cause?: unknown }) {
    super('PGFENCE_INVALID_ARGUMENT', `${argument}: ${message}`, options);
    this.argument = argument;
  }
}

/** The database could not be reached (connection refused, timed out, or the session died). */
export class LockUnavailableError extends PgfenceError {
  declare readonly code: 'PGFENCE_UNAVAILABLE';
  constructor(message: string, options?: { cause?: unknown }) {
    super('PGFENCE_UNAVAILABLE', message, options);
  }
}

/**
 * The locker was closed (or is closing): nothing can be acquired through it any more. Not an outage:
 * the database may be fine, the caller's own locker is shut.
 */
export class LockerClosedError extends PgfenceError {
  declare readonly code: 'PGFENCE_CLOSED';
  constructor(message = 'the locker is closed', options?: { cause?: unknown }) {
    super('PGFENCE_CLOSED', message, options);
  }
}

/** PostgreSQL broke a deadlock by failing this lock request (SQLSTATE 40P01). */
export class DeadlockError extends PgfenceError {
  declare readonly code: 'PGFENCE_DEADLOCK';
  constructor(lockName: string | null, key: bigint, options?: { cause?: unknown }) {
    super(
      'PGFENCE_DEADLOCK',
      `PostgreSQL detected a deadlock while waiting for ${describeLock(lockName, key)}; take locks in one order (acquireAll sorts them) and retry the transaction`,
      options,
    );
  }
}

export function describeLock(name: string | null, key: bigint | null): string {
  if (name === null) return `key ${key}`;
  const quoted = `"${name.length > 80 ? `${name.slice(0, 77)}...` : name}"`;
  return key === null ? quoted : `${quoted} (key ${key})`;
}

/**
 * The error for a statement that failed for a reason pgfence knows: it needed pgfence's schema
 * (undefined function, schema or table), or a key's fencing tokens are exhausted. Null otherwise.
 */
export function schemaMissingError(err: unknown): PgfenceError | null {
  const code = sqlState(err);
  if (code === SQLSTATE.outOfSharedMemory) return new LockTableFullError({ cause: err });
  if (code === SQLSTATE.tokensExhausted) {
    return new PgfenceError('PGFENCE_TOKENS_EXHAUSTED', `${(err as Error).message}; use another lock name`, { cause: err });
  }
  if (!isSchemaMissing(err)) return null;
  return new PgfenceError(
    'PGFENCE_NOT_MIGRATED',
    "this needs pgfence's schema (fencing tokens, leases): run migrate() or `pgfence migrate` against this database first",
    { cause: err },
  );
}

/**
 * The server's shared lock table is full (SQLSTATE 53200, "out of shared memory"): while it is, new
 * connections of every application fail. Not LockUnavailableError: the database is up, and waiting
 * for it will not help until locks are released.
 */
export class LockTableFullError extends PgfenceError {
  /** Set when pgfence's own guard refused (before the server): what it saw. */
  readonly guard: { serverLocks: number; limit: number; table: number } | null;
  constructor(options?: { cause?: unknown; guard?: { serverLocks: number; limit: number; table: number } }) {
    const guard = options?.guard ?? null;
    super(
      'PGFENCE_LOCK_TABLE_FULL',
      guard
        ? `refused before the server: the server holds about ${guard.serverLocks} advisory locks and pgfence's lockers together keep under ` +
            `${guard.limit}, three quarters of its shared lock table (${guard.table} = max_locks_per_transaction x (max_connections + max_prepared_transactions)), ` +
            'so that other applications never run out of it: release locks, or raise max_locks_per_transaction on the server'
        : "PostgreSQL's shared lock table is full (out of shared memory, SQLSTATE 53200): release locks, lower maxHeldLocks, " +
            'or raise max_locks_per_transaction on the server (it sizes the table: max_locks_per_transaction x (max_connections + max_prepared_transactions))',
      { cause: options?.cause },
    );
    this.guard = guard;
  }
}

/** An acquisition was refused before reaching the server: this locker's maxHeldLocks budget is used up. */
export class LockBudgetError extends PgfenceError {
  readonly lockName: string | null;
  readonly key: bigint;
  readonly maxHeldLocks: number;
  constructor(lockName: string | null, key: bigint, maxHeldLocks: number, inUse: number) {
    super(
      'PGFENCE_LOCK_BUDGET',
      `lock ${describeLock(lockName, key)} refused: this locker holds or waits for ${inUse} locks and its maxHeldLocks budget is ${maxHeldLocks} ` +
        "(it keeps pgfence from filling the server's shared lock table, which fails every application's new connections); " +
        'release locks first, or raise maxHeldLocks together with max_locks_per_transaction on the server',
    );
    this.lockName = lockName;
    this.key = key;
    this.maxHeldLocks = maxHeldLocks;
  }
}

/**
 * The locker's pinned connections go through a transaction- or statement-pooling proxy (PgBouncer
 * and the like): a session lock would land on a server connection other clients then share, so it
 * would be neither exclusive nor released. Refused before any lock is taken.
 */
export class PooledConnectionError extends PgfenceError {
  constructor(via: 'connectionString' | 'directConnectionString') {
    super(
      'PGFENCE_POOLED_CONNECTION',
      `session locks (acquire, tryAcquire, withLock, acquireAll) need one PostgreSQL backend per connection, but ${via} goes through a ` +
        'transaction- or statement-pooling proxy (PgBouncer?) that shares backends between clients. What works through the pooler: ' +
        'leases (locker.lease()), xactLock()/tryXactLock() inside your transactions, semaphores (lease-backed permits), ' +
        'leader election (lease-only: failover at the lease TTL) and guarded writes. For session locks pass directConnectionString ' +
        "(straight to PostgreSQL, or a session-mode pool: used only for the locker's few pinned sessions and LISTEN)",
    );
  }
}
