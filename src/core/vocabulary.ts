/**
 * The words every part of pgfence describes a lock with. Kept apart from the code that acts on
 * them, so any module can name a mode or a kind without importing (or cycling through) that code.
 */

/** What took the lock: a session lock, a transaction lock, a lease, a semaphore permit, a leader's guard. */
export type LockKind = 'lock' | 'xact' | 'lease' | 'semaphore' | 'leader';
export type LockMode = 'exclusive' | 'shared';

/** Why a held lock stopped being held. */
export type LockLostReason = 'session-lost' | 'ttl-expired' | 'lease-expired' | 'lease-stolen' | 'closed';

/** What every lock event carries. */
export interface LockEventInfo {
  kind: LockKind;
  name: string | null;
  key: bigint;
  mode: LockMode;
}

/** A held lock as the observer sees it (every handle is one). */
export interface HeldLockInfo extends LockEventInfo {
  readonly token: bigint | null;
}
