import { DeadlockError, describeLock, InvalidArgumentError, isConnectionLost, type LockMode, LockTimeoutError, LockUnavailableError, NestedLockError, NotInTransactionError, schemaMissingError, type SqlExecutor, sqlState, SQLSTATE, TransactionAbortedError } from '../core/index.js';
import { nameToBytes, resolveLock, type LockName, type LockTarget } from '../keys.js';
import { abortSignal, booleanOption, durationMs, oneOf, optionKeys, optionsObject } from '../options.js';
import { afterWaitSql, tryXactLockSql, undoWaitScript, waitXactLockScript } from './xact-sql.js';

export interface XactLockOptions {
  mode?: LockMode;
  /** Bound on the wait: 0 = one try, Infinity = no bound; default 10000. */
  timeoutMs?: number;
  /** Aborts the wait (checked between wait slices of at most 250 ms). */
  signal?: AbortSignal;
  fencing?: boolean;
  /** Prefix hashed together with the name, as the locker's namespace option. */
  namespace?: string;
}
const XACT_LOCK_OPTION_KEYS = optionKeys<XactLockOptions>({ mode: true, timeoutMs: true, signal: true, fencing: true, namespace: true });

export interface XactLockResult {
  key: bigint;
  /** The fencing token when `fencing: true` was asked, else null. */
  token: bigint | null;
}

/** XactLockOptions asking for a fencing token: the result's `token` is then a bigint, never null. */
export type FencedXactLockOptions = XactLockOptions & { fencing: true };
export interface FencedXactLockResult extends XactLockResult {
  token: bigint;
}

/** The caller's transaction, as xactLock talks to it: a node-postgres client or a Kysely transaction. */
export interface XactExecutor extends SqlExecutor {
  /** Kysely: the transaction object itself, new per transaction. node-postgres: the client. */
  readonly identity: object;
  /**
   * Stands for the database the transactions run in, across transactions (node-postgres: the client;
   * Kysely: its dialect adapter, one per Kysely instance): whether it has the lease guard is kept here.
   */
  readonly database: object;
  /**
   * True when the keys held under `identity` are those of the current transaction: it lives for exactly
   * one transaction, or the executor calls forgetHeldKeys(identity) whenever a transaction ends.
   */
  readonly perTransaction: boolean;
  /** The transaction status known without I/O. */
  status(): 'idle' | 'active' | 'failed' | 'unknown';
  /**
   * PostgreSQL has not answered one of our statements in time: make sure nothing the caller sends
   * later runs in this transaction as if the lock call had merely failed.
   */
  abandon(): void;
  /** What abandon() did and what the caller should do, for the error message. */
  readonly abandonAdvice: string;
}

const DEFAULT_TIMEOUT_MS = 10_000;
/** A cancellable wait is cut into slices this long, so an abort is seen within one slice. */
const SLICE_MS = 250;

/**
 * The client-side bound on every statement xactLock sends: PostgreSQL answers a wait by itself when its
 * lock_timeout (the wait's bound) fires, so a statement still unanswered this long after its own bound
 * means the server or the network is gone, not that the lock is busy.
 */
export const ANSWER_GRACE_MS = 2000;

/** A statement went unanswered past its bound plus ANSWER_GRACE_MS. */
class NoAnswer {
  constructor(
    readonly afterMs: number,
    readonly advice: string,
  ) {}
}

/** Keys held per transaction: identity -> key -> transaction start (epoch text, or '' when per-transaction). */
const heldKeys = new WeakMap<object, Map<bigint, string>>();

/**
 * Databases (XactExecutor.database) known to have pgfence's schema, whose transaction locks give way to
 * leases. Any other is sent the plain statement, which looks for the guard itself (see tryXactLockSql).
 */
const guardedDatabases = new WeakSet<object>();

/** The transaction of `identity` has ended: every transaction lock it held is gone. */
export function forgetHeldKeys(identity: object): void {
  heldKeys.delete(identity);
}

interface Prepared {
  target: LockTarget;
  shared: boolean;
  fencing: boolean;
  timeoutMs: number;
  signal: AbortSignal | undefined;
  nestedIn: string | null;
}

function prepare(exec: XactExecutor, name: LockName, opts: XactLockOptions | undefined, tryOnly: boolean): Prepared {
  const o = optionsObject<XactLockOptions>(opts, tryOnly ? 'tryXactLock options' : 'xactLock options', XACT_LOCK_OPTION_KEYS);
  if (o.namespace !== undefined) nameToBytes('namespace', o.namespace);
  const target = resolveLock(name, o.namespace);
  const mode = oneOf(o.mode, 'mode', ['exclusive', 'shared'] as const, 'exclusive');
  const fencing = booleanOption(o.fencing, 'fencing', false);
  if (fencing && mode === 'shared') {
    throw new InvalidArgumentError('fencing', "fencing tokens are issued to exclusive holders only; use mode 'exclusive'");
  }
  let timeoutMs = o.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : durationMs(o.timeoutMs, 'timeoutMs', { allowInfinity: true });
  if (tryOnly) {
    if (o.timeoutMs !== undefined && o.timeoutMs !== 0) {
      throw new InvalidArgumentError('timeoutMs', 'tryXactLock makes a single attempt; use xactLock() to wait');
    }
    timeoutMs = 0;
  }
  const signal = abortSignal(o.signal);
  const status = exec.status();
  if (status === 'idle') throw new NotInTransactionError();
  if (status === 'failed') throw new TransactionAbortedError();
  const held = heldKeys.get(exec.identity)?.get(target.key);
  if (held !== undefined && exec.perTransaction) throw new NestedLockError(target.name, target.key, target.name, target.key);
  return { target, shared: mode === 'shared', fencing, timeoutMs, signal, nestedIn: held ?? null };
}

/**
 * Takes a transaction-scoped advisory lock inside the caller's transaction: it is released when that
 * transaction ends. Waits up to timeoutMs (LockTimeoutError); a timeout or deadlock leaves the
 * transaction usable and the caller's lock_timeout as it was.
 */
export async function xactLockWith(exec: XactExecutor, name: LockName, opts?: XactLockOptions): Promise<XactLockResult> {
  const p = prepare(exec, name, opts, false);
  const deadline = p.timeoutMs === Infinity ? Infinity : performance.now() + p.timeoutMs;
  if (p.timeoutMs !== 0 && p.signal?.aborted) throw p.signal.reason;
  // A free key costs one plain statement. Only a busy one waits, in the savepoint script: a statement
  // that fails or times out while waiting is rolled back without the caller's transaction.
  const result = (await tryOnce(exec, p)) ?? (p.timeoutMs === 0 ? null : await wait(exec, p, deadline));
  if (!result) throw new LockTimeoutError(p.target.name, p.target.key, p.timeoutMs, 'xact');
  return result;
}

/** One attempt at a transaction-scoped lock: null when it is held elsewhere. */
export async function tryXactLockWith(exec: XactExecutor, name: LockName, opts?: Omit<XactLockOptions, 'timeoutMs'>): Promise<XactLockResult | null> {
  return tryOnce(exec, prepare(exec, name, opts, true));
}

async function tryOnce(exec: XactExecutor, p: Prepared): Promise<XactLockResult | null> {
  type Row = { in_xact: boolean; nested: boolean; guard: boolean; granted: boolean | null; xact?: string; token?: string | null };
  let row: Row;
  for (;;) {
    const guarded = guardedDatabases.has(exec.database);
    try {
      const sql = tryXactLockSql({ key: p.target.key, shared: p.shared, fenced: p.fencing, nestedIn: p.nestedIn, identify: !exec.perTransaction, guarded });
      row = (await answered(exec, 0, () => exec.query<Row>(sql, [])))[0]!;
    } catch (err) {
      throw translate(err, p, exec);
    }
    // The database has the lease guard (migrate() ran since this connection was last asked): nothing was taken; try guarded.
    if (!row.guard || guarded) break;
    guardedDatabases.add(exec.database);
  }
  if (!row.in_xact) throw new NotInTransactionError();
  if (row.nested) throw new NestedLockError(p.target.name, p.target.key, p.target.name, p.target.key);
  if (!row.granted) return null;
  return granted(exec, p, row.xact ?? '', row.token ?? null);
}

async function wait(exec: XactExecutor, p: Prepared, deadline: number): Promise<XactLockResult | null> {
  let first = true;
  for (;;) {
    if (p.signal?.aborted) {
      if (!first) await undo(exec, p);
      throw p.signal.reason;
    }
    const remaining = deadline - performance.now();
    const slice = Math.max(1, p.signal ? Math.min(remaining, SLICE_MS) : remaining);
    let results: Record<string, unknown>[][] | null;
    try {
      const script = waitXactLockScript({
        key: p.target.key,
        shared: p.shared,
        timeoutMs: slice,
        first,
        nestedIn: p.nestedIn,
        fenced: p.fencing && exec.scriptResults,
        guarded: guardedDatabases.has(exec.database),
      });
      // The server gives up at `slice` (its lock_timeout); the client at slice + ANSWER_GRACE_MS.
      results = await answered(exec, slice, () => exec.script(script));
    } catch (err) {
      const code = sqlState(err);
      if (isConnectionLost(err)) throw translate(err, p, exec);
      if (code === SQLSTATE.lockNotAvailable) {
        first = false;
        if (deadline - performance.now() > 1 || p.signal?.aborted) continue; // the next slice, or the abort above
        await undo(exec, p);
        return null;
      }
      // A savepoint refused outside a transaction (25P01) or in an aborted one (25P02) left nothing to undo.
      if (code !== SQLSTATE.noActiveTransaction && code !== SQLSTATE.inFailedTransaction) await undo(exec, p);
      throw translate(err, p, exec);
    }
    const row = results?.find((rows) => rows[0] && 'locked' in rows[0])?.[0];
    if (row?.nested === true) throw new NestedLockError(p.target.name, p.target.key, p.target.name, p.target.key);
    let token = typeof row?.token === 'string' ? row.token : null;
    let xact = typeof row?.xact === 'string' ? row.xact : '';
    // The driver reported no rows for the script: one more statement for the token, and for the
    // transaction's start time where the executor cannot tell one transaction from the next itself.
    if (!row && (p.fencing || !exec.perTransaction)) {
      try {
        const [after] = await answered(exec, 0, () => exec.query<{ token: string | null; xact: string }>(afterWaitSql(p.fencing), [p.target.key]));
        token = after!.token;
        xact = after!.xact;
      } catch (err) {
        throw translate(err, p, exec);
      }
    }
    return granted(exec, p, xact, token);
  }
}

function granted(exec: XactExecutor, p: Prepared, xact: string, token: string | null): XactLockResult {
  let keys = heldKeys.get(exec.identity);
  if (!keys) heldKeys.set(exec.identity, (keys = new Map()));
  keys.set(p.target.key, xact);
  return { key: p.target.key, token: token === null ? null : BigInt(token) };
}

/** Rolls back to the wait's savepoint. Throws only when the server did not answer (the transaction is then abandoned). */
async function undo(exec: XactExecutor, p: Prepared): Promise<void> {
  try {
    await answered(exec, 0, () => exec.script(undoWaitScript));
  } catch (err) {
    if (err instanceof NoAnswer) throw translate(err, p, exec);
    // The connection is gone, or the transaction was ended underneath us: nothing is left to undo.
  }
}

/**
 * Runs one statement on the caller's connection with a client-side bound: PostgreSQL must answer
 * within `serverBoundMs` (the statement's own lock_timeout; 0 for one that does not wait) plus
 * ANSWER_GRACE_MS, whatever the network does. Past that the executor abandons the transaction.
 */
function answered<T>(exec: XactExecutor, serverBoundMs: number, run: () => Promise<T>): Promise<T> {
  const pending = run();
  if (serverBoundMs === Infinity) return pending; // asked to wait without bound
  const limitMs = serverBoundMs + ANSWER_GRACE_MS;
  return new Promise<T>((resolve, reject) => {
    const watched: Watched = {
      at: performance.now() + limitMs,
      expire: () => {
        pending.catch(() => {}); // settles when the connection ends or the network heals; nobody waits for it
        exec.abandon();
        reject(new NoAnswer(limitMs, exec.abandonAdvice));
      },
    };
    watch(watched);
    pending.then(
      (value) => {
        inFlight.delete(watched);
        resolve(value);
      },
      (err: unknown) => {
        inFlight.delete(watched);
        reject(err);
      },
    );
  });
}

/**
 * Statements in flight and when each is overdue, checked by one timer for all of them: arming and
 * clearing a timer per statement costs about as much as a free key's whole statement.
 */
interface Watched {
  at: number;
  expire(): void;
}
const inFlight = new Set<Watched>();
/** How late past its bound an unanswered statement may be noticed. */
const WATCH_EVERY_MS = 100;
let watchdog: NodeJS.Timeout | null = null;

function watch(entry: Watched): void {
  inFlight.add(entry);
  if (watchdog) return;
  watchdog = setInterval(() => {
    const now = performance.now();
    for (const e of inFlight) {
      if (e.at > now) continue;
      inFlight.delete(e);
      e.expire();
    }
    if (inFlight.size === 0) {
      clearInterval(watchdog!);
      watchdog = null;
    }
  }, WATCH_EVERY_MS);
  watchdog.unref(); // the statement's own socket keeps the process alive
}

function translate(err: unknown, p: Prepared, exec: XactExecutor): Error {
  if (err instanceof NoAnswer) {
    return new LockUnavailableError(
      `PostgreSQL did not answer within ${err.afterMs} ms while taking transaction lock ${describeLock(p.target.name, p.target.key)} ` +
        `(server or network down): ${err.advice}`,
      { cause: new Error(`no answer from PostgreSQL within ${err.afterMs} ms`) },
    );
  }
  const missing = schemaMissingError(err);
  if (missing) {
    // The schema went (or was never there for a fenced lock): the next transaction looks for the guard again.
    guardedDatabases.delete(exec.database);
    return missing;
  }
  const code = sqlState(err);
  if (code === SQLSTATE.noActiveTransaction) return new NotInTransactionError();
  if (code === SQLSTATE.inFailedTransaction) return new TransactionAbortedError({ cause: err });
  if (code === SQLSTATE.deadlockDetected) return new DeadlockError(p.target.name, p.target.key, { cause: err });
  if (code === SQLSTATE.queryCanceled) {
    // The caller's statement_timeout (or a cancel request) ended the wait.
    const e = new LockTimeoutError(p.target.name, p.target.key, p.timeoutMs, 'xact');
    (e as { cause?: unknown }).cause = err;
    return e;
  }
  if (isConnectionLost(err)) return new LockUnavailableError(`transaction lock failed: ${(err as Error)?.message}`, { cause: err });
  return err instanceof Error ? err : new Error(String(err));
}
