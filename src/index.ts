export { createLocker } from './locker.js';
export type { AcquireOptions, FencedAcquireOptions, LeaseOptions, Locker, LockerOptions } from './locker.js';
export type { Semaphore, SemaphoreAcquireOptions, SemaphoreOptions } from './advisory/semaphore.js';
export type { FencedLockHandle, LockHandle } from './core/handle.js';
export { lockKey } from './keys.js';
export type { LockKeyOptions, LockName } from './keys.js';
export {
  DeadlockError,
  InvalidArgumentError,
  LockBudgetError,
  LockerClosedError,
  LockLostError,
  LockTableFullError,
  LockTimeoutError,
  LockUnavailableError,
  NestedLockError,
  NotInTransactionError,
  PgfenceError,
  PooledConnectionError,
  StaleTokenError,
  TransactionAbortedError,
} from './errors.js';
export { PGFENCE_ERROR_CODES } from './errors.js';
export type { PgfenceErrorCode } from './errors.js';
export type { LockKind, LockLostReason, LockMode } from './core/vocabulary.js';
export type { Logger } from './observe/logger.js';
export type { Meter } from './observe/metrics.js';
export type {
  AcquiredEvent,
  BounceEvent,
  ContentionEvent,
  LockerEvents,
  LockerStats,
  LostEvent,
  ReleasedEvent,
  TimeoutEvent,
} from './observe/events.js';
export { tryXactLock, xactLock } from './advisory/xact-pg.js';
export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from './advisory/xact.js';
export { fencedClaim, fencedUpdate } from './fencing/fenced-update-pg.js';
export type { FencedUpdateResult, FencedUpdateSpec } from './fencing/fenced-update.js';
export type { FencedClaimResult, FencedClaimSpec } from './fencing/fenced-claim.js';
export { fencingColumnSql } from './fencing/fencing-column.js';
export type { FencingColumnOptions } from './fencing/fencing-column.js';
export type { LeaseHandle } from './lease/lease-manager.js';
export type { DemotedEvent, DemotionReason, ElectedEvent, LeaderElection, LeaderEvents, WhenElectedOptions } from './lease/leader.js';
export { migrate } from './migrate/index.js';
export type { MigrateOptions, MigrateResult } from './migrate/index.js';
export type { LeaseEntry, LockEntry, LockReport } from './observe/inspect.js';
