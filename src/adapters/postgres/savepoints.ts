/**
 * postgres.js fails a whole sql.begin() on any statement of it that failed, even one the callback caught.
 * A busy lock's wait fails by design (lock_timeout ends a slice of it, a deadlock ends it), so inside
 * sql.begin() xactLock's scripts run in postgres.js's own savepoints (tx.savepoint), whose failures it
 * contains: shared/savepoint-scripts.ts does the rest. What is postgres.js's own is here: two failures
 * it must never hear of, because its rollback to the savepoint would follow them:
 *
 * - a wait that fails after xactLock abandoned the transaction (PostgreSQL did not answer in time): the
 *   statement that doomed the transaction ran after the savepoint, and the rollback to it would make the
 *   doomed transaction usable again;
 * - a wait whose connection ended: postgres 3.4 would write that rollback to the closed socket, an
 *   uncaught TypeError from a timer (porsager/postgres#1208).
 *
 * Their scripts reject for xactLock at once, while postgres.js's savepoint is left waiting for good (it
 * holds nothing but the dead or doomed transaction's scope, and nothing waits for it).
 */
import { isConnectionLost, type SqlExecutor } from '../../core/index.js';
import type { InLibrarySavepoint } from '../shared/index.js';

/** What this module uses of sql.begin()'s scope (postgres.js's TransactionSql). */
export interface SavepointScope {
  savepoint<T>(fn: (sp: any) => T | Promise<T>): Promise<unknown>;
}

export interface PostgresSavepoints {
  /** Runs a script in a new savepoint of `scope`, through the savepoint scope's own executor. */
  run: InLibrarySavepoint;
  /** xactLock gave up on the transaction: from now on a failed script is not postgres.js's to roll back. */
  abandon(): void;
}

export function postgresSavepoints(scope: SavepointScope, executorOf: (sp: unknown) => SqlExecutor): PostgresSavepoints {
  let abandoned = false;
  return {
    abandon: () => void (abandoned = true),
    run: (script) =>
      new Promise((resolve, reject) => {
        scope
          .savepoint((sp) =>
            executorOf(sp)
              .script(script)
              .catch((err: unknown) => {
                if (!abandoned && !isConnectionLost(err)) throw err; // postgres.js rolls back to its savepoint, then rejects with it
                reject(err);
                return new Promise<never>(() => {});
              }),
          )
          .then((results) => resolve(results as Record<string, unknown>[][] | null), reject);
      }),
  };
}
