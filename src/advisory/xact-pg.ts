import type pg from 'pg';
import { pgSqlExecutor } from '../core/index.js';
import type { LockName } from '../keys.js';
import {
  forgetHeldKeys,
  tryXactLockWith,
  xactLockWith,
  type FencedXactLockOptions,
  type FencedXactLockResult,
  type XactExecutor,
  type XactLockOptions,
  type XactLockResult,
} from './xact.js';

/** Made once per client (it holds nothing that changes): the executor showed in xactLock's profile. */
const executors = new WeakMap<object, XactExecutor>();

/** node-postgres: a client (or pool client) inside BEGIN ... COMMIT. */
function pgExecutor(client: pg.ClientBase): XactExecutor {
  const known = executors.get(client as object);
  if (known) return known;
  const made = makePgExecutor(client);
  executors.set(client, made);
  return made;
}

function makePgExecutor(client: pg.ClientBase): XactExecutor {
  const sql = pgSqlExecutor(client, 'client', 'a node-postgres client inside a transaction');
  const withStatus = client as pg.ClientBase & { getTransactionStatus?: () => string | null };
  return {
    ...sql,
    identity: client,
    database: client,
    perTransaction: followsTransactions(client),
    status() {
      // pg >= 8.16 reports the server's transaction status from its last ReadyForQuery.
      const s = typeof withStatus.getTransactionStatus === 'function' ? withStatus.getTransactionStatus() : null;
      return s === 'I' ? 'idle' : s === 'T' ? 'active' : s === 'E' ? 'failed' : 'unknown';
    },
    abandonAdvice:
      'the client was ended, and its transaction with it (the server rolls it back once it notices): ' +
      'discard this client (a pool client: release() it; the pool drops it) and retry on another',
    abandon() {
      // Ending the client is the one sure way that nothing the caller sends later runs in that
      // transaction. end(), unlike a socket error, emits no 'error' event for an unwary caller to crash on.
      if (typeof (client as { totalCount?: unknown }).totalCount === 'number') return; // a pool: no transaction to protect
      const end = (client as { end?: () => Promise<void> }).end;
      // A failed end() leaves the client ended all the same: nothing runs in that transaction any more.
      if (typeof end === 'function') void Promise.resolve(end.call(client)).catch(() => {});
    },
  };
}

/** Clients whose transaction ends xactLock hears of. */
const followed = new WeakSet<pg.ClientBase>();

/**
 * Forgets a client's transaction locks whenever PostgreSQL reports it idle (ReadyForQuery 'I': its
 * transaction ended), before the statement that ended it resolves. Then no statement has to say which
 * transaction it runs in. False where the driver does not expose its protocol messages (pg-native).
 */
function followsTransactions(client: pg.ClientBase): boolean {
  if (followed.has(client)) return true;
  const connection = (client as { connection?: { on?: (event: string, fn: (msg: { status?: string }) => void) => void } }).connection;
  if (typeof connection?.on !== 'function') return false;
  connection.on('readyForQuery', (msg) => {
    if (msg?.status === 'I') forgetHeldKeys(client);
  });
  followed.add(client);
  return true;
}

/**
 * Takes pg_advisory_xact_lock inside the caller's transaction (released at COMMIT or ROLLBACK).
 * Throws NotInTransactionError outside a transaction, TransactionAbortedError in a failed one,
 * LockTimeoutError after timeoutMs (the transaction stays usable), DeadlockError when PostgreSQL
 * breaks a deadlock, and LockUnavailableError when PostgreSQL does not answer within timeoutMs plus
 * ANSWER_GRACE_MS (2 s): the client is then ended, so discard it.
 *
 * @example
 * ```ts fragment
 * const client = await pool.connect();
 * try {
 *   await client.query('BEGIN');
 *   const { token } = await xactLock(client, 'invoice:42', { fencing: true }); // held until COMMIT or ROLLBACK
 *   await fencedUpdate(client, { table: 'invoices', set: { status: 'paid' }, where: { id: 42 }, token });
 *   await client.query('COMMIT');
 * } finally {
 *   client.release();
 * }
 * ```
 */
export async function xactLock(client: pg.ClientBase, name: LockName, opts: FencedXactLockOptions): Promise<FencedXactLockResult>;
export async function xactLock(client: pg.ClientBase, name: LockName, opts?: XactLockOptions): Promise<XactLockResult>;
export async function xactLock(client: pg.ClientBase, name: LockName, opts?: XactLockOptions): Promise<XactLockResult> {
  return xactLockWith(pgExecutor(client), name, opts);
}

/**
 * One try at a transaction lock inside the caller's transaction; null when it is held elsewhere.
 *
 * @example
 * ```ts fragment
 * await client.query('BEGIN');
 * const got = await tryXactLock(client, 'invoice:42');
 * if (!got) console.log('another transaction holds it');
 * await client.query('COMMIT');
 * ```
 */
export async function tryXactLock(
  client: pg.ClientBase,
  name: LockName,
  opts: Omit<FencedXactLockOptions, 'timeoutMs'>,
): Promise<FencedXactLockResult | null>;
export async function tryXactLock(client: pg.ClientBase, name: LockName, opts?: Omit<XactLockOptions, 'timeoutMs'>): Promise<XactLockResult | null>;
export async function tryXactLock(
  client: pg.ClientBase,
  name: LockName,
  opts?: Omit<XactLockOptions, 'timeoutMs'>,
): Promise<XactLockResult | null> {
  return tryXactLockWith(pgExecutor(client), name, opts);
}
