/** lock_timeout's largest value: PostgreSQL keeps it as an int of milliseconds and refuses more. */
const MAX_LOCK_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * A wait's bound as a lock_timeout value: '0' (none) for Infinity, else whole milliseconds, at least 1
 * (0 would mean none), at most what PostgreSQL takes: a longer bound ends as a timeout after ~24.8
 * days, and the waiter, with time left, waits again.
 */
export function lockTimeoutSetting(ms: number): string {
  return ms === Infinity ? '0' : `${Math.min(MAX_LOCK_TIMEOUT_MS, Math.max(1, Math.ceil(ms)))}ms`;
}
