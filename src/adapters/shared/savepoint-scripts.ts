/**
 * For libraries that roll a transaction back as a whole once any statement in it failed, even one the
 * caller caught: postgres.js's `sql.begin()` (so drizzle-orm/postgres-js too) remembers the first error
 * of its transaction and throws it at the end instead of committing. A lock wait that timed out, or lost
 * a deadlock, inside xactLock would then take the caller's transaction down with it, although xactLock
 * undid the wait and PostgreSQL kept the transaction usable.
 *
 * Such a library keeps a failure inside its own savepoints (postgres.js: `sql.savepoint()`; drizzle:
 * `tx.transaction()` inside a transaction): each of xactLock's scripts runs in one, which the library
 * rolls back when the script fails. Two things follow, both handled here:
 * - that rollback also removes the wait's own savepoint (opened by the wait's first script), which the
 *   next script of the same wait (its next slice) starts by rolling back to: it is opened again first;
 * - an undo after such a failure has nothing left to undo: it sends nothing.
 * A successful script leaves the library's savepoint open (postgres.js releases none): the lock then
 * belongs to it, and is released as before when the caller rolls back a savepoint of its own around it.
 *
 * Statements (the free key's single try, the token) and the abandon() of a doomed transaction go to the
 * transaction itself: an abandon() must doom it, not a savepoint of it.
 */
import { reopenWaitSavepointSql, undoWaitScript, type XactExecutor } from '../../advisory/index.js';
import { libraryXactExecutor, type LibraryTransaction } from './transaction.js';

/** Runs a script in a new savepoint of the library's own, rolled back by the library when the script fails. */
export type InLibrarySavepoint = (script: string) => Promise<Record<string, unknown>[][] | null>;


/**
 * libraryXactExecutor for a library whose transaction does not survive a failed statement: xactLock's
 * scripts run in the library's savepoints (`inSavepoint`). Make one per xactLock call (it follows
 * that call's wait).
 */
export function libraryXactExecutorInSavepoints(t: LibraryTransaction, inSavepoint: InLibrarySavepoint): XactExecutor {
  const base = libraryXactExecutor(t);
  // The library rolled back the last script, and the wait's savepoint with it.
  let waitSavepointGone = false;
  return {
    ...base,
    async script(text) {
      const reopen = waitSavepointGone;
      if (reopen && text === undoWaitScript) {
        waitSavepointGone = false;
        return null;
      }
      try {
        // The reopening statement's (empty) result comes first: xactLock finds a wait's row by its columns.
        const results = await inSavepoint(reopen ? `${reopenWaitSavepointSql};\n${text}` : text);
        waitSavepointGone = false;
        return results;
      } catch (err) {
        waitSavepointGone = true;
        throw err;
      }
    },
  };
}
