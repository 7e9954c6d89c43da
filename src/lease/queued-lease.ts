import { type Cancel, isLockNotAvailable, isQueryCanceled, LockUnavailableError, PgfenceError, schemaMissingError, sqlState } from '../core/index.js';
import { SessionLostError, WITHDRAWN } from '../session/index.js';
import type { Attempt, Busy, WaiterQueue } from '../wait/index.js';
import { leaseStatements } from './lease-sql.js';

/** A lease statement's answer (pgfence.lease_acquire). */
export interface AcquireRow {
  granted: boolean;
  /** Null when busy: a token is its holder's alone. */
  token: string | null;
  owner: string;
  acquired_at: Date;
  expires_at: Date;
  /** Null when a session lock holds the name: nobody knows for how long. */
  remaining_ms: number | null;
}

/** What a busy answer tells the line: a lease's time left, or (NULL) a lock holds the name. */
export function busyWith(row: AcquireRow): Busy {
  return row.remaining_ms === null ? { busy: true, lockHeld: true } : { busy: true, leaseHeld: true, retryInMs: row.remaining_ms + 1 };
}

/** After a queued wait ended without a grant, the waiter looks again this soon. */
const LOOK_AGAIN_MS = 1;

interface QueuedRequest {
  target: { key: bigint; name: string | null };
  owner: string;
  ttlMs: number;
  data: unknown;
  minHoldMs: number;
}

/**
 * A lease waiter that found its name held by a lock waits in PostgreSQL's FIFO queue for the key on the
 * locker's waiter session, then takes the lease in the same transaction (acquireQueuedLeaseSql): lockers
 * that hand the key over among themselves cannot starve it. Null when the waiter session is not free.
 * `granted` makes the holder's handle, given when (on the local clock) the lease was granted.
 */
export function acquireQueued<H>(
  queue: WaiterQueue,
  request: QueuedRequest,
  remainingMs: number,
  cancel: Cancel,
  granted: (row: AcquireRow, grantedAt: number) => H,
): Promise<Attempt<H>> | null {
  const { target, owner, ttlMs, data, minHoldMs } = request;
  // Before the statement is sent: the deadline counted from here is never later than the server's.
  const sentAt = performance.now();
  const started = queue.run<AcquireRow & { waited_ms: number }>(
    leaseStatements.acquireQueued,
    [target.key, target.name, owner, ttlMs, data === undefined ? null : JSON.stringify(data), minHoldMs, remainingMs === Infinity ? null : Math.ceil(remainingMs)],
    remainingMs,
    cancel,
  );
  if (!started) return null;
  return started.rows.then(
    (rows) => {
      const row = rows[0]!;
      if (!row.granted) return busyWith(row);
      // Granted at the end of the wait: the local deadline counts from the send plus the server's wait before the
      // grant (never from the answer's arrival, which a slow network delays past the server's expiry).
      return { granted: granted(row, sentAt + row.waited_ms) };
    },
    (err: unknown) => {
      // Cancelled (the waiter gave up), taken back unsent, or the session died: nothing was taken (one transaction).
      if (isQueryCanceled(err) || isLockNotAvailable(err) || sqlState(err) === WITHDRAWN) return { busy: true, retryInMs: LOOK_AGAIN_MS };
      if (err instanceof SessionLostError && err.connected) return { retry: true };
      // The waiter session could not connect (behind a transaction pooler, say): leases need none; poll.
      if (err instanceof SessionLostError) return { busy: true };
      throw schemaMissingError(err) ?? (err instanceof PgfenceError ? err : new LockUnavailableError(`a lease statement failed: ${(err as Error)?.message}`, { cause: err }));
    },
  );
}
