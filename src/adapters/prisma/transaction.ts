import type { XactExecutor } from '../../advisory/index.js';
import { libraryXactExecutor } from '../shared/index.js';
import { prismaSqlExecutor, type PrismaRawClient } from './sql-executor.js';

/**
 * The `tx` of prisma.$transaction(async (tx) => ...): a client without $connect, $disconnect, $on,
 * $use and $extends (Prisma's ITXClientDenyList). The PrismaClient itself is refused by the type, and
 * at run time with NotInTransactionError.
 */
export type PrismaTransactionClient = PrismaRawClient & { $connect?: never };

/**
 * Where Prisma keeps an interactive transaction's scope on its transaction client: a registered
 * symbol (Symbol.for), so every copy of Prisma's runtime reads the same key. Its `scopeState` is one
 * object per top-level transaction, shared by the transactions nested in it (tx.$transaction, on
 * savepoints), which are one PostgreSQL transaction.
 */
const TRANSACTION_SCOPE = Symbol.for('prisma.client.transaction.scope_context');

interface TransactionScope {
  kind?: unknown;
  scopeState?: unknown;
}

/** The transaction's scope, when `tx` is an interactive transaction client. */
function scopeOf(tx: object): TransactionScope | undefined {
  const scope = (tx as Record<symbol, unknown>)[TRANSACTION_SCOPE];
  return typeof scope === 'object' && scope !== null ? (scope as TransactionScope) : undefined;
}

/**
 * Transaction clients whose transaction xactLock doomed (abandon()): settles once the statement that
 * dooms it has left Prisma's request batching, so that it goes before anything the caller sends next.
 */
const dooming = new WeakMap<object, Promise<void>>();

/**
 * Rethrows xactLock's error, once the statement that dooms the transaction (if it was doomed) has left
 * Prisma's request batching. Prisma runs the requests of one interactive transaction made in the same
 * tick as one batch; a request batched behind the failing doom would resolve as if it had run, without
 * running. The caller's next statement, made when it hears of the failure, must be a batch of its own,
 * queued behind the doom.
 */
export async function afterDoom(tx: unknown, err: unknown): Promise<never> {
  const doomed = typeof tx === 'object' && tx !== null ? dooming.get(tx) : undefined;
  if (doomed) await doomed;
  throw err;
}

/** A Prisma transaction client as xactLock's executor. */
export function prismaXactExecutor(tx: PrismaTransactionClient): XactExecutor {
  const sql = prismaSqlExecutor(tx, 'tx', 'the Prisma transaction client of prisma.$transaction(async (tx) => ...)');
  const scope = scopeOf(tx);
  const state = scope?.scopeState;
  const executor = libraryXactExecutor({
    sql,
    // One object per PostgreSQL transaction: the top-level transaction's scope, which nested ones share
    // (their own tx is a new object each); else the transaction client, new per transaction too.
    identity: typeof state === 'object' && state !== null ? state : tx,
    // The client's query engine: one per PrismaClient, the same object through its transaction clients
    // and extensions (each of those is a new proxy of the client). Whether the database has the lease
    // guard is kept per database object: a missing one only costs a catalog lookup per transaction.
    database: engineOf(tx),
    perTransaction: true,
    status: () => (scope?.kind === 'nested' ? 'active' : typeof (tx as { $connect?: unknown }).$connect === 'function' ? 'idle' : 'unknown'),
    rollbackAdvice: 'let the error leave the prisma.$transaction() callback so Prisma rolls it back',
  });
  return {
    ...executor,
    abandon() {
      executor.abandon();
      // Prisma dispatches a transaction's requests on process.nextTick: by the next check phase (setImmediate) the doom has left.
      dooming.set(tx, new Promise((resolve) => setImmediate(resolve)));
    },
  };
}

function engineOf(tx: object): object {
  const engine = (tx as { _engine?: unknown })._engine;
  return typeof engine === 'object' && engine !== null ? engine : tx;
}
