/**
 * The one seam every data-layer adapter plugs into: a library's transaction object becomes an
 * XactExecutor (advisory/xact.ts), and xactLock / tryXactLock are the same two functions for all of
 * them, typed on the library's own transaction type. Only the executor is written per library.
 */
import type { SqlExecutor } from '../../core/index.js';
import type { LockName } from '../../keys.js';
import {
  doomTransactionSql,
  type FencedXactLockOptions,
  type FencedXactLockResult,
  tryXactLockWith,
  type XactExecutor,
  type XactLockOptions,
  type XactLockResult,
  xactLockWith,
} from '../../advisory/index.js';

/** What an adapter knows of the caller's transaction; the rest of an XactExecutor is the same for every library. */
export interface LibraryTransaction {
  /** Runs pgfence's statements on the transaction's own connection. */
  sql: SqlExecutor;
  /** The library's transaction object (or the connection, when `perTransaction` is false). */
  identity: object;
  /** Stands for the database across transactions (one per client / instance): whether it has the lease guard is kept here. */
  database: object;
  /** True when `identity` lives for exactly one transaction (a new object per transaction). */
  perTransaction: boolean;
  /** The transaction status known without I/O ('unknown': the server is asked in the same statement). */
  status(): 'idle' | 'active' | 'failed' | 'unknown';
  /** Where the error tells the caller to go when the transaction is doomed, e.g. "let the error leave the sql.begin() callback". */
  rollbackAdvice: string;
  /**
   * Ends the transaction's connection. Given, it dooms the transaction instead of a queued failing
   * statement: for libraries over node-postgres that do not queue a transaction's statements themselves
   * (the statement would wait in node-postgres' own queue, which pg 8 deprecates and pg 9 removes).
   */
  endConnection?: () => Promise<unknown> | void;
}

/**
 * The XactExecutor of a transaction whose connection belongs to the library, not to pgfence: when
 * PostgreSQL does not answer in time, a statement that fails is queued right behind the unanswered one,
 * so whatever the caller sends next is refused (25P02) until the transaction is rolled back; or, with
 * `endConnection`, the connection is ended (the server rolls the transaction back when it sees it go).
 */
export function libraryXactExecutor(t: LibraryTransaction): XactExecutor {
  return {
    query: (text, values) => t.sql.query(text, values),
    script: (text) => t.sql.script(text),
    scriptResults: t.sql.scriptResults,
    identity: t.identity,
    database: t.database,
    perTransaction: t.perTransaction,
    status: () => t.status(),
    abandonAdvice: `the transaction is doomed (every later statement in it fails${t.endConnection ? ': pgfence ended its connection' : ''}): ${t.rollbackAdvice}, and retry`,
    abandon() {
      if (t.endConnection) {
        // A failed end leaves the connection ended all the same: nothing runs in that transaction any more.
        void Promise.resolve(t.endConnection()).catch(() => {});
        return;
      }
      t.sql.script(doomTransactionSql).catch(() => {}); // it fails by design
    },
  };
}

/** xactLock on a library's transaction type T (a fencing token with `fencing: true`). */
export interface XactLockFunction<T> {
  (trx: T, name: LockName, opts: FencedXactLockOptions): Promise<FencedXactLockResult>;
  (trx: T, name: LockName, opts?: XactLockOptions): Promise<XactLockResult>;
}

/** tryXactLock on a library's transaction type T: null when the lock is held elsewhere. */
export interface TryXactLockFunction<T> {
  (trx: T, name: LockName, opts: Omit<FencedXactLockOptions, 'timeoutMs'>): Promise<FencedXactLockResult | null>;
  (trx: T, name: LockName, opts?: Omit<XactLockOptions, 'timeoutMs'>): Promise<XactLockResult | null>;
}

/** xactLock for a library, from the function that turns its transaction object into an executor. */
export function xactLockOn<T>(executorOf: (trx: T) => XactExecutor): XactLockFunction<T> {
  // async: a transaction object refused by executorOf rejects the promise, it does not throw synchronously.
  return (async (trx: T, name: LockName, opts?: XactLockOptions) => xactLockWith(executorOf(trx), name, opts)) as XactLockFunction<T>;
}

/** tryXactLock for a library, from the function that turns its transaction object into an executor. */
export function tryXactLockOn<T>(executorOf: (trx: T) => XactExecutor): TryXactLockFunction<T> {
  return (async (trx: T, name: LockName, opts?: Omit<XactLockOptions, 'timeoutMs'>) => tryXactLockWith(executorOf(trx), name, opts)) as TryXactLockFunction<T>;
}
